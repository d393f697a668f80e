//! `rip-probe dump`: a ring file alone (no BPF) — read it (or, for the
//! original librip's format, hand it to [`super::original`]), correlate
//! its slots, filter, symbolize (through the live process when its writer
//! may speak for it, else the ring's module table), group once, render.

use std::{io::Write, path::PathBuf, time::Duration};

use clap::Args;

use super::{emit, filter_idle, parse_duration};
use crate::{
    analyze,
    collect::{procfs, ring::RingView},
    correlate::{self, DumpOptions, tasks::TaskClock},
    discover,
    error::{Error, Result},
    model::{ProcessInfo, Report},
    render,
    session::monotonic_ns,
    symbolize::{self, Symbolizer, UserSpace},
    util::timing,
};

/// `rip-probe dump`.
#[derive(Debug, Args)]
pub(crate) struct DumpArgs {
    /// A ring file (e.g. /dev/shm/rip-0/server.4711.ring).
    #[arg(required_unless_present = "pid", conflicts_with = "pid")]
    file: Option<PathBuf>,
    /// Find the ring of this live process through /proc/PID/maps.
    #[arg(long, short)]
    pid: Option<u32>,
    /// Per-thread history, oldest to newest, instead of the grouped view.
    #[arg(long)]
    threads: bool,
    /// Only these thread (or task) ids.
    #[arg(long)]
    tid: Vec<u64>,
    /// Only threads (and tasks) whose name matches this glob.
    #[arg(long, value_name = "GLOB")]
    name: Option<String>,
    /// Include slots marked exited.
    #[arg(long)]
    exited: bool,
    /// Only tasks idle at least this long (since their last poll ended, or
    /// their creation if never polled). Post-mortem, idle times run up to
    /// the last time the ring recorded, and are lower bounds.
    #[arg(long, value_parser = parse_duration)]
    min_idle: Option<Duration>,
    /// Print JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// For a ring of the original header-only librip: the program that
    /// wrote it, to symbolize its addresses (like `read_rip -e`; non-PIE
    /// programs only, as the original ring records no load address).
    #[arg(long, short, value_name = "BINARY")]
    exe: Option<PathBuf>,
}

pub(crate) fn run(a: &DumpArgs, out: &mut dyn Write) -> Result<()> {
    // A path found in a process's maps is not followed through a symlink.
    let (path, found) = match (&a.file, a.pid) {
        (Some(f), _) => (f.clone(), false),
        (None, Some(pid)) => (ring_of(pid)?, true),
        (None, None) => {
            return Err(Error::Usage(
                "say which ring: rip-probe dump FILE, or rip-probe dump --pid PID".into(),
            ));
        }
    };
    let open = if found {
        RingView::open_found
    } else {
        RingView::open
    };
    let ring = match timing::phase("read ring", || open(&path)) {
        Err(Error::Ring(librip::reader::ReadError::OriginalFormat)) => {
            return super::original::dump(&path, a.exe.as_deref(), a.json, out);
        }
        r => r?,
    };
    if a.exe.is_some() {
        return Err(Error::Usage(
            "--exe is for rings of the original librip; this ring names its own binaries".into(),
        ));
    }
    let alive = same_process_alive(&ring);
    // The ring's modules are joined with the live process's maps only if
    // whoever wrote the file could read those maps anyway.
    let trusted = alive && procfs::may_ptrace(ring.owner, ring.pid);
    let process = ProcessInfo {
        pid: ring.pid,
        exe: ring.exe.clone(),
        comm: None,
        alive,
        lost: None,
    };
    // A ring whose every slot exited (a finished program, like the
    // original librip's test.c) would show nothing: show what it left.
    let all_exited = ring.slots.iter().all(|s| s.exited);
    let opts = DumpOptions {
        history: a.threads,
        exited: a.exited || all_exited,
        clock: if alive {
            TaskClock::Now(monotonic_ns())
        } else {
            TaskClock::PostMortem
        },
    };
    let mut report = timing::phase("correlate", || correlate::dump(&ring, process, opts));
    let name = match &a.name {
        Some(g) => {
            Some(glob::Pattern::new(g).map_err(|e| Error::Usage(format!("--name {g}: {e}")))?)
        }
        None => None,
    };
    let keep = |id: u64, n: &str| {
        (a.tid.is_empty() || a.tid.contains(&id)) && name.as_ref().is_none_or(|g| g.matches(n))
    };
    report.threads.retain(|t| keep(t.tid, &t.name));
    report.tasks.retain(|t| keep(t.id, &t.name));

    // Live: blazesym reads the process's own maps; post-mortem: the ring's
    // module table (file offsets and build-ids).
    let space = if trusted {
        UserSpace::LiveWithModules(ring.pid, &ring.modules)
    } else {
        UserSpace::Modules(&ring.modules)
    };
    if alive && !trusted {
        report.warnings.push(format!(
            "the ring's owner (uid {}) may not trace pid {}: its addresses are symbolized from the ring's module table only",
            ring.owner, ring.pid
        ));
    }
    timing::phase("symbolize", || {
        symbolize::fill(&mut report, &space, &mut Symbolizer::new())
    });
    timing::phase("group", || {
        filter_idle(&mut report, a.min_idle);
        analyze::groups(&mut report);
    });
    let view: fn(&Report, &mut dyn Write) -> std::io::Result<()> = if a.threads {
        render::history
    } else {
        render::grouped
    };
    timing::phase("render", || emit(&report, a.json, out, view))
}

/// The ring of live process `pid`: the first mapped ring that names it.
fn ring_of(pid: u32) -> Result<PathBuf> {
    if !discover::exists(format!("/proc/{pid}")) {
        return Err(Error::NoSuchProcess(pid));
    }
    let rings = RingView::find(pid)?;
    rings.into_iter().next().ok_or(Error::NoRing(pid))
}

/// Whether the process that wrote `ring` is still running (same pid and
/// start time, so not a reuse of its pid).
fn same_process_alive(ring: &RingView) -> bool {
    // A killed process lingers as a zombie until reaped: its maps are gone.
    discover::stat(ring.pid, 0).is_some_and(|st| {
        st.start_time == ring.process_start_time && !matches!(st.state, 'Z' | 'X')
    })
}
