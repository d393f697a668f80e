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

/// A report with every optional part filled in.
pub fn full_report() -> Report {
    let group = Group {
        count: 1,
        ids: vec![2],
        state: "sleeping".into(),
        wait: Some("futex_wait".into()),
        min_ns: Some(1),
        lower_bound: true,
        location: Some("src/pool.rs:88 Pool::take".into()),
        source: Some(LocationSource::Ring),
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
        threads: vec![Thread {
            tid: 2,
            ns_tid: Some(2),
            name: "w".into(),
            name_source: "ring",
            state: ThreadState::Sleeping,
            syscall: Some(Syscall {
                nr: 202,
                name: "futex".into(),
                args: vec![SyscallArg {
                    name: "uaddr",
                    raw: 1,
                    text: "0x1".into(),
                }],
                text: "futex(0x1)".into(),
            }),
            blocked: Some(Blocked {
                ns: 1,
                exact: false,
            }),
            kernel_stack: vec![frame()],
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
                owner: Owner::OtherProcess { tid: 7, pid: 6 },
                owner_tid: None,
                owner_state: None,
            }),
            exited: false,
        }],
        tasks: vec![Task {
            id: 9,
            generation: 1,
            name: "conn".into(),
            state: TaskState::Idle,
            polling_tid: Some(2),
            polls: 4,
            idle_ns: Some(1),
            polling_ns: Some(1),
            lower_bound: false,
            since_unix_ns: Some(1_800_000_000_123_000_000),
            created_unix_ns: Some(1_800_000_000_000_000_000),
            location: Some(location()),
            history: vec![location()],
        }],
        groups: vec![group.clone()],
        task_groups: vec![group],
        warnings: vec!["w".into()],
        deadlocks: vec![vec![2]],
    }
}
