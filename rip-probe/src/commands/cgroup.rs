//! `rip-probe --cgroup PATH`: every process of a cgroup (a pod, a
//! service, a container), each attached as `--pid` would be, observed over
//! one window (in groups of at most [`AT_ONCE`] processes, one window
//! each, one group after another), and reported one after another: the
//! cgroup's report, grouped by process.

use std::{path::Path, time::Duration};

use super::{
    output::Sink,
    pid::{LiveArgs, options, report},
};
use crate::{
    collect::cgroup,
    discover::{self, Lost},
    error::{Error, Result},
    model::{Report, SCHEMA_VERSION, cgroup::CgroupReport},
    render::{self, escape},
    session::{Session, SessionOptions},
    window::{End, Watch, Window},
};

pub(crate) fn run(a: &LiveArgs, path: &Path, out: &mut Sink) -> Result<()> {
    let dir = cgroup::resolve(path)?;
    // Kernel threads (no executable) sit in the root cgroup: not programs.
    let pids: Vec<u32> = cgroup::processes(&dir)?
        .into_iter()
        .filter(|&p| discover::exe(p).is_some())
        .collect();
    if pids.is_empty() {
        return Err(no_process(&dir));
    }
    let mut reports: Vec<Report> = Vec::with_capacity(pids.len());
    let batches = pids.len().div_ceil(AT_ONCE);
    for (i, batch) in pids.chunks(AT_ONCE).enumerate() {
        let observed = observe(a, batch, &mut reports)?;
        let Some(ended) = observed else { continue };
        // A signal ended the window (and would end the next at once): the
        // processes not yet observed are left out, and the user told.
        let left = pids.len().saturating_sub((i + 1) * AT_ONCE);
        if i + 1 < batches {
            eprintln!(
                "rip-probe: --cgroup {}: {ended}: {} of {} processes observed, {left} not \
                 (at most {AT_ONCE} are observed at once, one group after another)",
                dir.display(),
                pids.len() - left,
                pids.len(),
            );
        }
        break;
    }
    if reports.is_empty() {
        return Err(no_process(&dir));
    }
    let report = CgroupReport {
        schema: SCHEMA_VERSION,
        cgroup: dir.display().to_string(),
        processes: reports,
    };
    out.emit(|w| {
        if a.json {
            return render::json(&report, w);
        }
        let n = report.processes.len();
        writeln!(
            w,
            "cgroup {}: {n} process{}",
            escape(&report.cgroup),
            if n == 1 { "" } else { "es" }
        )?;
        for r in &report.processes {
            writeln!(w)?;
            render::live_cut(r, a.table_rows(), &mut *w)?;
        }
        Ok(())
    })
}

/// How often the window looks at each process in turn.
const STEP: Duration = Duration::from_millis(50);

/// Processes observed at once: each holds its own programs on the
/// scheduler's and the system calls' tracepoints, and the kernel runs at
/// most 64 BPF programs on one tracepoint, for every tool of the machine
/// (`E2BIG` past that), so two runs and other tools fit beside one. A
/// larger cgroup is observed in groups of this many, one window each, one
/// after another.
const AT_ONCE: usize = 16;

/// The error for a cgroup with no process in it.
fn no_process(dir: &Path) -> Error {
    Error::Usage(format!("--cgroup {}: no process runs in it", dir.display()))
}

/// Attaches to the processes `pids`, observes them over one window and
/// adds their reports to `reports`, then detaches. Returns the signal
/// that cut the window short, if one did.
fn observe(a: &LiveArgs, pids: &[u32], reports: &mut Vec<Report>) -> Result<Option<&'static str>> {
    let mut sessions = Vec::new();
    for &pid in pids {
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
        return Ok(None);
    }
    // One window for the group: each session's kernel programs record
    // from its attach; observing them in turn keeps each one's exit
    // noticed.
    let observed = Window::new(a.duration.0, STEP).run(&mut Members {
        sessions: &mut sessions,
        all_gone: false,
    })?;
    let note = observed.interrupted_note();
    for mut s in sessions {
        s.stop_observing()?;
        let mut r = report(a, &mut s)?;
        r.warnings.splice(0..0, note.clone());
        reports.push(r);
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
    Ok(match observed.end {
        End::Interrupted(sig) => Some(sig),
        _ => None,
    })
}

/// The window of a cgroup: its processes observed in turn; it ends early
/// when every one of them has exited.
struct Members<'a> {
    sessions: &'a mut [Session],
    all_gone: bool,
}

impl Watch for Members<'_> {
    fn gone(&mut self) -> Option<Lost> {
        self.all_gone.then_some(Lost::Exited)
    }

    fn wait(&mut self, max: Duration) -> Result<()> {
        let n = u32::try_from(self.sessions.len()).unwrap_or(u32::MAX);
        let mut all_gone = true;
        for s in self.sessions.iter_mut() {
            all_gone &= s.step(max / n)?;
        }
        self.all_gone = all_gone;
        Ok(())
    }
}
