//! Sample reports shared by the render and JSON tests.
#![allow(dead_code)]

use rip_probe::model::*;

pub fn frame() -> Frame {
    Frame {
        addr: 0x1234,
        function: Some("Pool::take".into()),
        file: Some("src/pool.rs".into()),
        line: Some(88),
        module: Some("/usr/bin/server".into()),
        module_offset: Some(0x234),
        inlined: vec![InlinedFrame {
            function: "inner".into(),
            file: Some("src/inner.rs".into()),
            line: Some(3),
        }],
        ..Frame::default()
    }
}

pub fn location() -> Location {
    Location {
        source: LocationSource::Ring,
        seq: Some(7),
        ago_ns: Some(5),
        frame: frame(),
    }
}

/// A user stack of two frames: a libc function without a line, then
/// `frame()` (with an inlined function).
pub fn stack() -> std::sync::Arc<[Frame]> {
    let libc = Frame {
        addr: 0x7f00_0000_1000,
        function: Some("__futex_abstimed_wait_common".into()),
        module: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
        function_offset: Some(0x10e),
        ..Frame::default()
    };
    vec![libc, frame()].into()
}

/// A report with every optional part filled in.
pub fn full_report() -> Report {
    let group = Group {
        origin: None,
        count: 1,
        ids: vec![2],
        state: GroupState::Thread(ThreadState::Sleeping),
        wait: Some("futex_wait".into()),
        min_ns: Some(1),
        lower_bound: true,
        location: Some(Frame {
            function: Some("Pool::take".into()),
            file: Some("src/pool.rs".into()),
            line: Some(88),
            ..Frame::default()
        }),
        source: Some(LocationSource::Ring),
        frames: stack(),
        stack_samples: Some(StackSamples { count: 3, total: 4 }),
        max_ns: None,
        created_by: None,
        waits_on: Vec::new(),
        labels: Default::default(),
    };
    let waits_on = GoWaitsOn {
        kind: GoWaitKind::Semaphore,
        addrs: vec![0x5f8214],
        name: Some("main.mu+0x4".into()),
    };
    Report {
        schema: SCHEMA_VERSION,
        mode: Mode::Pid,
        process: ProcessInfo {
            pid: 1,
            exe: Some("/usr/bin/server".into()),
            comm: Some("server".into()),
            alive: true,
            lost: Some("gone".into()),
            ns_pid: Some(1),
            title: Some("app --serve".into()),
        },
        rings: vec![RingInfo {
            path: "/dev/shm/x.ring".into(),
            version: 1,
            pid: 1,
            namespace: Some("the path in the mount namespace of pid 1".into()),
            created_unix_ns: 1,
            depth: 32,
            dropped_snaps: 0,
        }],
        window_ns: 1,
        stacks: StackTable,
        threads: vec![Thread {
            tid: 2,
            ns_tid: Some(2),
            name: "w".into(),
            name_source: "ring",
            state: ThreadState::Sleeping,
            syscall: Some(std::sync::Arc::new(Syscall {
                nr: 202,
                name: "futex".into(),
                args: vec![SyscallArg {
                    name: "uaddr",
                    raw: 1,
                    text: "0x1".into(),
                }],
                text: "futex(0x1)".into(),
            })),
            blocked: Some(Blocked {
                ns: 1,
                exact: false,
                source: BlockedSource::Window,
            }),
            kernel_stack: [frame()].into(),
            location: Some(location()),
            history: vec![location()],
            snaps: Some(3),
            polling_task: Some(9),
            waits_for: Some(WaitsFor {
                lock: 0x1000,
                futex: 0x1000,
                symbol: Some("g_lock".into()),
                kind: LockKind::Mutex,
                mutex: Some(MutexFlavor {
                    kind: "normal",
                    ..MutexFlavor::default()
                }),
                runtime: None,
                owner: Owner::OtherProcess { tid: 7, pid: 6 },
                owner_tid: None,
            }),
            exited: false,
            frames: stack(),
            stack_samples: Some(StackSamples { count: 3, total: 4 }),
            python: None,
        }],
        tasks: vec![
            Coroutine {
                origin: Origin::Librip,
                id: 9,
                generation: 1,
                name: "conn".into(),
                state: CoroutineState::Idle,
                polling_tid: Some(2),
                polls: 4,
                idle_ns: Some(1),
                polling_ns: Some(1),
                lower_bound: false,
                since_unix_ns: Some(1_800_000_000_123_000_000),
                created_unix_ns: Some(1_800_000_000_000_000_000),
                location: Some(location()),
                history: vec![location()],
                go: None,
                python: None,
            },
            Coroutine {
                origin: Origin::Go,
                id: 23,
                generation: 0,
                name: String::new(),
                state: CoroutineState::Idle,
                polling_tid: None,
                polls: 0,
                idle_ns: Some(61_000_000_000),
                polling_ns: None,
                lower_bound: true,
                since_unix_ns: None,
                created_unix_ns: None,
                location: Some(location()),
                history: Vec::new(),
                go: Some(Goroutine {
                    status: GoStatus::Waiting,
                    wait_reason: Some("sync.Mutex.Lock".into()),
                    stack: stack(),
                    stack_note: Some("a frame pointer left the goroutine's stack".into()),
                    created_by: Some(std::sync::Arc::new(frame())),
                    waits_on: Some(waits_on.clone()),
                    labels: vec![GoLabel {
                        key: "job".into(),
                        value: "resize".into(),
                    }]
                    .into(),
                    labels_note: None,
                    torn: false,
                }),
                python: None,
            },
        ],
        groups: vec![group.clone()],
        task_groups: vec![
            Group {
                origin: Some(Origin::Librip),
                ..group.clone()
            },
            Group {
                origin: Some(Origin::Go),
                state: GroupState::Goroutine(GoStatus::Waiting),
                wait: Some("sync.Mutex.Lock".into()),
                ids: vec![23],
                stack_samples: None,
                max_ns: Some(61_000_000_000),
                created_by: Some("main.go:12 main.main".into()),
                waits_on: vec![
                    WaitedOn {
                        object: waits_on,
                        count: 1,
                        channel_peers: None,
                    },
                    WaitedOn {
                        object: GoWaitsOn {
                            kind: GoWaitKind::Channel,
                            addrs: vec![0xc000072000],
                            name: None,
                        },
                        count: 1,
                        channel_peers: Some(ChannelPeers {
                            other_side: 0,
                            in_select: 2,
                        }),
                    },
                ],
                labels: vec![GoLabel {
                    key: "job".into(),
                    value: "resize".into(),
                }]
                .into(),
                ..group
            },
        ],
        warnings: vec!["w".into()],
        deadlocks: vec![vec![2]],
        python: None,
    }
}

/// A `rip-probe locks` report with every optional part filled in.
pub fn full_locks_report() -> contention::LocksReport {
    use contention::*;
    LocksReport {
        schema: SCHEMA_VERSION,
        process: ProcessInfo {
            pid: 1,
            exe: Some("/usr/bin/server".into()),
            comm: Some("server".into()),
            alive: false,
            lost: Some("process 1 exited during observation".into()),
            ns_pid: Some(1),
            title: Some("app --serve".into()),
        },
        window_ns: 2_000_000_000,
        locks: vec![LockContention {
            futex: 0x1000,
            lock: 0x1000,
            symbol: Some("g_table_lock".into()),
            kind: LockKind::Mutex,
            mutex: Some(MutexFlavor {
                kind: "normal",
                ..MutexFlavor::default()
            }),
            idle: false,
            waits: 3,
            wakes: 3,
            total_wait_ns: 15_000_000,
            max_wait_ns: 6_000_000,
            p99_wait_ns: 6_000_000,
            histogram: vec![
                Bucket {
                    lo_ns: 1 << 21,
                    hi_ns: 1 << 22,
                    count: 1,
                },
                Bucket {
                    lo_ns: 1 << 22,
                    hi_ns: 1 << 23,
                    count: 2,
                },
            ],
            top_waiters: vec![LockWaiter {
                tid: 2,
                name: Some("worker".into()),
                waits: 3,
                total_wait_ns: 15_000_000,
                max_wait_ns: 6_000_000,
            }],
            wakers: vec![LockWaker {
                wakes: 3,
                calls: 3,
                tid: 3,
                location: Some(frame()),
                stack: vec![frame()],
            }],
        }],
        warnings: vec!["w".into()],
    }
}

/// [`full_report`] with a CPython interpreter read: its threads' Python
/// parts filled in (the text views' fixtures have none).
pub fn full_report_with_python() -> Report {
    let mut r = full_report();
    for t in &mut r.threads {
        t.python = Some(PythonThread {
            ident: 7,
            name: Some("worker-1".into()),
            frames: vec![Frame {
                addr: 0x7000,
                function: Some("worker".into()),
                file: Some("app.py".into()),
                line: Some(9),
                python: true,
                ..Frame::default()
            }],
            merged: true,
            note: Some("not merged".into()),
            holds_gil: true,
            runs_gc: true,
            gil_wait: Some("blocked with take_gil on its native stack".into()),
            waits_on: Some(0x7f00_0000_3000),
        });
    }
    // An asyncio task awaiting another task, and its group.
    let awaits = GoWaitsOn {
        kind: GoWaitKind::Task,
        addrs: vec![0x7f00_0000_1000],
        name: Some("target".into()),
    };
    let chain: std::sync::Arc<[Frame]> = vec![Frame {
        addr: 0x7100,
        function: Some("awaiter".into()),
        file: Some("app.py".into()),
        line: Some(15),
        python: true,
        ..Frame::default()
    }]
    .into();
    r.tasks.push(Coroutine {
        origin: Origin::Asyncio,
        id: 0x7f00_0000_2000,
        generation: 0,
        name: "Task-3".into(),
        state: CoroutineState::Idle,
        polling_tid: None,
        polls: 0,
        idle_ns: None,
        polling_ns: None,
        lower_bound: false,
        since_unix_ns: None,
        created_unix_ns: None,
        location: Some(Location {
            source: LocationSource::Python,
            seq: None,
            ago_ns: None,
            frame: chain[0].clone(),
        }),
        history: Vec::new(),
        go: None,
        python: Some(PythonTask {
            state: AsyncioState::Pending,
            frames: chain.clone(),
            awaits: Some(awaits.clone()),
            changing: false,
        }),
    });
    let mut group = r.task_groups[0].clone();
    group.origin = Some(Origin::Asyncio);
    group.ids = vec![0x7f00_0000_2000];
    group.frames = chain;
    group.waits_on = vec![WaitedOn {
        object: awaits,
        count: 1,
        channel_peers: None,
    }];
    r.task_groups.push(group);
    r.python = Some(Python {
        version: "3.11".into(),
        gil: "held".into(),
        gil_holder: Some(2),
        gil_waiters: vec![3],
        gc: "running".into(),
        gc_thread: Some(2),
        locks: vec![PythonLock {
            object: 0x7f00_0000_3000,
            kind: "RLock".into(),
            name: Some("table_lock".into()),
            waiters: vec![2, 3],
            held: Some(true),
            owner: Owner::Thread { tid: 1 },
            count: Some(2),
        }],
    });
    r
}
