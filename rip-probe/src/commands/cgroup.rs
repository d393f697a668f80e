//! Several processes at once (`--cgroup PATH`, a pod, a service, a
//! container; `--comm NAME`; several `--pid`): each attached as `--pid`
//! would be, all observed over one window (in groups of at most
//! [`AT_ONCE`] processes past that many, one window each, one group after
//! another, which the report says), and reported as one report: their
//! threads grouped across them, then each process's own report.

use std::time::Duration;

use super::{
    output::Sink,
    pid::{LiveArgs, options, report},
    targets::{self, Listed},
};
use crate::{
    analyze,
    discover::Lost,
    error::{Error, Result},
    model::{Report, SCHEMA_VERSION, cgroup::ServiceReport},
    render,
    session::{Session, SessionOptions},
    window::{End, Watch, Window},
};

pub(crate) fn run(a: &LiveArgs, out: &mut Sink) -> Result<()> {
    for (given, what) in [
        (a.watch, "--watch"),
        (a.ring.is_some(), "--ring"),
        (a.folded, "--folded"),
    ] {
        if given {
            return Err(Error::Usage(format!(
                "{what} takes one process: give a single --pid (several --pid, --comm and \
                 --cgroup make one report of many)"
            )));
        }
    }
    let listed = a.named().list(false)?;
    let pids = &listed.pids;
    if pids.is_empty() {
        return Err(targets::none_named(&listed));
    }
    let mut reports: Vec<Report> = Vec::with_capacity(pids.len());
    let mut warnings = Vec::new();
    // Snapshots (no window) hold no program on a tracepoint: nothing
    // limits how many are taken, and each process is read and let go in
    // turn, so that one session at a time holds memory.
    let at_once = if options(a, 0).snapshots_only() {
        1
    } else {
        AT_ONCE
    };
    let batches = pids.len().div_ceil(at_once);
    if batches > 1 && at_once == AT_ONCE {
        warnings.push(format!(
            "{} processes were observed in {batches} windows, one after another: at most \
             {AT_ONCE} are observed at once",
            pids.len()
        ));
    }
    for (i, batch) in pids.chunks(at_once).enumerate() {
        let observed = observe(a, batch, &mut reports)?;
        let Some(ended) = observed else { continue };
        // A signal ended the window (and would end the next at once): the
        // processes not yet observed are left out, and the user told.
        let left = pids.len().saturating_sub((i + 1) * at_once);
        if i + 1 < batches {
            warnings.push(format!(
                "{ended}: {} of {} processes observed, {left} not",
                pids.len() - left,
                pids.len(),
            ));
        }
        break;
    }
    if reports.is_empty() {
        return Err(targets::none_named(&listed));
    }
    let report = service_report(&listed, reports, warnings);
    out.emit(|w| {
        if a.json {
            render::json(&report, w)
        } else {
            render::service(&report, a.table_rows(), w)
        }
    })
}

/// The one report of the processes `listed` named, from their reports.
pub(crate) fn service_report(
    listed: &Listed,
    processes: Vec<Report>,
    warnings: Vec<String>,
) -> ServiceReport {
    ServiceReport {
        schema: SCHEMA_VERSION,
        cgroup: listed.cgroup.as_ref().map(|d| d.display().to_string()),
        targets: listed.described.clone(),
        window_ns: processes.iter().map(|r| r.window_ns).max().unwrap_or(0),
        groups: analyze::service::across(&processes),
        warnings,
        processes,
    }
}

/// How often the window looks at each process in turn.
const STEP: Duration = Duration::from_millis(50);

/// Processes observed at once over a window: each holds its own program
/// on sched_switch, which runs at every context switch of the machine,
/// so each one more costs every switch more. A larger cgroup is observed
/// in groups of this many, one window each, one after another.
/// (Snapshots attach nothing there and have no such limit.)
const AT_ONCE: usize = 16;

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
