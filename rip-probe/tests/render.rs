//! The text views, byte for byte, from a known report.

mod common;

use common::{frame, full_report};
use rip_probe::{analyze, model::*, render};

fn render(f: fn(&Report, &mut dyn std::io::Write) -> std::io::Result<()>, r: &Report) -> String {
    let mut out = Vec::new();
    f(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn thread(tid: u64, name: &str, state: ThreadState, blocked: Option<(u64, bool)>) -> Thread {
    let mut t = full_report().threads[0].clone();
    t.tid = tid;
    t.name = name.into();
    t.state = state;
    t.blocked = blocked.map(|(ns, exact)| Blocked {
        ns,
        exact,
        source: if exact {
            BlockedSource::Switch
        } else {
            BlockedSource::Window
        },
    });
    t.history.clear();
    t.polling_task = None;
    t.waits_for = None;
    t.ns_tid = None;
    if state.is_blocked() {
        // Unwound, not sampled.
        t.stack_samples = None;
    } else {
        t.syscall = None;
        t.kernel_stack = Default::default();
        t.frames = vec![Frame {
            addr: 0x1300,
            function: Some("spin".into()),
            file: Some("src/spin.rs".into()),
            line: Some(7),
            module: Some("/usr/bin/server".into()),
            ..Frame::default()
        }]
        .into();
    }
    t
}

fn live_report() -> Report {
    let mut r = full_report();
    r.process.lost = None;
    r.process.ns_pid = None;
    r.rings[0].namespace = None;
    r.warnings.clear();
    r.deadlocks.clear();
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
    r.groups = analyze::group_threads(&r.threads);
    r.task_groups = analyze::group_tasks(&r.tasks);
    r
}

#[test]
fn live_view() {
    let got = render(render::live, &live_report());
    let want = "\
pid 1 (server) /usr/bin/server \"app --serve\": 3 threads, observed 1.0s
ring /dev/shm/x.ring (layout v1, depth 32)

SUMMARY
  2 threads blocked in futex for ≥4.2s — last snap src/inner.rs:3 inner
      tids: 10 11
      #0  0x7f0000001000 __futex_abstimed_wait_common+0x10e (libc.so.6)
      #1  inlined        inner at src/inner.rs:3 (server)
      #2  0x1234         Pool::take at src/pool.rs:88 (server)
  1 thread running — last snap src/inner.rs:3 inner
      tids: 12
      hottest stack in the window, 3 of 4 samples:
      #0  0x1300         spin at src/spin.rs:7 (server)

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

/// Folded stacks: one line per distinct stack, outermost first, inlined
/// functions after the function they are in, the kernel stack last.
#[test]
fn folded_view() {
    let mut r = live_report();
    r.threads[1].tid = 13;
    let got = render(render::folded, &r);
    let want = "\
server;Pool::take;inner;__futex_abstimed_wait_common;Pool::take_[k] 2
server;spin 1
";
    assert_eq!(got, want, "\n{got}");
    // No stack, no line; a `;` or a control character in a name cannot
    // break a line.
    r.threads[0].frames = Default::default();
    let mut evil = r.threads[2].frames.to_vec();
    evil[0].function = Some("a;b\nc".into());
    r.threads[2].frames = evil.into();
    let got = render(render::folded, &r);
    assert_eq!(
        got,
        "server;Pool::take;inner;__futex_abstimed_wait_common;Pool::take_[k] 1\nserver;a:b\\nc 1\n"
    );
}

/// A control character in a frame of a stack is escaped in the text view.
#[test]
fn stack_frames_are_escaped() {
    let mut r = live_report();
    let mut evil = r.threads[2].frames.to_vec();
    evil[0].function = Some("spin\x1b[2J".into());
    r.threads[2].frames = evil.into();
    r.groups = analyze::group_threads(&r.threads);
    let got = render(render::live, &r);
    assert!(got.contains(" spin\\x1b[2J at src/spin.rs:7"), "{got}");
    assert!(!got.contains('\x1b'));
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
        t.kernel_stack = Default::default();
    }
    r.threads[2].location = None;
    r.threads[0].history = vec![Location {
        source: LocationSource::Ring,
        seq: Some(6),
        ago_ns: None,
        frame: Frame { addr: 9, ..frame() },
    }];
    r.groups = analyze::group_threads(&r.threads);
    let got = render(render::grouped, &r);
    let want = "\
pid 1 (server) /usr/bin/server \"app --serve\": 3 threads, process not running
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
        got.contains("tid 10 \"pool-0\" gone (its process is not running), 3 snaps\n        #6  src/inner.rs:3 inner\n        #7  src/inner.rs:3 inner\n"),
        "\n{got}"
    );
    assert!(
        got.contains(
            "tid 12 \"spinner\" gone (its process is not running), 3 snaps\n    (no snaps)\n"
        ),
        "\n{got}"
    );
}

fn task(id: u64, state: CoroutineState, ns: u64, line: u32) -> Coroutine {
    let mut t = full_report().tasks[0].clone();
    t.id = id;
    t.state = state;
    t.history.clear();
    t.idle_ns = (state == CoroutineState::Idle).then_some(ns);
    t.polling_ns = (state == CoroutineState::Polling).then_some(ns);
    t.polling_tid = (state == CoroutineState::Polling).then_some(11);
    if let Some(l) = &mut t.location {
        l.ago_ns = None;
        l.frame.inlined.clear();
        l.frame.file = Some("src/conn.rs".into());
        l.frame.function = Some("read_frame".into());
        l.frame.line = Some(line);
    }
    t
}

#[test]
fn tasks_views() {
    let mut r = live_report();
    let s = 1_000_000_000;
    r.tasks = vec![
        task(1, CoroutineState::Idle, 31 * s, 120),
        task(2, CoroutineState::Idle, 45 * s, 120),
        task(3, CoroutineState::Idle, 40 * s, 120),
        task(4, CoroutineState::Polling, 2 * s, 88),
        task(5, CoroutineState::Idle, 3 * s, 7),
    ];
    r.task_groups = analyze::group_tasks(&r.tasks);
    let got = render(render::live, &r);
    let want = "\
TASKS
  3 tasks idle ≥31.0s — last snap src/conn.rs:120 read_frame
      ids: 1 2 3
  1 task idle for 3.0s — last snap src/conn.rs:7 read_frame
      ids: 5
  1 task polling for 2.0s — last snap src/conn.rs:88 read_frame
      ids: 4

  ID       NAME                 STATE                                                FOR   POLLS  LOCATION
  4        conn                 polling on thread 11 (in futex)                     2.0s       4  src/conn.rs:88 read_frame
  2        conn                 idle since 2027-01-15T08:00:00.123Z                45.0s       4  src/conn.rs:120 read_frame
  3        conn                 idle since 2027-01-15T08:00:00.123Z                40.0s       4  src/conn.rs:120 read_frame
  1        conn                 idle since 2027-01-15T08:00:00.123Z                31.0s       4  src/conn.rs:120 read_frame
  5        conn                 idle since 2027-01-15T08:00:00.123Z                 3.0s       4  src/conn.rs:7 read_frame

THREADS
";
    assert!(got.contains(want), "\n{got}");

    // Post-mortem: durations are lower bounds, in the group and the table.
    r.mode = Mode::Dump;
    for t in &mut r.tasks {
        t.lower_bound = true;
    }
    r.task_groups = analyze::group_tasks(&r.tasks);
    let got = render(render::grouped, &r);
    assert!(
        got.contains("  1 task idle ≥3.0s — last snap src/conn.rs:7 read_frame\n"),
        "\n{got}"
    );
    assert!(
        got.contains("idle since 2027-01-15T08:00:00.123Z               ≥45.0s       4  src/conn.rs:120 read_frame\n"),
        "\n{got}"
    );
    let got = render(render::history, &r);
    assert!(
        got.contains("task 4 \"conn\" polling on thread 11 (in futex) (≥2.0s), 4 polls\n"),
        "\n{got}"
    );
}

#[test]
fn the_task_table_stops_after_the_hundred_idle_longest() {
    let mut r = live_report();
    r.tasks = (1..=150)
        .map(|i| task(i, CoroutineState::Idle, i * 1_000_000, 120))
        .collect();
    r.task_groups = analyze::group_tasks(&r.tasks);
    let got = render(render::live, &r);
    let rows: Vec<&str> = got.lines().filter(|l| l.contains("idle since")).collect();
    assert_eq!(rows.len(), 100);
    assert!(rows[0].starts_with("  150 "), "{}", rows[0]);
    assert!(rows[99].starts_with("  51 "), "{}", rows[99]);
    assert!(
        got.contains("  … 50 more tasks (all in --json; --min-idle DUR lists the longest idle)\n"),
        "\n{got}"
    );
    assert!(got.contains("  150 tasks idle ≥1.0ms — last snap src/conn.rs:120 read_frame\n"));
}

/// A process in a container: host ids first, its namespace's beside them,
/// and where its ring was read from.
#[test]
fn container_view() {
    let mut r = live_report();
    r.process.pid = 4711;
    r.process.ns_pid = Some(1);
    r.rings[0].namespace = Some("the path in the mount namespace of pid 4711".into());
    r.threads[0].ns_tid = Some(7);
    let got = render(render::live, &r);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "pid 4711 (pid 1 in its namespace) (server) /usr/bin/server \"app --serve\": 3 threads, observed 1.0s",
            "ring /dev/shm/x.ring (layout v1, depth 32)",
            "  the path in the mount namespace of pid 4711",
        ],
        "\n{got}"
    );
    assert!(
        got.contains("\n  10 (ns 7) pool-0           sleeping "),
        "\n{got}"
    );
    // After the writer is gone only its namespace's pid is known.
    r.process.pid = 1;
    r.process.alive = false;
    r.mode = Mode::Dump;
    let got = render(render::grouped, &r);
    assert!(
        got.starts_with("pid 1 (of its own pid namespace) (server) /usr/bin/server \"app --serve\": 3 threads, process not running\n"),
        "\n{got}"
    );
}

/// An `offcpu` report: a worker blocked under one stack with a last snap
/// and a kernel stack, preempted under another.
fn offcpu_report() -> offcpu::OffCpuReport {
    use offcpu::*;
    let stack = common::stack();
    let kernel: std::sync::Arc<[Frame]> = vec![Frame {
        addr: 0xffff_ffff_8100_0000,
        function: Some("schedule".into()),
        ..Frame::default()
    }]
    .into();
    OffCpuReport {
        schema: SCHEMA_VERSION,
        process: full_report().process,
        window_ns: 2_000_000_000,
        min_block_ns: 1_000,
        kernel_stacks: true,
        total_ns: 1_600_000_000,
        preempted_ns: 100_000_000,
        short: Periods {
            count: 7,
            ns: 3_500,
        },
        stacks: vec![
            OffCpuStack {
                off_cpu_ns: 1_500_000_000,
                count: 50,
                preempted: false,
                tids: vec![12],
                frames: stack.clone(),
                python_note: None,
                unwound: true,
                kernel_stack: kernel,
                snap: Some(frame()),
            },
            OffCpuStack {
                off_cpu_ns: 100_000_000,
                count: 9,
                preempted: true,
                tids: vec![12, 13],
                frames: stack,
                python_note: None,
                unwound: false,
                kernel_stack: Default::default(),
                snap: None,
            },
        ],
        threads: vec![ThreadOffCpu {
            tid: 12,
            name: Some("worker".into()),
            blocked_ns: 1_500_000_000,
            preempted_ns: 100_000_000,
            count: 59,
            whole_window: true,
        }],
        snaps: vec![SnapOffCpu {
            snap: frame(),
            off_cpu_ns: 1_500_000_000,
            count: 50,
        }],
        warnings: vec![],
    }
}

fn render_offcpu(
    f: fn(&offcpu::OffCpuReport, &mut dyn std::io::Write) -> std::io::Result<()>,
    r: &offcpu::OffCpuReport,
) -> String {
    let mut out = Vec::new();
    f(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn offcpu_views() {
    let mut r = offcpu_report();
    let text = render_offcpu(render::offcpu_text, &r);
    let want = "\
pid 1 (server) /usr/bin/server: 1.6s off CPU in 2.0s over 1 thread (blocked 1.5s, preempted 100ms)
7 periods shorter than 1µs (3µs in all) are not attributed

  TID      NAME               OFF-CPU   BLOCKED PREEMPTED  SHARE
  12       worker                1.6s      1.5s     100ms 100.0%  blocked all window

By last snap:
   93.8%      1.5s  src/inner.rs:3 inner

Stacks, most time off CPU first:

 93.8% 1.5s  blocked, 50 periods, thread 12
    last snap: src/inner.rs:3 inner
    #0  0x7f0000001000 __futex_abstimed_wait_common+0x10e (libc.so.6)
    #1  inlined        inner at src/inner.rs:3 (server)
    #2  0x1234         Pool::take at src/pool.rs:88 (server)
    kernel: schedule

  6.2% 100ms  preempted (runnable, waiting for a CPU), 9 periods, threads 12 13
    (stack not unwound: only where the thread entered the kernel)
    #0  0x7f0000001000 __futex_abstimed_wait_common+0x10e (libc.so.6)
    #1  inlined        inner at src/inner.rs:3 (server)
    #2  0x1234         Pool::take at src/pool.rs:88 (server)
";
    assert_eq!(text, want, "\n{text}");
    // Outermost first, in microseconds; the last snap under the process,
    // kernel frames marked, preempted time marked.
    let folded = render_offcpu(render::offcpu_folded, &r);
    let want = "\
server;Pool::take;inner;__futex_abstimed_wait_common;[preempted] 100000
server;[snap src/inner.rs:3 inner];Pool::take;inner;__futex_abstimed_wait_common;schedule_[k] 1500000
";
    assert_eq!(folded, want, "\n{folded}");
    // A control character from the target never reaches the terminal, and
    // a `;` cannot split a folded frame.
    let mut evil = r.stacks[0].frames.to_vec();
    evil[0].function = Some("a;b\x1b[2J".into());
    r.stacks[0].frames = evil.into();
    let text = render_offcpu(render::offcpu_text, &r);
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.contains("a;b\\x1b[2J"), "{text}");
    let folded = render_offcpu(render::offcpu_folded, &r);
    assert!(folded.contains(";a:b\\x1b[2J;"), "{folded}");
    let svg = render_offcpu(render::offcpu_svg, &r);
    assert!(!svg.contains('\x1b'));
}

/// A waiter of `kind` on the lock at `lock` named `symbol`, owned by
/// `owner` (a thread of the report) or by nobody recorded.
fn waiting(
    tid: u64,
    kind: LockKind,
    lock: u64,
    symbol: &str,
    runtime: Option<RuntimeWait>,
    owner: Option<u32>,
    cause: Option<LockChange>,
) -> Thread {
    let mut t = thread(tid, "w", ThreadState::Sleeping, Some((1_000_000_000, true)));
    t.waits_for = Some(WaitsFor {
        lock,
        futex: lock,
        symbol: Some(symbol.into()),
        kind,
        mutex: None,
        runtime,
        owner: match (owner, cause) {
            (Some(tid), _) => Owner::Thread { tid },
            (None, Some(cause)) => Owner::Changing { cause },
            (None, None) => Owner::NotRecorded {
                reason: "it records no owner".into(),
            },
        },
        owner_tid: owner,
    });
    t
}

/// LOCKS holds the waits for a lock (a lock changing hands said so) and
/// for a thread to exit (a join);
/// IDLE WAITS one line per condition variable with its waiter count, the
/// anonymous ones with one waiter each folded into one line (a named one
/// kept), and one line per kind of parked thread.
#[test]
fn lock_waits_and_idle_waits() {
    let mut r = live_report();
    let cv = |tid, lock, name: &str| waiting(tid, LockKind::Condvar, lock, name, None, None, None);
    let m = |tid, owner, cause| waiting(tid, LockKind::Mutex, 0x100, "g_m", None, owner, cause);
    r.threads = vec![
        m(20, Some(21), None),
        m(21, None, Some(LockChange::WaitEnded)),
        cv(30, 0x200, "g_idle"),
        cv(31, 0x200, "g_idle"),
        cv(32, 0x200, "g_idle"),
        cv(33, 0x300, "COND_manager"),
        cv(40, 0x400, "heap 0x400"),
        cv(41, 0x500, "heap 0x500"),
        cv(42, 0x600, "heap 0x600"),
        cv(43, 0x700, "heap 0x700"),
        waiting(
            50,
            LockKind::Parked,
            0x800,
            "heap 0x800",
            Some(RuntimeWait::GoIdleM),
            None,
            None,
        ),
        waiting(
            51,
            LockKind::Parked,
            0x900,
            "heap 0x900",
            Some(RuntimeWait::GoIdleM),
            None,
            None,
        ),
        // A join: 60 waits for 61, asleep on its own, to exit.
        waiting(
            60,
            LockKind::ThreadExit,
            0xa00,
            "heap 0xa00",
            None,
            Some(61),
            None,
        ),
        thread(
            61,
            "worker",
            ThreadState::Sleeping,
            Some((2_000_000_000, true)),
        ),
    ];
    r.groups = analyze::group_threads(&r.threads);
    let got = render(render::live, &r);
    let section = &got[got.find("LOCKS").unwrap()..got.find("THREADS").unwrap()];
    let want = "\
LOCKS
  20 (w) waits for mutex g_m held by 21 (w), which waits for mutex g_m: unconfirmed, lock changing hands (the wait ended while it was read)
  21 (w) waits for mutex g_m: unconfirmed, lock changing hands (the wait ended while it was read)
  60 (w) waits for thread 61 (worker) to exit, sleeping in futex(0x1) for 2.0s

IDLE WAITS (waiting to be signalled or unparked, not for a lock)
  3 threads wait on condition variable g_idle
      tids: 30 31 32
  33 (w) waits on condition variable COND_manager
  4 threads wait, each on a condition variable of its own
      tids: 40 41 42 43
  2 threads: Go runtime: idle M (no goroutine to run), parked on its note
      tids: 50 51

";
    assert_eq!(section, want, "\n{got}");
    assert!(!got.contains("DEADLOCK"), "{got}");
}

/// A cut thread table lists the first rows and ends with one line that
/// counts the rest and says how to see them; the summary above still
/// counts every thread, and a cut that hides nothing prints no such line.
#[test]
fn a_cut_thread_table_says_what_it_left_out() {
    let r = live_report();
    let n = r.threads.len();
    assert!(n >= 3, "the fixture has threads to cut");
    let whole = render(render::live, &r);
    let cut = {
        let mut out = Vec::new();
        render::live_cut(&r, Some(1), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let (head, table) = whole.split_once("\nTHREADS\n").unwrap();
    let (cut_head, cut_table) = cut.split_once("\nTHREADS\n").unwrap();
    assert_eq!(head, cut_head, "everything above the table is whole");
    // The cut table is the whole one up to its second thread's row, then
    // the line that counts the rest.
    let (kept, last) = cut_table.trim_end().rsplit_once('\n').unwrap();
    let second = format!("\n  {:<8}", r.threads[1].tid);
    let upto = table.find(&second).expect("a second row") + 1;
    assert_eq!(format!("{kept}\n"), table[..upto], "{cut}");
    assert_eq!(
        last,
        format!(
            "  … {} more threads not shown (the summary above counts them): --all lists every thread, --json has them all",
            n - 1
        )
    );
    let mut out = Vec::new();
    render::live_cut(&r, Some(n), &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), whole);
}

/// The header of several processes says what was observed: nothing
/// before a snapshot, else the span of the processes' windows (each from
/// its own attach to its own report), not the longest alone.
#[test]
fn several_processes_say_how_long_each_was_observed() {
    let header = |windows: &[u64]| {
        let processes: Vec<Report> = windows
            .iter()
            .map(|&ns| {
                let mut r = live_report();
                r.window_ns = ns;
                r
            })
            .collect();
        let report = cgroup::ServiceReport {
            schema: SCHEMA_VERSION,
            cgroup: None,
            targets: vec!["--comm server".into()],
            window_ns: windows.iter().copied().max().unwrap(),
            groups: Vec::new(),
            warnings: Vec::new(),
            processes,
        };
        let mut out = Vec::new();
        render::service(&report, None, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        header(&[0, 0]),
        "2 processes (--comm server): 6 threads, snapshots (no window)"
    );
    assert_eq!(
        header(&[1_000_000_000, 1_000_000_000]),
        "2 processes (--comm server): 6 threads, observed 1.0s"
    );
    assert_eq!(
        header(&[1_020_000_000, 1_700_000_000]),
        "2 processes (--comm server): 6 threads, observed 1.0s–1.7s (each process from its \
         attach to its report)"
    );
}

/// CPython's line in the header and a thread's Python line: the GIL's
/// holder running the cyclic GC; a collection seen on no thread claimed;
/// one whose two reads differ.
#[test]
fn python_gil_and_gc_lines() {
    let mut r = live_report();
    r.threads.truncate(1);
    r.threads[0].state = ThreadState::Running;
    r.threads[0].blocked = None;
    r.threads[0].python = Some(PythonThread {
        ident: 7,
        name: None,
        frames: vec![Frame {
            addr: 0x7000,
            function: Some("collect_loop".into()),
            file: Some("/srv/app.py".into()),
            line: Some(4),
            python: true,
            ..Frame::default()
        }],
        merged: false,
        note: None,
        holds_gil: true,
        runs_gc: true,
        gil_wait: None,
        waits_on: None,
    });
    r.python = Some(Python {
        version: "3.12".into(),
        gil: "held".into(),
        gil_holder: Some(10),
        gil_waiters: vec![],
        gc: "running".into(),
        gc_thread: Some(10),
        locks: vec![],
    });
    let text = |r: &Report| {
        let got = render(render::live, r);
        got.lines()
            .filter(|l| l.starts_with("python ") || l.contains("python:"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    assert_eq!(
        text(&r),
        "\
python 3.12: threads and frames read from the interpreter; the GIL is held by tid 10, which runs the cyclic GC (collecting at both reads, the GIL held throughout)
           python: [holds the GIL, runs the cyclic GC] collect_loop (/srv/app.py:4)
"
    );
    let py = r.python.as_mut().unwrap();
    py.gc_thread = None;
    r.threads[0].python.as_mut().unwrap().runs_gc = false;
    assert_eq!(
        text(&r),
        "\
python 3.12: threads and frames read from the interpreter; the GIL is held by tid 10; the cyclic GC is collecting (at both reads), on no thread claimed: the GIL changed hands or its holder's frames moved between the reads
           python: [holds the GIL] collect_loop (/srv/app.py:4)
"
    );
    r.python.as_mut().unwrap().gc = "changing".into();
    assert!(text(&r).starts_with(
        "python 3.12: threads and frames read from the interpreter; the GIL is held by tid 10; \
         the cyclic GC's two reads differ (or one failed): it is not claimed running\n"
    ));
    // Idle: nothing said of it.
    r.python.as_mut().unwrap().gc = "idle".into();
    assert!(text(&r).starts_with(
        "python 3.12: threads and frames read from the interpreter; the GIL is held by tid 10\n"
    ));
}
