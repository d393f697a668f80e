//! `rip-probe list`: the host's processes that map a librip ring, with
//! their cgroup (container, pod, service), pid (and pid in their own
//! namespace), ring path as they see it, and thread and task counts, so
//! a user can find what to look at. Reads /proc only: no BPF.

use std::io::Write;

use clap::Args;

use crate::{
    collect::{cgroup, namespaces, procfs, ring::RingView},
    error::{Error, Result},
    render::escape,
};

/// `rip-probe list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {}

/// One process with a ring.
struct Row {
    pid: u32,
    ns_pid: Option<u32>,
    threads: usize,
    tasks: usize,
    cgroup: String,
    ring: String,
}

pub(crate) fn run(_: &ListArgs, out: &mut dyn Write) -> Result<()> {
    let dir = std::fs::read_dir("/proc").map_err(|e| Error::io("/proc", e))?;
    let mut pids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let rows: Vec<Row> = pids.into_iter().filter_map(row).collect();
    let err = |e| Error::io("stdout", e);
    writeln!(
        out,
        "{:<8} {:<7} {:>7} {:>7}  {:<40} RING",
        "PID", "NS PID", "THREADS", "TASKS", "CGROUP"
    )
    .map_err(err)?;
    for r in &rows {
        writeln!(
            out,
            "{:<8} {:<7} {:>7} {:>7}  {:<40} {}",
            r.pid,
            r.ns_pid.map_or_else(|| "-".to_string(), |n| n.to_string()),
            r.threads,
            r.tasks,
            escape(&r.cgroup),
            escape(&r.ring)
        )
        .map_err(err)?;
    }
    if rows.is_empty() {
        writeln!(
            out,
            "(no process maps a librip ring{})",
            if crate::discover::hides_pids() {
                "; /proc is mounted with hidepid, so other users' processes are invisible: run as root"
            } else {
                ""
            }
        )
        .map_err(err)?;
    }
    out.flush().map_err(err)
}

/// Process `pid`'s row, if it maps a ring it wrote. (The ring search opens
/// shared file mappings only: a process without one costs a maps query.)
fn row(pid: u32) -> Option<Row> {
    let ring = RingView::of_process(pid).ok()?;
    if !ring.written_by(pid) {
        return None;
    }
    let live = |coroutine: bool| {
        ring.slots
            .iter()
            .filter(|s| s.coroutine == coroutine && !s.exited)
            .count()
    };
    let mut path = ring.path.display().to_string();
    if namespaces::differs(pid, "mnt") {
        path.push_str(" (in its mount namespace)");
    }
    Some(Row {
        pid,
        ns_pid: namespaces::ns_pid(pid),
        threads: procfs::tids(pid).map_or(live(false), |t| t.len()),
        tasks: live(true),
        cgroup: cgroup::of_process(pid).unwrap_or_else(|| "?".into()),
        ring: path,
    })
}
