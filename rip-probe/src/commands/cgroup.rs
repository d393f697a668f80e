//! `rip-probe --cgroup PATH`: every process of a cgroup (a pod, a
//! service, a container), each attached as `--pid` would be, observed over
//! one window, and reported one after another: the cgroup's report,
//! grouped by process.

use std::{
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use super::{
    emit,
    pid::{LiveArgs, options, report},
};
use crate::{
    collect::cgroup,
    discover,
    error::{Error, Result},
    model::Report,
    render,
    session::{Session, SessionOptions},
};

pub(crate) fn run(a: &LiveArgs, path: &Path, out: &mut dyn Write) -> Result<()> {
    let dir = cgroup::resolve(path)?;
    // Kernel threads (no executable) sit in the root cgroup: not programs.
    let pids: Vec<u32> = cgroup::processes(&dir)?
        .into_iter()
        .filter(|&p| discover::exe(p).is_some())
        .collect();
    let mut sessions = Vec::new();
    for pid in pids {
        // Each target's symbols are loaded for its report and freed with
        // its session: memory per target stays small, whatever their
        // number.
        let opts = SessionOptions {
            warm_up: false,
            ..options(a, pid)
        };
        match Session::attach(&opts) {
            Ok(s) => sessions.push(s),
            // It exited since the cgroup was listed: nothing to report.
            Err(Error::Discover(crate::discover::Error::NoSuchProcess(_))) => {}
            Err(e) => return Err(e),
        }
    }
    if sessions.is_empty() {
        return Err(Error::Usage(format!(
            "--cgroup {}: no process runs in it",
            dir.display()
        )));
    }
    // One window for all: each session's kernel programs record from its
    // attach; observing them in turn keeps each one's exit noticed.
    let deadline = Instant::now() + a.duration;
    let n = u32::try_from(sessions.len()).unwrap_or(u32::MAX);
    let step = Duration::from_millis(50) / n;
    while Instant::now() < deadline {
        for s in &mut sessions {
            let left = deadline.saturating_duration_since(Instant::now());
            s.observe(left.min(step), &mut ())?;
        }
    }
    let mut reports: Vec<Report> = Vec::with_capacity(sessions.len());
    for mut s in sessions {
        s.stop_observing()?;
        reports.push(report(a, &mut s)?);
        drop(s);
        // The session's symbols were parsed on its own thread, into that
        // thread's malloc arena, which glibc keeps once freed: handed back
        // so the next target's do not add to them.
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    let err = |e| Error::io("stdout", e);
    if a.json {
        serde_json::to_writer(&mut *out, &reports).map_err(|e| err(e.into()))?;
        writeln!(out).map_err(err)?;
        return out.flush().map_err(err);
    }
    writeln!(
        out,
        "cgroup {}: {} process{}",
        dir.display(),
        reports.len(),
        if reports.len() == 1 { "" } else { "es" }
    )
    .map_err(err)?;
    for r in &reports {
        writeln!(out).map_err(err)?;
        emit(r, false, out, render::live)?;
    }
    Ok(())
}
