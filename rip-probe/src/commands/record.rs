//! `rip-probe record --pid N --duration D -o trace.perfetto-trace`: every
//! thread's running, runnable and blocked spans over a window, with the
//! system calls it blocked in and its snaps, as a Perfetto trace: a
//! session streaming each context switch of the process (bounded: what
//! the kernel could not deliver is counted and said), the process's
//! librip rings polled beside it (each new snap dated by the polls around
//! it), a report at the end (names, threads that never switched), a
//! timeline, its snaps named, rendered.

use std::time::Duration;

use clap::Args;

use super::{output::Sink, parse_duration};
use crate::{
    analyze::timeline::{TimelineInputs, build},
    collect::ring::SnapFollower,
    error::{Error, Result},
    model::events::StateChange,
    render,
    session::{Observer, Session, SessionOptions, monotonic_ns},
    symbolize::{self, SymbolizerThread, UserSpace},
    util::timing,
};

/// State changes kept at most (about 64 bytes each): a busy process
/// switches hundreds of thousands of times a second; beyond this the rest
/// is counted, not kept.
const MAX_CHANGES: usize = 2_000_000;

/// `rip-probe record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The process to record.
    #[arg(long, short)]
    pid: u32,
    /// How long to record (e.g. 5s); without it, until Ctrl-C or the
    /// process exits.
    #[arg(long, short, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How often the process's librip rings are read for new snaps. A
    /// ring records where a thread snapped, not when: each snap is drawn
    /// at the read that first saw it, with the time since the read before
    /// (its time is known to within that). Each read costs the process
    /// nothing (rip-probe reads the ring file); 0: snaps are not drawn.
    #[arg(long, value_parser = parse_duration, default_value = "10ms", value_name = "DURATION")]
    snap_poll: Duration,
}

/// The observer keeping the state changes, up to [`MAX_CHANGES`].
#[derive(Default)]
struct Recorder {
    changes: Vec<StateChange>,
    not_kept: u64,
    lost_events: u64,
}

impl Observer for Recorder {
    fn on_event(&mut self, event: &crate::model::events::Event<'_>) {
        use crate::model::events::Event;
        match event {
            Event::State(c) if self.changes.len() < MAX_CHANGES => self.changes.push(c.clone()),
            Event::State(_) => self.not_kept += 1,
            Event::Detach { lost_events, .. } => self.lost_events = *lost_events,
            _ => {}
        }
    }
}

pub(crate) fn run(a: &RecordArgs, out: &mut Sink) -> Result<()> {
    if !out.is_file() {
        return Err(Error::Usage(
            "record writes a binary Perfetto trace: give its file with -o, e.g. rip-probe record \
             --pid PID --duration 5s -o trace.perfetto-trace"
                .into(),
        ));
    }
    super::output::require_window("record", a.duration, "5s")?;
    let mut opts = SessionOptions::new(a.pid);
    opts.events = true;
    // Names and states are all the timeline takes from the report.
    opts.stacks = false;
    let mut rec = Recorder::default();
    // One symbolizer for the report and the snaps.
    let sym = SymbolizerThread::start();
    let mut session = Session::attach_naming_with(&opts, sym.clone())?;
    let view = session.target().view_pid();
    let follower = if a.snap_poll.is_zero() {
        None
    } else {
        SnapFollower::start(a.pid, view, a.snap_poll)
    };
    let start_ns = monotonic_ns();
    let observed = session.observe_for(a.duration, &mut rec)?;
    let followed = follower.map(SnapFollower::stop);
    session.stop_observing()?;
    let mut report = session.snapshot()?;
    let end_ns = monotonic_ns();
    report.warnings.splice(0..0, observed.interrupted_note());
    session.detach(&mut rec)?;
    let clocks = (
        nanos(rustix::time::clock_gettime(rustix::time::ClockId::Boottime)),
        monotonic_ns(),
    );
    let mut timeline = timing::phase("timeline", || {
        build(&TimelineInputs {
            process: report.process.clone(),
            start_ns,
            end_ns,
            clocks,
            changes: &rec.changes,
            report: &report,
            lost_events: rec.lost_events,
            not_kept: rec.not_kept,
            snaps: followed.as_ref(),
        })
    });
    if let Some(f) = &followed {
        let space = if report.process.alive {
            UserSpace::LiveWithModules(view, &f.modules)
        } else {
            UserSpace::Modules(&f.modules)
        };
        let mut sym = sym;
        timing::phase("symbolize snaps", || {
            symbolize::fill_snaps(&mut timeline, &space, &mut sym)
        });
    }
    out.emit(|w| render::perfetto(&timeline, w))
}

fn nanos(ts: rustix::time::Timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
