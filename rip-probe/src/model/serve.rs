//! What `rip-probe serve` exports: per process, the numbers of its last
//! snapshot ([`Health`], made by analyze) with the snapshot's own cost
//! and the incident report written for it; for serve itself, its targets
//! and the OTLP export's counters. Rendered as OpenMetrics; not JSON.

use std::collections::BTreeMap;

/// The numbers of one process's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Threads by state word (`sleeping`, `running`, ...).
    pub by_state: BTreeMap<&'static str, u64>,
    /// The longest time a thread has been blocked, ns (`None`: no
    /// blocked thread with a known time).
    pub longest_blocked_ns: Option<u64>,
    /// Threads blocked at least as long as each threshold (ns), by
    /// threshold. Each time is what the report says (a lower bound when
    /// the thread's is one), so the counts are lower bounds too.
    pub blocked_over: Vec<(u64, u64)>,
    /// Threads waiting for a lock someone can hold (a mutex, a rwlock, a
    /// PI futex, a runtime's lock): not condition variables, semaphores
    /// or parked threads, which wait for work, not for a holder.
    pub lock_waiters: u64,
    /// Deadlocks (cycles of waits confirmed by a second look).
    pub deadlocks: u64,
    /// Threads blocked at least the stuck threshold, by tid.
    pub stuck: Vec<u64>,
}

impl Health {
    /// Whether the report is an incident: a thread stuck, or a deadlock.
    pub fn is_incident(&self) -> bool {
        !self.stuck.is_empty() || self.deadlocks > 0
    }
}

/// One target of serve, as its metrics show it.
#[derive(Clone, Debug, Default)]
pub struct ProcessMetrics {
    /// The process.
    pub pid: u32,
    /// Its name (comm).
    pub comm: String,
    /// Its last snapshot's numbers (`None`: none succeeded yet).
    pub health: Option<Health>,
    /// How long its last snapshot took, ns.
    pub snapshot_ns: u64,
    /// Snapshots that failed, since serve started.
    pub errors: u64,
    /// The incident reports written for it, since serve started.
    pub incidents: u64,
    /// The path of its latest incident report (JSON), if one was written.
    pub incident_path: Option<String>,
}

/// Everything serve exports at one scrape.
#[derive(Clone, Debug, Default)]
pub struct ServeMetrics {
    /// The targets, by pid.
    pub processes: Vec<ProcessMetrics>,
    /// The processes the last listing found (some may not have had a
    /// snapshot yet).
    pub targets: u64,
    /// Snapshot passes completed.
    pub passes: u64,
    /// Targets left for a later pass because a pass's bound was reached.
    pub deferred: u64,
    /// How long the last pass took, ns.
    pub pass_ns: u64,
    /// OTLP batches delivered.
    pub otlp_sent: u64,
    /// OTLP batches dropped (the queue was full, or every retry failed).
    pub otlp_dropped: u64,
    /// OTLP POSTs that failed (each retry counts).
    pub otlp_failures: u64,
}
