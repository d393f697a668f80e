//! `rip-probe record`: each thread's states over the window, from the
//! context switches the session delivered and the report taken at its end
//! (names, the state of threads that never switched), and its snaps as
//! the polls of its ring saw them.

use std::collections::BTreeMap;

use crate::{
    collect::ring::Followed,
    model::{
        ProcessInfo, Report, ThreadState,
        events::{SnapMark, Span, SpanKind, StateChange, ThreadTimeline, Timeline},
    },
    util::timefmt::duration,
};

/// What the timeline is built from.
pub(crate) struct TimelineInputs<'a> {
    /// The process.
    pub(crate) process: ProcessInfo,
    /// CLOCK_MONOTONIC ns the window started (the switches were traced
    /// from then).
    pub(crate) start_ns: u64,
    /// CLOCK_MONOTONIC ns of the report (the window's end).
    pub(crate) end_ns: u64,
    /// CLOCK_BOOTTIME and CLOCK_MONOTONIC read together.
    pub(crate) clocks: (u64, u64),
    /// The state changes, as delivered.
    pub(crate) changes: &'a [StateChange],
    /// The report taken at the end.
    pub(crate) report: &'a Report,
    /// State changes the kernel did not deliver (lower bound).
    pub(crate) lost_events: u64,
    /// State changes delivered but not kept (over the bound).
    pub(crate) not_kept: u64,
    /// The snaps the polls of the process's rings saw (`None`: it has no
    /// ring of its own).
    pub(crate) snaps: Option<&'a Followed>,
}

/// The timeline of every thread seen (in the report or switching).
pub(crate) fn build(inp: &TimelineInputs<'_>) -> Timeline {
    let mut by_tid: BTreeMap<u32, Vec<&StateChange>> = BTreeMap::new();
    for c in inp.changes {
        by_tid.entry(c.tid).or_default().push(c);
    }
    for t in &inp.report.threads {
        if let Ok(tid) = u32::try_from(t.tid) {
            by_tid.entry(tid).or_default();
        }
    }
    let mut snaps: BTreeMap<u32, Vec<SnapMark>> = BTreeMap::new();
    for s in inp.snaps.iter().flat_map(|f| &f.snaps) {
        by_tid.entry(s.tid).or_default();
        snaps.entry(s.tid).or_default().push(SnapMark {
            seen_ns: s.seen_ns,
            after_ns: s.after_ns,
            seq: s.seq,
            addr: s.addr,
            what: format!("{:#x}", s.addr),
        });
    }
    let end_ns = inp
        .changes
        .iter()
        .map(|c| c.ts_ns)
        .fold(inp.end_ns, u64::max);
    let mut threads = Vec::new();
    let mut unseen = 0usize;
    for (tid, mut changes) in by_tid {
        changes.sort_by_key(|c| c.ts_ns);
        let thread = inp.report.threads.iter().find(|t| t.tid == u64::from(tid));
        let name = thread.map_or_else(|| format!("tid {tid}"), |t| t.name.clone());
        // Before its first switch: running if that switch took it off the
        // CPU; not seen otherwise. Without any: the state the report saw,
        // held the whole window.
        let first = match (changes.first(), thread) {
            (Some(c), _) if c.state == ThreadState::Running => (SpanKind::OffCpu, None),
            (Some(_), _) => (SpanKind::Running, None),
            (None, Some(t)) => (
                kind_of(t.state),
                t.syscall
                    .as_ref()
                    .filter(|_| t.state.is_blocked())
                    .map(|s| s.name.clone()),
            ),
            (None, None) => (SpanKind::OffCpu, None),
        };
        let mut spans = Vec::new();
        let (mut at, mut what, mut syscall) = (inp.start_ns, first.0, first.1);
        let mut seen_change = false;
        for c in changes {
            let ts = c.ts_ns.max(inp.start_ns);
            let next = kind_of(c.state);
            // Off the CPU twice in a row: it ran in between, but that
            // switch's event was lost. The span is not a wait of known
            // length: say so rather than draw one sleep.
            if seen_change && what != SpanKind::Running && next != SpanKind::Running {
                what = SpanKind::Unseen;
                syscall = None;
                unseen += 1;
            }
            seen_change = true;
            if ts > at {
                spans.push(Span {
                    start_ns: at,
                    end_ns: ts,
                    what,
                    syscall: syscall.take(),
                });
                at = ts;
            }
            what = next;
            syscall = c.syscall.clone();
            // Its last switch: the thread is gone, nothing after is its.
            if c.state == ThreadState::Exited {
                break;
            }
        }
        if end_ns > at && what != SpanKind::Blocked(ThreadState::Exited) {
            spans.push(Span {
                start_ns: at,
                end_ns,
                what,
                syscall,
            });
        }
        let mut snaps = snaps.remove(&tid).unwrap_or_default();
        snaps.sort_by_key(|m| (m.seen_ns, m.seq));
        threads.push(ThreadTimeline {
            tid,
            name,
            spans,
            snaps,
        });
    }
    let mut warnings = inp.report.warnings.clone();
    if unseen > 0 {
        warnings.push(format!(
            "{unseen} switches onto a CPU were not seen (their events were lost): those spans \
             are drawn as \"off CPU, then ran\", not as one wait"
        ));
    }
    if inp.lost_events > 0 {
        warnings.push(format!(
            "at least {} state changes were lost (the kernel's buffer was full): the spans \
             around them are merged",
            inp.lost_events
        ));
    }
    if inp.not_kept > 0 {
        warnings.push(format!(
            "{} state changes over the bound of {} were not kept: the timeline ends early for \
             their threads",
            inp.not_kept,
            inp.changes.len()
        ));
    }
    if let Some(f) = inp.snaps {
        warnings.extend(snap_warnings(f));
    }
    Timeline {
        process: inp.process.clone(),
        start_ns: inp.start_ns,
        end_ns,
        clocks: inp.clocks,
        threads,
        lost_events: inp.lost_events,
        warnings,
    }
}

/// What a viewer should know of the snaps drawn: those not drawn, and
/// polls that came later than asked.
fn snap_warnings(f: &Followed) -> Vec<String> {
    let mut w = Vec::new();
    if f.overwritten > 0 {
        w.push(format!(
            "{} snaps were overwritten in their ring before a poll read them (a thread snapped \
             more than its ring's depth between two polls): not drawn; a shorter --snap-poll \
             or a deeper ring keeps them",
            f.overwritten
        ));
    }
    if f.not_kept > 0 {
        w.push(format!(
            "{} snaps over the bound of {} were not kept: not drawn",
            f.not_kept,
            f.snaps.len()
        ));
    }
    if f.coroutine_snaps > 0 {
        w.push(format!(
            "{} snaps of coroutines are not drawn (the trace has a track per thread)",
            f.coroutine_snaps
        ));
    }
    if f.unmapped > 0 {
        w.push(format!(
            "{} snaps of threads that exited inside the process's pid namespace before their \
             ids could be read are not drawn",
            f.unmapped
        ));
    }
    if let Some(e) = &f.error {
        w.push(format!("snaps after this are not drawn: {e}"));
    }
    // Each snap says its own interval; a run much coarser than asked is
    // worth a word (a busy machine, or a ring of many slots).
    let asked = f.period.as_nanos() as u64;
    if !f.snaps.is_empty() && f.widest_ns > 4 * asked.max(1) {
        w.push(format!(
            "snaps are dated by polls of the ring every {}; at worst a snap's time is known \
             to within {} (the polls came late: a busy machine, or a ring of many slots)",
            duration(asked),
            duration(f.widest_ns)
        ));
    }
    w
}

/// The span a state begins.
fn kind_of(s: ThreadState) -> SpanKind {
    match s {
        ThreadState::Running => SpanKind::Running,
        ThreadState::Runnable => SpanKind::Runnable,
        s => SpanKind::Blocked(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(ts_ns: u64, tid: u32, state: ThreadState, syscall: Option<&str>) -> StateChange {
        StateChange {
            ts_ns,
            tid,
            state,
            syscall: syscall.map(String::from),
        }
    }

    /// The report at the end of a 400 ns window of process 7, no thread
    /// in it.
    fn report() -> Report {
        Report {
            schema: crate::model::SCHEMA_VERSION,
            stacks: crate::model::StackTable,
            mode: crate::model::Mode::Pid,
            process: ProcessInfo {
                pid: 7,
                exe: None,
                comm: Some("app".into()),
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            rings: Vec::new(),
            window_ns: 400,
            threads: Vec::new(),
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        }
    }

    /// The timeline of process 7 from 100 to 500 ns, from `changes` and
    /// `snaps`.
    fn timeline(changes: &[StateChange], snaps: Option<&Followed>) -> Timeline {
        let report = report();
        build(&TimelineInputs {
            process: report.process.clone(),
            start_ns: 100,
            end_ns: 500,
            clocks: (0, 0),
            changes,
            report: &report,
            lost_events: 0,
            not_kept: 0,
            snaps,
        })
    }

    /// The spans of a thread tile the window: running until its first
    /// switch off, then each state until the next change, to the end.
    #[test]
    fn spans_tile_the_window_from_the_switches() {
        let changes = [
            change(150, 7, ThreadState::Sleeping, Some("futex")),
            change(300, 7, ThreadState::Running, None),
            change(320, 7, ThreadState::Runnable, None),
            change(400, 8, ThreadState::Running, None),
            // Off the CPU twice in a row: the switch onto a CPU between
            // was lost.
            change(200, 9, ThreadState::Sleeping, Some("nanosleep")),
            change(260, 9, ThreadState::Sleeping, Some("nanosleep")),
            // Born (or woken) in the window, then gone: its timeline ends
            // at its last switch.
            change(200, 10, ThreadState::Running, None),
            change(300, 10, ThreadState::Exited, Some("exit")),
        ];
        let t = timeline(&changes, None);
        let spans = |tid: u32| {
            t.threads
                .iter()
                .find(|x| x.tid == tid)
                .unwrap()
                .spans
                .iter()
                .map(|s| (s.start_ns, s.end_ns, s.what, s.syscall.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            spans(7),
            vec![
                (100, 150, SpanKind::Running, None),
                (
                    150,
                    300,
                    SpanKind::Blocked(ThreadState::Sleeping),
                    Some("futex".into())
                ),
                (300, 320, SpanKind::Running, None),
                (320, 500, SpanKind::Runnable, None),
            ]
        );
        assert_eq!(
            spans(8),
            vec![
                (100, 400, SpanKind::OffCpu, None),
                (400, 500, SpanKind::Running, None)
            ]
        );
        assert_eq!(
            spans(9),
            vec![
                (100, 200, SpanKind::Running, None),
                (200, 260, SpanKind::Unseen, None),
                (
                    260,
                    500,
                    SpanKind::Blocked(ThreadState::Sleeping),
                    Some("nanosleep".into())
                ),
            ]
        );
        assert_eq!(
            spans(10),
            vec![
                (100, 200, SpanKind::OffCpu, None),
                (200, 300, SpanKind::Running, None),
            ]
        );
        assert!(
            t.warnings
                .iter()
                .any(|w| w.starts_with("1 switches onto a CPU")),
            "{:?}",
            t.warnings
        );
    }

    /// Each thread's snaps are the polls' (in the order seen, by sequence
    /// within a poll), on its own timeline; a thread seen only snapping
    /// has one; what was not drawn is said.
    #[test]
    fn snaps_go_to_their_threads_with_the_polls_around_them() {
        use crate::collect::ring::follow::SeenSnap;
        let seen = |tid, seq, after_ns, seen_ns| SeenSnap {
            tid,
            seq,
            addr: 0x1000 + seq,
            after_ns,
            seen_ns,
        };
        let followed = Followed {
            snaps: vec![
                seen(7, 4, 200, 310),
                seen(7, 2, 100, 210),
                seen(7, 3, 100, 210),
                seen(12, 0, 200, 310),
            ],
            overwritten: 3,
            polls: 2,
            period: std::time::Duration::from_nanos(100),
            widest_ns: 110,
            ..Followed::default()
        };
        let changes = [change(150, 7, ThreadState::Sleeping, Some("futex"))];
        let t = timeline(&changes, Some(&followed));
        let marks = |tid: u32| {
            t.threads
                .iter()
                .find(|x| x.tid == tid)
                .unwrap_or_else(|| panic!("no timeline for {tid}"))
                .snaps
                .iter()
                .map(|m| (m.seq, m.after_ns, m.seen_ns, m.what.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            marks(7),
            [
                (2, 100, 210, "0x1002".to_string()),
                (3, 100, 210, "0x1003".to_string()),
                (4, 200, 310, "0x1004".to_string()),
            ]
        );
        assert_eq!(marks(12), [(0, 200, 310, "0x1000".to_string())]);
        assert!(
            t.warnings
                .iter()
                .any(|w| w.starts_with("3 snaps were overwritten in their ring")),
            "{:?}",
            t.warnings
        );
        // Polls as late as asked are not worth a word; much later ones
        // are, when there are snaps to date.
        let late = |f: &Followed| {
            timeline(&changes, Some(f))
                .warnings
                .iter()
                .any(|w| w.contains("polls came late"))
        };
        assert!(!late(&followed));
        let slow = Followed {
            widest_ns: 1_000,
            ..followed.clone()
        };
        assert!(late(&slow));
        assert!(!late(&Followed {
            snaps: Vec::new(),
            ..slow
        }));
    }
}
