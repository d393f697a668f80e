//! `rip-probe record`: each thread's states over the window, from the
//! context switches the session delivered, the report taken at its end
//! (names, the state of threads that never switched, snap histories).

use std::collections::BTreeMap;

use crate::model::{
    ProcessInfo, Report, ThreadState,
    events::{SnapMark, Span, SpanKind, StateChange, ThreadTimeline, Timeline},
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
        }
        if end_ns > at {
            spans.push(Span {
                start_ns: at,
                end_ns,
                what,
                syscall,
            });
        }
        let snaps = thread.map_or_else(Vec::new, |t| {
            let mut seen: Vec<SnapMark> = t
                .location
                .iter()
                .chain(&t.history)
                .filter_map(|l| {
                    let ts = inp.end_ns.checked_sub(l.ago_ns?)?;
                    (ts >= inp.start_ns).then(|| SnapMark {
                        ts_ns: ts,
                        what: l.frame.describe(),
                    })
                })
                .collect();
            seen.sort_by_key(|s| s.ts_ns);
            seen.dedup();
            seen
        });
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

    /// The spans of a thread tile the window: running until its first
    /// switch off, then each state until the next change, to the end.
    #[test]
    fn spans_tile_the_window_from_the_switches() {
        let report = Report {
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
        };
        let changes = [
            change(150, 7, ThreadState::Sleeping, Some("futex")),
            change(300, 7, ThreadState::Running, None),
            change(320, 7, ThreadState::Runnable, None),
            change(400, 8, ThreadState::Running, None),
            // Off the CPU twice in a row: the switch onto a CPU between
            // was lost.
            change(200, 9, ThreadState::Sleeping, Some("nanosleep")),
            change(260, 9, ThreadState::Sleeping, Some("nanosleep")),
        ];
        let t = build(&TimelineInputs {
            process: report.process.clone(),
            start_ns: 100,
            end_ns: 500,
            clocks: (0, 0),
            changes: &changes,
            report: &report,
            lost_events: 0,
            not_kept: 0,
        });
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
        assert!(
            t.warnings
                .iter()
                .any(|w| w.starts_with("1 switches onto a CPU")),
            "{:?}",
            t.warnings
        );
    }
}
