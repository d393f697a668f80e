//! `rip-probe list`: the host's processes that map a librip ring, with
//! their cgroup (container, pod, service), pid (and pid in their own
//! namespace), ring path as they see it, and thread and task counts, so
//! a user can find what to look at. Reads /proc only: no BPF.

use std::io::Write;

use clap::Args;

use librip::reader::ReadError;

use crate::{
    collect::{cgroup, namespaces, procfs, ring::RingView},
    error::{Error, Result},
    model::{
        SCHEMA_VERSION,
        list::{ListReport, ListedProcess},
    },
    render::escape,
};

use super::output::Sink;

/// `rip-probe list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print the list as JSON (schema: docs/JSON.md, ListReport).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: &ListArgs, out: &mut Sink) -> Result<()> {
    let report = list()?;
    out.emit(|w| {
        if a.json {
            crate::render::json(&report, w)
        } else {
            text(&report, w)
        }
    })
}

/// The list as a table.
fn text(report: &ListReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<8} {:<7} {:>7} {:>7}  {:<40} RING",
        "PID", "NS PID", "THREADS", "TASKS", "CGROUP"
    )?;
    for r in &report.processes {
        let mut ring = escape(&r.ring);
        if r.other_mount_namespace {
            ring.push_str(" (in its mount namespace)");
        }
        writeln!(
            out,
            "{:<8} {:<7} {:>7} {:>7}  {:<40} {ring}",
            r.pid,
            r.ns_pid.map_or_else(|| "-".to_string(), |n| n.to_string()),
            r.threads,
            r.tasks,
            escape(&r.cgroup),
        )?;
    }
    if report.processes.is_empty() {
        writeln!(
            out,
            "(no process that could be examined maps a librip ring)"
        )?;
    }
    if report.unseen > 0 {
        writeln!(
            out,
            "({} processes could not be examined (their memory maps are not readable to us){}: \
             they may map a ring)",
            report.unseen,
            if rustix::process::geteuid().is_root() {
                ""
            } else {
                "; run as root to see other users' processes"
            }
        )?;
    }
    if report.hidepid {
        writeln!(
            out,
            "(/proc is mounted with hidepid, so other users' processes are invisible: run as root)"
        )?;
    }
    Ok(())
}

/// The host's processes that map a ring they wrote, by pid.
pub(crate) fn ring_pids() -> Result<Vec<u32>> {
    Ok(list()?.processes.into_iter().map(|p| p.pid).collect())
}

/// The host's processes with a ring, and how many could not be examined.
fn list() -> Result<ListReport> {
    let dir = std::fs::read_dir("/proc").map_err(|e| Error::io("/proc", e))?;
    let mut pids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut report = ListReport {
        schema: SCHEMA_VERSION,
        processes: Vec::new(),
        unseen: 0,
        hidepid: crate::discover::hides_pids(),
    };
    for pid in pids {
        match row(pid) {
            Ok(Some(r)) => report.processes.push(r),
            Ok(None) => {}
            Err(()) => report.unseen += 1,
        }
    }
    Ok(report)
}

/// Process `pid`'s row, if it maps a ring it wrote; `Err` when its maps
/// may not be read. (The ring search opens shared file mappings only: a
/// process without one costs a maps query.)
fn row(pid: u32) -> std::result::Result<Option<ListedProcess>, ()> {
    let ring = match RingView::of_process(pid).map_err(Error::from) {
        Ok(r) => r,
        Err(Error::Ring(ReadError::PermissionDenied(_))) => return Err(()),
        Err(Error::Ring(ReadError::Io(_, e)))
            if e.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            return Err(());
        }
        Err(_) => return Ok(None),
    };
    if !ring.written_by(pid) {
        return Ok(None);
    }
    let live = |coroutine: bool| {
        ring.slots
            .iter()
            .filter(|s| s.coroutine == coroutine && !s.exited)
            .count()
    };
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(Some(ListedProcess {
        pid,
        ns_pid: namespaces::ns_pid(pid),
        threads: count(procfs::tids(pid).map_or(live(false), |t| t.len())),
        tasks: count(live(true)),
        cgroup: cgroup::of_process(pid).unwrap_or_else(|| "?".into()),
        ring: ring.path.display().to_string(),
        other_mount_namespace: namespaces::differs(pid, "mnt"),
    }))
}
