//! `rip-probe dump`: a ring file alone (no BPF) — read it (or, for the
//! original librip's format, hand it to [`super::original`]), correlate
//! its slots, filter, symbolize (through the live process when its writer
//! may speak for it, else the ring's module table), group once, render.

use std::{io::Write, path::PathBuf, time::Duration};

use clap::Args;

use super::{emit, filter_idle, output::Sink, parse_duration};
use crate::{
    analyze,
    collect::{
        namespaces::{self, Writer},
        procfs,
        ring::RingView,
        runtime,
    },
    correlate::{self, DumpOptions},
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
    /// Look the ring's binaries up under this directory, as the writer saw
    /// them from its root (a container's root file system on the host,
    /// like `gdb --sysroot`). Build-ids are checked.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

pub(crate) fn run(a: &DumpArgs, out: &mut Sink) -> Result<()> {
    let mut ring = match (&a.file, a.pid) {
        (Some(path), _) => {
            match timing::phase("read ring", || RingView::open(path).map_err(Error::from)) {
                Err(Error::Ring(librip::reader::ReadError::OriginalFormat)) => {
                    return super::original::dump(path, a.exe.as_deref(), a.json, out);
                }
                r => r?,
            }
        }
        // Found in the process's maps and read through its own view of
        // files (its mount namespace), with its thread ids made ours.
        (None, Some(pid)) => timing::phase("read ring", || ring_of(pid))?,
        (None, None) => {
            return Err(Error::Usage(
                "say which ring: rip-probe dump FILE, or rip-probe dump --pid PID".into(),
            ));
        }
    };
    if a.exe.is_some() {
        return Err(Error::Usage(
            "--exe is for rings of the original librip; this ring names its own binaries".into(),
        ));
    }
    let writer = ring.writer();
    if let (Writer::Alive(pid), Some(_)) = (&writer, &a.file) {
        ring.join_process(*pid);
    }
    let foreign = ring.pid_ns != 0 && Some(ring.pid_ns) != namespaces::inode(None, "pid");
    let (pid, alive, lost) = match writer {
        Writer::Alive(pid) => (pid, true, None),
        Writer::Gone => (ring.pid, false, None),
        Writer::Unknown(why) => (
            ring.pid,
            false,
            Some(format!(
                "cannot tell whether the writer (pid {} of its pid namespace) still runs: {why}",
                ring.pid
            )),
        ),
    };
    if foreign && !alive {
        ring.mark_namespace_ids();
    }
    let mut notes = Vec::new();
    if let Some(root) = &a.root {
        ring.resolve_in(root.clone());
    } else if !alive && ring.mnt_ns != 0 && Some(ring.mnt_ns) != namespaces::inode(None, "mnt") {
        notes.push(format!(
            "the ring was written in another mount namespace (mnt:[{}]): its binaries are paths \
             of that namespace; give its root file system with --root DIR",
            ring.mnt_ns
        ));
    }
    if foreign {
        notes.push(format!(
            "the ring was written in pid namespace pid:[{}]; {}",
            ring.pid_ns,
            if alive {
                "thread ids are ours, each with its id there beside it"
            } else {
                "its writer is gone, so thread ids are that namespace's"
            }
        ));
    }
    // The ring's modules are joined with the live process's maps only if
    // whoever wrote the file could read those maps anyway.
    let trusted = alive && procfs::may_ptrace(ring.owner, pid);
    let process = ProcessInfo {
        pid,
        exe: ring.exe.clone(),
        comm: None,
        alive,
        lost,
        ns_pid: foreign.then_some(ring.pid),
        title: None,
    };
    // A ring whose every slot exited (a finished program, like the
    // original librip's test.c) would show nothing: show what it left.
    let all_exited = ring.slots.iter().all(|s| s.exited);
    let opts = DumpOptions {
        history: a.threads,
        exited: a.exited || all_exited,
        clock: if alive {
            runtime::Clock::Now(monotonic_ns())
        } else {
            runtime::Clock::PostMortem
        },
    };
    let mut report = timing::phase("correlate", || correlate::dump(&ring, process, opts));
    let name = match &a.name {
        Some(g) => {
            Some(glob::Pattern::new(g).map_err(|e| Error::Usage(format!("--name {g}: {e}")))?)
        }
        None => None,
    };
    report.warnings.extend(notes);
    let keep = |id: u64, n: &str| {
        (a.tid.is_empty() || a.tid.contains(&id)) && name.as_ref().is_none_or(|g| g.matches(n))
    };
    report.threads.retain(|t| keep(t.tid, &t.name));
    report.tasks.retain(|t| keep(t.id, &t.name));

    // Live: blazesym reads the process's own maps; post-mortem: the ring's
    // module table (file offsets and build-ids).
    let space = if trusted {
        UserSpace::LiveWithModules(pid, &ring.modules)
    } else {
        UserSpace::Modules(&ring.modules)
    };
    if alive && !trusted {
        report.warnings.push(format!(
            "the ring's owner (uid {}) may not trace pid {}: its addresses are symbolized from the ring's module table only",
            ring.owner, pid
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

/// The ring of live process `pid`: the first mapped ring it wrote, else
/// the first.
pub(crate) fn ring_of(pid: u32) -> Result<RingView> {
    if !discover::exists(format!("/proc/{pid}")) {
        return Err(if discover::hides_pids() {
            discover::Error::Hidden(pid)
        } else {
            discover::Error::NoSuchProcess(pid)
        }
        .into());
    }
    match discover::stat(pid, 0) {
        Some(st) if st.kernel_thread() => {
            return Err(discover::Error::KernelThread {
                pid,
                comm: st.comm,
                lacks: discover::Lacks::Ring,
            }
            .into());
        }
        Some(st) if st.exited() && discover::live_thread(pid).is_none() => {
            return Err(discover::Error::Zombie { pid, ppid: st.ppid }.into());
        }
        _ => {}
    }
    discover::may_observe(pid)?;
    use librip::reader::ReadError;
    // From a user namespace, other processes' maps and another mount
    // namespace's files are out of reach: say that rather than "no ring".
    let userns = namespaces::ours_if_not_host("user", namespaces::HOST_USER_NS);
    RingView::of_process(pid).map_err(|e| match (Error::from(e), userns) {
        (Error::Ring(ReadError::PermissionDenied(_) | ReadError::Io(..)), Some(ns)) => {
            discover::Error::UserNamespace(ns).into()
        }
        (Error::Ring(ReadError::NoRing(_)), Some(ns)) if namespaces::differs(pid, "mnt") => {
            discover::Error::UserNamespace(ns).into()
        }
        (Error::Ring(ReadError::NoRing(_)), _) => unopened_shared_file(pid)
            .map_or(discover::Error::NoRing(pid), |path| {
                discover::Error::ProcUnreadable {
                    path: path.into(),
                    why: discover::Denied::SharedFile {
                        pid,
                        denied: Box::new(discover::denied_reason(pid)),
                    },
                }
            })
            .into(),
        (e, _) => e,
    })
}

/// A file process `pid` maps shared (as a ring is) that rip-probe cannot
/// open, if any: "no ring" would then be a guess.
fn unopened_shared_file(pid: u32) -> Option<String> {
    let maps = crate::discover::maps::ProcessMaps::open(pid).ok()?;
    let files = maps.file_backed().ok()?;
    files
        .iter()
        .filter(|m| m.perms.ends_with('s'))
        .find(|m| librip::reader::open_mapped(pid, m).is_none())
        .and_then(|m| m.file().map(|p| p.display().to_string()))
}
