//! The text views, byte for byte, from a known report.

mod common;

use common::{frame, full_report};
use rip_probe::{correlate, model::*, render};

fn render(f: fn(&Report, &mut dyn std::io::Write) -> std::io::Result<()>, r: &Report) -> String {
    let mut out = Vec::new();
    f(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn thread(tid: u32, name: &str, state: ThreadState, blocked: Option<(u64, bool)>) -> Thread {
    let mut t = full_report().threads[0].clone();
    t.tid = tid;
    t.name = name.into();
    t.state = state;
    t.blocked = blocked.map(|(ns, exact)| Blocked { ns, exact });
    t.history.clear();
    if !state.is_blocked() {
        t.syscall = None;
        t.kernel_stack.clear();
    }
    t
}

fn live_report() -> Report {
    let mut r = full_report();
    r.process.lost = None;
    r.warnings.clear();
    r.window_ns = 1_000_000_000;
    r.threads = vec![
        thread(
            10,
            "pool-0",
            ThreadState::Sleeping,
            Some((4_200_000_000, false)),
        ),
        thread(
            11,
            "pool-1",
            ThreadState::Sleeping,
            Some((5_000_000_000, false)),
        ),
        thread(12, "spinner", ThreadState::Running, None),
    ];
    r.tasks.clear();
    r.groups = correlate::group_threads(&r.threads);
    r.task_groups = correlate::group_tasks(&r.tasks);
    r
}

#[test]
fn live_view() {
    let got = render(render::live, &live_report());
    let want = "\
pid 1 (server) /usr/bin/server: 3 threads, observed 1.0s
ring /dev/shm/x.ring (layout v1, depth 32)

SUMMARY
  2 threads blocked in futex for ≥4.2s — last snap src/inner.rs:3 inner
      tids: 10 11
  1 thread running — last snap src/inner.rs:3 inner
      tids: 12

THREADS
  TID      NAME             STATE             BLOCKED  SYSCALL                                          LOCATION
  10       pool-0           sleeping            ≥4.2s  futex(0x1)                                       src/inner.rs:3 inner (5ns ago)
           kernel: Pool::take
  11       pool-1           sleeping            ≥5.0s  futex(0x1)                                       src/inner.rs:3 inner (5ns ago)
           kernel: Pool::take
  12       spinner          running                 -  -                                                src/inner.rs:3 inner (5ns ago)
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn grouped_and_history_views() {
    let mut r = live_report();
    r.mode = Mode::Dump;
    r.process.alive = false;
    for t in &mut r.threads {
        t.state = ThreadState::Unknown;
        t.blocked = None;
        t.syscall = None;
        t.kernel_stack.clear();
    }
    r.threads[2].location = None;
    r.threads[0].history = vec![Location {
        source: LocationSource::Ring,
        seq: Some(6),
        ago_ns: None,
        frame: Frame { addr: 9, ..frame() },
    }];
    r.groups = correlate::group_threads(&r.threads);
    let got = render(render::grouped, &r);
    let want = "\
pid 1 (server) /usr/bin/server: 3 threads, process not running
ring /dev/shm/x.ring (layout v1, depth 32)

THREADS  LOCATION (threads last seen there)
      2  src/inner.rs:3 inner
         tids: 10 11
      1  (no snap yet)
         tids: 12
";
    assert_eq!(got, want, "\n{got}");
    let got = render(render::history, &r);
    assert!(
        got.contains("tid 10 \"pool-0\" live, 3 snaps\n        #6  src/inner.rs:3 inner\n        #7  src/inner.rs:3 inner\n"),
        "\n{got}"
    );
    assert!(
        got.contains("tid 12 \"spinner\" live, 3 snaps\n    (no snaps)\n"),
        "\n{got}"
    );
}

#[test]
fn tasks_views() {
    let mut r = live_report();
    r.tasks = full_report().tasks;
    r.tasks.push(Task {
        id: 10,
        state: TaskState::Polling,
        polling_tid: Some(11),
        idle_ns: None,
        ..r.tasks[0].clone()
    });
    r.task_groups = correlate::group_tasks(&r.tasks);
    let got = render(render::live, &r);
    assert!(got.contains("TASKS\n  1 task idle for 1ns — last snap src/inner.rs:3 inner\n      ids: 9\n  1 task polling — last snap src/inner.rs:3 inner\n      ids: 10\n"), "\n{got}");
    assert!(got.contains("  9        conn                 idle for 1ns                     4  src/inner.rs:3 inner (5ns ago)\n"), "\n{got}");
    assert!(
        got.contains("  10       conn                 polling on thread 11             4  "),
        "\n{got}"
    );
}
