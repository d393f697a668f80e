//! `rip-probe record`'s trace: a [`Timeline`] as Perfetto's protobuf
//! trace (ui.perfetto.dev, trace_processor): a track for the process and
//! one per thread, a slice per span of a state (`running`, `runnable`,
//! `blocked in SYSCALL`), an instant per snap, times on CLOCK_MONOTONIC
//! with a clock snapshot relating it to the viewer's CLOCK_BOOTTIME.
//!
//! A snap's time is known only to within the two polls of its ring around
//! it: its instant is placed at the end of that interval (the poll that
//! first saw it), never earlier than observed, and says the interval in
//! its arguments (`interval_ns`, and `when` in words) with its sequence
//! number (`seq`).

use std::io::{self, Write};

use prost::Message;

use super::protos::perfetto::{
    CLOCK_BOOTTIME, CLOCK_MONOTONIC, Clock, ClockSnapshot, DebugAnnotation, ProcessDescriptor,
    SEQ_INCREMENTAL_STATE_CLEARED, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
    ThreadDescriptor, Trace, TracePacket, TrackDescriptor, TrackEvent,
};
use crate::{
    model::events::{Span, SpanKind, Timeline},
    util::timefmt::duration,
};

/// The packets' writer sequence (one: this file).
const SEQUENCE: u32 = 1;

/// A process's track id.
pub fn process_track(pid: u32) -> u64 {
    (1 << 40) | u64::from(pid)
}

/// A thread's track id.
pub fn thread_track(tid: u32) -> u64 {
    (2 << 40) | u64::from(tid)
}

/// A span's slice name: `running`, `runnable`, `blocked in SYSCALL`
/// (`blocked` without one), or `off CPU (not seen)` before a thread's
/// first switch.
pub fn span_name(s: &Span) -> String {
    match (s.what, &s.syscall) {
        (SpanKind::Running, _) => "running".into(),
        (SpanKind::Runnable, _) => "runnable".into(),
        (SpanKind::Blocked(_), Some(sys)) => format!("blocked in {sys}"),
        (SpanKind::Blocked(_), None) => "blocked".into(),
        (SpanKind::OffCpu, _) => "off CPU (not seen)".into(),
        (SpanKind::Unseen, _) => "off CPU, then ran (switch onto a CPU not seen)".into(),
    }
}

/// The trace of `t`.
pub fn perfetto_trace(t: &Timeline) -> Trace {
    let pid = t.process.pid;
    let mut packets = vec![TracePacket {
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                Clock {
                    clock_id: Some(CLOCK_BOOTTIME),
                    timestamp: Some(t.clocks.0),
                },
                Clock {
                    clock_id: Some(CLOCK_MONOTONIC),
                    timestamp: Some(t.clocks.1),
                },
            ],
            primary_trace_clock: None,
        }),
        trusted_packet_sequence_id: Some(SEQUENCE),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        ..TracePacket::default()
    }];
    let comm = t
        .process
        .comm
        .clone()
        .unwrap_or_else(|| format!("pid {pid}"));
    packets.push(descriptor(TrackDescriptor {
        uuid: Some(process_track(pid)),
        process: Some(ProcessDescriptor {
            pid: Some(pid as i32),
            process_name: Some(comm),
        }),
        ..TrackDescriptor::default()
    }));
    for th in &t.threads {
        packets.push(descriptor(TrackDescriptor {
            uuid: Some(thread_track(th.tid)),
            parent_uuid: Some(process_track(pid)),
            thread: Some(ThreadDescriptor {
                pid: Some(pid as i32),
                tid: Some(th.tid as i32),
                thread_name: Some(th.name.clone()),
            }),
            ..TrackDescriptor::default()
        }));
    }
    // Events in time order (a slice's end before the next one's begin at
    // the same time), as a viewer reading the file in one pass wants them.
    let mut events: Vec<(u64, u8, TracePacket)> = Vec::new();
    for th in &t.threads {
        let track = thread_track(th.tid);
        for s in &th.spans {
            let mut args = Vec::new();
            if let SpanKind::Blocked(state) = s.what {
                args.push(annotation("state", state.as_str()));
            }
            if let Some(sys) = &s.syscall {
                args.push(annotation("syscall", sys));
            }
            let begin = TrackEvent {
                debug_annotations: args,
                r#type: Some(TYPE_SLICE_BEGIN),
                track_uuid: Some(track),
                categories: vec!["state".into()],
                name: Some(span_name(s)),
            };
            let end = TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                track_uuid: Some(track),
                ..TrackEvent::default()
            };
            events.push((s.start_ns, 1, event(s.start_ns, begin)));
            events.push((s.end_ns, 0, event(s.end_ns, end)));
        }
        for m in &th.snaps {
            let interval = m.seen_ns.saturating_sub(m.after_ns);
            let instant = TrackEvent {
                debug_annotations: vec![
                    int_annotation("seq", m.seq),
                    int_annotation("interval_ns", interval),
                    annotation(
                        "when",
                        &format!(
                            "taken in the {} before this mark: after the previous poll of its \
                             ring began, before the poll that saw it ended",
                            duration(interval)
                        ),
                    ),
                ],
                r#type: Some(TYPE_INSTANT),
                track_uuid: Some(track),
                categories: vec!["snap".into()],
                name: Some(m.what.clone()),
            };
            events.push((m.seen_ns, 2, event(m.seen_ns, instant)));
        }
    }
    for w in &t.warnings {
        let note = TrackEvent {
            r#type: Some(TYPE_INSTANT),
            track_uuid: Some(process_track(pid)),
            categories: vec!["warning".into()],
            name: Some(w.clone()),
            ..TrackEvent::default()
        };
        events.push((t.end_ns, 2, event(t.end_ns, note)));
    }
    events.sort_by_key(|(ts, order, _)| (*ts, *order));
    packets.extend(events.into_iter().map(|(_, _, p)| p));
    Trace { packet: packets }
}

/// Writes `t` as a Perfetto trace file.
pub fn perfetto(t: &Timeline, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(&perfetto_trace(t).encode_to_vec())
}

fn descriptor(d: TrackDescriptor) -> TracePacket {
    TracePacket {
        track_descriptor: Some(d),
        trusted_packet_sequence_id: Some(SEQUENCE),
        ..TracePacket::default()
    }
}

fn event(ts_ns: u64, e: TrackEvent) -> TracePacket {
    TracePacket {
        timestamp: Some(ts_ns),
        timestamp_clock_id: Some(CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(SEQUENCE),
        track_event: Some(e),
        ..TracePacket::default()
    }
}

fn annotation(name: &str, value: &str) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        string_value: Some(value.into()),
        int_value: None,
    }
}

fn int_annotation(name: &str, value: u64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        string_value: None,
        int_value: Some(i64::try_from(value).unwrap_or(i64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ProcessInfo, ThreadState,
        events::{SnapMark, ThreadTimeline},
    };

    /// The trace decodes to the same messages; a thread's spans are its
    /// track's slices, begun and ended in time order, with the clocks
    /// related first.
    #[test]
    fn a_timeline_round_trips_as_a_trace() {
        let span = |start_ns, end_ns, what, syscall: Option<&str>| Span {
            start_ns,
            end_ns,
            what,
            syscall: syscall.map(String::from),
        };
        let t = Timeline {
            process: ProcessInfo {
                pid: 10,
                exe: None,
                comm: Some("app".into()),
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            start_ns: 100,
            end_ns: 400,
            clocks: (5_000, 4_000),
            threads: vec![ThreadTimeline {
                tid: 11,
                name: "worker".into(),
                spans: vec![
                    span(100, 200, SpanKind::Running, None),
                    span(
                        200,
                        400,
                        SpanKind::Blocked(ThreadState::Sleeping),
                        Some("futex"),
                    ),
                ],
                snaps: vec![SnapMark {
                    seen_ns: 150,
                    after_ns: 140,
                    seq: 7,
                    addr: 0x1234,
                    what: "app.c:3 step".into(),
                }],
            }],
            lost_events: 0,
            warnings: Vec::new(),
        };
        let mut bytes = Vec::new();
        perfetto(&t, &mut bytes).unwrap();
        let trace = Trace::decode(bytes.as_slice()).unwrap();
        assert_eq!(trace, perfetto_trace(&t));
        let clocks = trace.packet[0].clock_snapshot.as_ref().unwrap();
        assert_eq!(clocks.clocks.len(), 2);
        let thread = trace
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.thread.as_ref())
            .next()
            .unwrap();
        assert_eq!((thread.pid, thread.tid), (Some(10), Some(11)));
        let events: Vec<(u64, i32, Option<String>)> = trace
            .packet
            .iter()
            .filter_map(|p| {
                let e = p.track_event.as_ref()?;
                assert_eq!(e.track_uuid, Some(thread_track(11)));
                assert_eq!(p.timestamp_clock_id, Some(CLOCK_MONOTONIC));
                Some((p.timestamp?, e.r#type?, e.name.clone()))
            })
            .collect();
        assert_eq!(
            events,
            [
                (100, TYPE_SLICE_BEGIN, Some("running".into())),
                (150, TYPE_INSTANT, Some("app.c:3 step".into())),
                (200, TYPE_SLICE_END, None),
                (200, TYPE_SLICE_BEGIN, Some("blocked in futex".into())),
                (400, TYPE_SLICE_END, None),
            ]
        );
        // The snap says what is known of its time: the interval from the
        // poll before, and its sequence number.
        let snap = trace
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .find(|e| e.r#type == Some(TYPE_INSTANT))
            .unwrap();
        assert_eq!(snap.categories, ["snap"]);
        let args: Vec<_> = snap
            .debug_annotations
            .iter()
            .map(|a| {
                (
                    a.name.as_deref().unwrap(),
                    a.int_value,
                    a.string_value.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            args,
            [
                ("seq", Some(7), None),
                ("interval_ns", Some(10), None),
                (
                    "when",
                    None,
                    Some(
                        "taken in the 10ns before this mark: after the previous poll of its ring \
                         began, before the poll that saw it ended"
                    )
                ),
            ]
        );
    }
}
