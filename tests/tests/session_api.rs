//! rip-probe's library API, driven directly: attach a session, watch a
//! target through an observer, take a snapshot of the joined state.

use std::{collections::HashMap, time::Duration};

use rip_ebpf::{SWITCH_OFF, SWITCH_ON, SwitchEvent};
use rip_probe::{
    model::{LocationSource, ThreadState},
    session::{Observer, Session, SessionOptions},
};
use rip_tests::{Workload, bpf_tests_enabled};

/// Counts switches per thread.
#[derive(Default)]
struct Counter {
    off: HashMap<u32, u32>,
    on: HashMap<u32, u32>,
}

impl Observer for Counter {
    fn on_switch(&mut self, ev: &SwitchEvent) {
        let m = if ev.kind == SWITCH_OFF {
            &mut self.off
        } else {
            assert_eq!(ev.kind, SWITCH_ON);
            &mut self.on
        };
        *m.entry(ev.tid).or_default() += 1;
    }
}

#[test]
fn observe_and_snapshot() {
    if !bpf_tests_enabled("observe_and_snapshot") {
        return;
    }
    let w = Workload::uninstrumented(2);
    let workers = w.tids("worker ");

    let mut opts = SessionOptions::new(w.pid());
    opts.uprobe = Some("worker_wait".into());
    opts.events = true;
    let mut session = Session::attach(&opts).expect("attach");
    assert_eq!(session.uprobes(), 1);
    let mut counter = Counter::default();
    session
        .observe(Duration::from_millis(900), &mut counter)
        .unwrap();
    // Workers wake every 200 ms: several switches each in 900 ms.
    for tid in &workers {
        assert!(
            counter.off.get(tid).copied().unwrap_or(0) >= 2,
            "{tid}: {:?}",
            counter.off
        );
        assert!(
            counter.on.get(tid).copied().unwrap_or(0) >= 2,
            "{tid}: {:?}",
            counter.on
        );
    }
    // The workers sleep in poll(2) but for their brief wakeups, which a
    // busy machine lengthens (woken, waiting for a CPU): the snapshot that
    // finds them all asleep is the one checked.
    let asleep = |r: &rip_probe::model::Report| {
        workers.iter().all(|tid| {
            r.threads
                .iter()
                .any(|t| t.tid == u64::from(*tid) && t.state == ThreadState::Sleeping)
        })
    };
    let report = (0..20)
        .map(|_| session.snapshot().unwrap())
        .find(asleep)
        .expect("a snapshot with every worker asleep");
    assert_eq!(report.process.pid, w.pid());
    assert!(report.process.alive);
    assert_eq!(report.threads.len(), workers.len() + 1);
    for tid in &workers {
        let t = report
            .threads
            .iter()
            .find(|t| t.tid == u64::from(*tid))
            .unwrap();
        assert_eq!(t.state, ThreadState::Sleeping);
        assert_eq!(t.syscall.as_ref().unwrap().name, "poll");
        let b = t.blocked.unwrap();
        assert!(
            b.exact,
            "a worker blocked during the window is timed exactly"
        );
        assert!(b.ns < 1_000_000_000);
        let loc = t.location.as_ref().unwrap();
        assert_eq!(loc.source, LocationSource::Uprobe);
        assert_eq!(loc.frame.function.as_deref(), Some("worker_wait"));
        assert!(!t.kernel_stack.is_empty());
        assert!(t.kernel_stack.iter().any(|f| f.function.is_some()));
    }
    assert_eq!(report.groups[0].count, workers.len());
    eprintln!(
        "session saw {} switch-offs; snapshot grouped {} threads into {} groups",
        counter.off.values().sum::<u32>(),
        report.threads.len(),
        report.groups.len()
    );
}
