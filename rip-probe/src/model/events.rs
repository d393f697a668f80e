//! What a session sees as it happens, for programs that consume rip:
//! `rip-probe --pid N --events` writes each [`Event`] as one line of JSON
//! (docs/JSON.md), and a library user's [`crate::Observer`] receives the
//! same values through `on_event`. `rip-probe record` turns the state
//! changes into a timeline ([`Timeline`]).

use schemars::JsonSchema;
use serde::Serialize;

use super::{ProcessInfo, Report, ThreadState};

/// One event of a session, in the order they happen.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// The session attached to the process: its programs are loaded.
    Attach {
        /// CLOCK_MONOTONIC ns of the attach.
        ts_ns: u64,
        /// The process.
        process: ProcessInfo,
        /// The BPF programs loaded for it.
        programs: Vec<String>,
    },
    /// A thread left or got a CPU.
    State(StateChange),
    /// A snapshot was taken: every thread's state, as the report says.
    Snapshot {
        /// CLOCK_MONOTONIC ns when it was taken.
        ts_ns: u64,
        /// The report (schema: docs/JSON.md, `Report`).
        report: &'a Report,
    },
    /// The process exited (or its pid was reused) while observed.
    Lost {
        /// CLOCK_MONOTONIC ns when that was seen.
        ts_ns: u64,
        /// What happened.
        lost: String,
    },
    /// The session detached: no program of it is left.
    Detach {
        /// CLOCK_MONOTONIC ns of the detach.
        ts_ns: u64,
        /// State changes delivered.
        state_changes: u64,
        /// Switch events (onto a CPU and off it) the kernel dropped, its
        /// buffer being full.
        lost_events: u64,
    },
}

/// A thread's switch onto or off a CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StateChange {
    /// CLOCK_MONOTONIC ns of the switch.
    pub ts_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// What it became: `running` (got a CPU), `runnable` (preempted:
    /// ready, without a CPU), or the sleep it went into (`sleeping`,
    /// `uninterruptible`, ...).
    pub state: ThreadState,
    /// The system call it was in when it left the CPU, by name (none when
    /// it got one, or was not in a system call).
    pub syscall: Option<String>,
}

/// `rip-probe record`'s model: every thread's states over a window, one
/// track per thread, for a timeline viewer (Perfetto).
#[derive(Clone, Debug)]
pub struct Timeline {
    /// The process.
    pub process: ProcessInfo,
    /// CLOCK_MONOTONIC ns the window started.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns it ended.
    pub end_ns: u64,
    /// CLOCK_BOOTTIME and CLOCK_MONOTONIC read together (ns), to place the
    /// monotonic times on the viewer's clock.
    pub clocks: (u64, u64),
    /// One per thread seen.
    pub threads: Vec<ThreadTimeline>,
    /// State changes the kernel could not deliver (a lower bound).
    pub lost_events: u64,
    /// Things the viewer should know.
    pub warnings: Vec<String>,
}

/// One thread's timeline.
#[derive(Clone, Debug)]
pub struct ThreadTimeline {
    /// Thread id.
    pub tid: u32,
    /// Its name.
    pub name: String,
    /// Its states, in order, each from where the previous ended.
    pub spans: Vec<Span>,
    /// Its snaps in the window, as its ring's polls saw them, in order.
    pub snaps: Vec<SnapMark>,
}

/// A stretch of one state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// CLOCK_MONOTONIC ns it began.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns it ended.
    pub end_ns: u64,
    /// What the thread did.
    pub what: SpanKind,
    /// The system call it blocked in, by name.
    pub syscall: Option<String>,
}

/// What a thread did during a [`Span`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// On a CPU.
    Running,
    /// Preempted: ready, without a CPU.
    Runnable,
    /// Off the CPU in this sleep, until it got a CPU again (the wait for
    /// a CPU after its wake-up included: no wake-up is traced).
    Blocked(ThreadState),
    /// Off the CPU since before the window, in a state not seen.
    OffCpu,
    /// Between two switches off the CPU: it went off, then ran again,
    /// but the switch onto a CPU in between was not seen (its event was
    /// lost), so when it stopped waiting is not known.
    Unseen,
}

/// A snap in the window, dated by the two polls of its ring around it
/// (a ring records where a thread snapped, not when).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapMark {
    /// CLOCK_MONOTONIC ns at which the poll that first counted it ended:
    /// it was taken before.
    pub seen_ns: u64,
    /// CLOCK_MONOTONIC ns at which the poll before began: it was taken
    /// after.
    pub after_ns: u64,
    /// Its sequence number in the thread's ring slot (the thread's count
    /// of snaps).
    pub seq: u64,
    /// The address it recorded.
    pub addr: u64,
    /// Where: `file:line function` (the bare address until named).
    pub what: String,
}
