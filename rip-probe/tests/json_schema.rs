//! The JSON output stays what docs/JSON.md documents: every field name the
//! report serializes is documented there, and the schema version matches.

use std::collections::BTreeSet;

use rip_probe::model::*;

fn frame() -> Frame {
    Frame {
        addr: 0x1234,
        function: Some("Pool::take".into()),
        file: Some("src/pool.rs".into()),
        line: Some(88),
        module: Some("/usr/bin/server".into()),
        module_offset: Some(0x234),
        inlined: vec![InlinedFrame {
            function: "inner".into(),
            file: None,
            line: Some(3),
        }],
    }
}

fn location() -> Location {
    Location {
        source: LocationSource::Ring,
        seq: Some(7),
        ago_ns: Some(5),
        frame: frame(),
    }
}

/// A report with every optional part filled in.
fn full_report() -> Report {
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
        },
        rings: vec![RingInfo {
            path: "/dev/shm/x.ring".into(),
            version: 1,
            pid: 1,
            created_unix_ns: 1,
            depth: 32,
            dropped_snaps: 0,
        }],
        window_ns: 1,
        threads: vec![Thread {
            tid: 2,
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
            location: Some(location()),
            history: vec![location()],
        }],
        groups: vec![group.clone()],
        task_groups: vec![group],
        warnings: vec!["w".into()],
    }
}

fn keys(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_field_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/JSON.md"))
        .expect("docs/JSON.md");
    let mut out = Vec::new();
    rip_probe::render::json(&full_report(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let mut names = BTreeSet::new();
    keys(&v, &mut names);
    let undocumented: Vec<_> = names
        .iter()
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/JSON.md: {undocumented:?}"
    );
    assert!(doc.contains(&format!("(schema {SCHEMA_VERSION})")));
    assert_eq!(v["schema"], SCHEMA_VERSION);
}
