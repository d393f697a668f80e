//! The JSON output is what the model says and what docs/JSON.md documents:
//! every report validates against a schema generated from the model
//! (schemars), and docs/JSON.md documents every field of every object of
//! that schema, and no field it does not have. The same holds for the
//! reports of `rip-probe locks`, `calls` and `offcpu`, which docs/JSON.md
//! documents beside it.

use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::{frame, full_locks_report, full_report_with_python};
use rip_probe::model::{
    Bucket, ProcessInfo, Report, SCHEMA_VERSION, ThreadState,
    calls::{Bounds, CallsReport, FunctionCalls, OutlierRule, SlowCall},
    cgroup::{GroupShare, ServiceGroup, ServiceReport},
    contention::LocksReport,
    events::{Event, StateChange},
    leaks::{
        FdKind, HeapSampler, HeapTracing, LeakAcquired, LeakLost, LeakPoint, LeakStack, LeakTotal,
        LeakTracing, LeaksReport, ResourceKind,
    },
    list::{ListReport, ListedProcess},
    offcpu::{OffCpuReport, OffCpuStack, Periods, SnapOffCpu, ThreadOffCpu},
    original::{OriginalEntry, OriginalReport, OriginalSlot},
};

fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Report)).unwrap()
}

/// The schema of `rip-probe calls --json`.
fn calls_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(CallsReport)).unwrap()
}

/// The schema of `rip-probe offcpu --json`.
fn offcpu_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(OffCpuReport)).unwrap()
}

/// The schema of `rip-probe leaks --json`.
fn leaks_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(LeaksReport)).unwrap()
}

/// The schema of `rip-probe --pid N --events`'s lines.
fn events_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Event<'static>)).unwrap()
}

/// Each kind of `--events` line validates against the schema, which
/// tells the kinds apart by `event`.
#[test]
fn every_event_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&events_schema()).expect("a valid schema");
    let reports = reports();
    let events = [
        Event::Attach {
            ts_ns: 1,
            process: reports[0].process.clone(),
            programs: vec!["sched_switch".into()],
        },
        Event::State(StateChange {
            ts_ns: 2,
            tid: 7,
            state: ThreadState::Sleeping,
            syscall: Some("futex".into()),
        }),
        Event::State(StateChange {
            ts_ns: 3,
            tid: 7,
            state: ThreadState::Running,
            syscall: None,
        }),
        Event::Snapshot {
            ts_ns: 4,
            report: &reports[0],
        },
        Event::Lost {
            ts_ns: 5,
            lost: "process 7 exited".into(),
        },
        Event::Detach {
            ts_ns: 6,
            state_changes: 2,
            lost_events: 0,
        },
    ];
    // Events carry no `schema` (their snapshot's report does).
    for e in &events {
        let v = json(e);
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
    let kinds: Vec<String> = events
        .iter()
        .map(|e| json(e)["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["attach", "state", "state", "snapshot", "lost", "detach"]
    );
    let mut v = json(&events[1]);
    v["state"] = "dancing".into();
    assert!(!validator.is_valid(&v));
}

/// The schema of `rip-probe --cgroup PATH --json`.
fn cgroup_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(ServiceReport)).unwrap()
}

/// The schema of `rip-probe dump FILE --json` for an original librip ring.
fn original_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(OriginalReport)).unwrap()
}

/// `--cgroup --json` (and `--comm`, several `--pid`) is one object
/// holding the groups across processes and a report per process, with
/// the schema's version.
#[test]
fn a_cgroup_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&cgroup_schema()).expect("a valid schema");
    let f = frame();
    let group = ServiceGroup {
        count: 3,
        state: rip_probe::model::GroupState::Thread(rip_probe::model::ThreadState::Sleeping),
        wait: Some("futex_wait".into()),
        lock: Some("pool_lock".into()),
        min_ns: Some(1_000),
        max_ns: Some(9_000),
        lower_bound: true,
        location: Some(f.clone()),
        source: Some(rip_probe::model::LocationSource::Ring),
        frames: vec![f.clone(), f].into(),
        processes: vec![GroupShare {
            pid: 1,
            count: 3,
            tids: vec![2, 3, 4],
        }],
    };
    let mut sparse = group.clone();
    (sparse.wait, sparse.lock, sparse.min_ns, sparse.max_ns) = (None, None, None, None);
    (sparse.location, sparse.source) = (None, None);
    for (processes, cgroup, groups) in [
        (
            reports(),
            Some("/sys/fs/cgroup/system.slice/app.service".into()),
            vec![group, sparse],
        ),
        (Vec::new(), None, Vec::new()),
    ] {
        let report = ServiceReport {
            schema: SCHEMA_VERSION,
            cgroup,
            targets: vec!["--pid 1,2".into(), "--comm app".into()],
            window_ns: 1_000_000_000,
            groups,
            warnings: vec!["20 processes were observed in 2 windows".into()],
            processes,
        };
        assert_valid(&validator, &report);
        assert!(json(&report).is_object());
    }
    // The bare array of reports of schema 1 is not one.
    let v = serde_json::to_value(reports()).unwrap();
    assert!(!validator.is_valid(&v));
}

#[test]
fn an_original_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&original_schema()).expect("a valid schema");
    let entry = |frame| OriginalEntry {
        counter: 3,
        seq: 17,
        addr: 0x401136,
        frame,
    };
    let report = OriginalReport {
        schema: SCHEMA_VERSION,
        format: "original-librip".into(),
        path: "/dev/shm/test.ring".into(),
        file_size: 32_000,
        slot_count: 100,
        warnings: vec!["no --exe BINARY: addresses are shown raw".into()],
        slots: vec![
            OriginalSlot {
                id: 0,
                name: "main".into(),
                exited: false,
                entries: vec![entry(frame()), entry(Default::default())],
            },
            OriginalSlot {
                id: 1,
                name: "worker".into(),
                exited: true,
                entries: Vec::new(),
            },
        ],
    };
    assert_valid(&validator, &report);
}

/// The schema of `rip-probe list --json`.
fn list_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(ListReport)).unwrap()
}

#[test]
fn a_list_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&list_schema()).expect("a valid schema");
    let process = |ns_pid| ListedProcess {
        pid: 4711,
        ns_pid,
        threads: 12,
        tasks: 3,
        cgroup: "/system.slice/app.service".into(),
        ring: "/dev/shm/app.ring".into(),
        other_mount_namespace: ns_pid.is_some(),
    };
    for report in [
        ListReport {
            schema: SCHEMA_VERSION,
            processes: vec![process(Some(7)), process(None)],
            unseen: 2,
            hidepid: false,
        },
        ListReport {
            schema: SCHEMA_VERSION,
            processes: vec![],
            unseen: 0,
            hidepid: true,
        },
    ] {
        assert_valid(&validator, &report);
    }
}

/// An `offcpu` report with every optional part filled in.
fn offcpu_report() -> OffCpuReport {
    let f = frame();
    OffCpuReport {
        schema: SCHEMA_VERSION,
        process: ProcessInfo {
            pid: 42,
            exe: Some("/srv/app".into()),
            comm: Some("app".into()),
            alive: true,
            lost: None,
            ns_pid: Some(7),
            title: Some("app --serve".into()),
        },
        window_ns: 2_000_000_000,
        min_block_ns: 1_000,
        kernel_stacks: true,
        total_ns: 3_000_000_000,
        preempted_ns: 1_000_000,
        short: Periods {
            count: 3,
            ns: 2_000,
        },
        stacks: vec![OffCpuStack {
            off_cpu_ns: 3_000_000_000,
            count: 100,
            preempted: false,
            tids: vec![43, 44],
            frames: vec![f.clone(), f.clone()].into(),
            python_note: Some("its Python frames were read in 1 of its 100 off-CPU periods".into()),
            unwound: true,
            kernel_stack: vec![f.clone()].into(),
            snap: Some(f.clone()),
        }],
        threads: vec![ThreadOffCpu {
            tid: 43,
            name: Some("worker".into()),
            blocked_ns: 1_500_000_000,
            preempted_ns: 1_000_000,
            count: 50,
            whole_window: false,
        }],
        snaps: vec![SnapOffCpu {
            snap: f,
            off_cpu_ns: 3_000_000_000,
            count: 100,
        }],
        warnings: vec!["process 42 exited during observation".into()],
    }
}

/// A `leaks` report with every optional part filled in.
fn leaks_report() -> LeaksReport {
    let f = frame();
    LeaksReport {
        schema: SCHEMA_VERSION,
        process: ProcessInfo {
            pid: 42,
            exe: Some("/srv/app".into()),
            comm: Some("app".into()),
            alive: true,
            lost: None,
            ns_pid: Some(7),
            title: Some("app --serve".into()),
        },
        window_ns: 2_000_000_000,
        min_age_ns: 1_000_000,
        traced: LeakTracing {
            descriptors: true,
            mappings: true,
            shm: true,
            heap: Some(HeapTracing {
                allocator: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                name: "glibc".into(),
                functions: vec!["malloc".into(), "free".into()],
                calls: 1000,
                calls_per_s_before: 5000.0,
                older_frees: 12,
            }),
        },
        open_at_start: Some(4),
        totals: vec![LeakTotal {
            kind: ResourceKind::Fd,
            count: 3,
            bytes: 0,
        }],
        released: vec![LeakTotal {
            kind: ResourceKind::Heap,
            count: 900,
            bytes: 90_000,
        }],
        stacks: vec![LeakStack {
            kind: ResourceKind::Fd,
            fd_kind: Some(FdKind::Socket),
            call: "socket".into(),
            count: 3,
            bytes: 0,
            oldest_ns: 1_500_000_000,
            ids: vec![5, 6, 7],
            targets: vec!["socket:[1234]".into()],
            addrs: vec![0x1000, 0x2000],
            frames: vec![f.clone(), f.clone()].into(),
        }],
        allocated: Some(vec![LeakAcquired {
            kind: ResourceKind::Heap,
            call: "malloc".into(),
            count: 900,
            bytes: 90_000,
            addrs: vec![0x1000],
            frames: vec![f].into(),
        }]),
        series: vec![LeakPoint {
            at_ns: 100_000_000,
            heap_count: 10,
            heap_bytes: 1000,
            descriptors: 3,
            mappings: 1,
            mapped_bytes: 4096,
            heap_calls: 500,
        }],
        lost: LeakLost {
            events: 1,
            calls: 2,
            unmatched_releases: 3,
            heap_calls: 4,
        },
        warnings: vec!["1 event lost".into()],
        sampler: Some(HeapSampler {
            ring: "/dev/shm/rip-7.ring".into(),
            mean_bytes: 524_288,
            estimated: true,
            sampled: 100,
            freed: 90,
            dropped: 0,
            torn: 0,
            live_samples: 10,
            sampled_bytes: 4000,
        }),
    }
}

#[test]
fn a_leaks_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&leaks_schema()).expect("a valid schema");
    let full = leaks_report();
    let mut sparse = leaks_report();
    sparse.traced.heap = None;
    sparse.sampler = None;
    sparse.allocated = None;
    sparse.open_at_start = None;
    sparse.stacks[0].fd_kind = None;
    sparse.stacks.clear();
    for r in [full, sparse] {
        assert_valid(&validator, &r);
    }
    let mut v = json(&leaks_report());
    v["stacks"][0]["kind"] = "gold".into();
    assert!(!validator.is_valid(&v));
}

#[test]
fn an_offcpu_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&offcpu_schema()).expect("a valid schema");
    let full = offcpu_report();
    let mut sparse = offcpu_report();
    sparse.stacks[0].snap = None;
    sparse.threads[0].name = None;
    sparse.snaps.clear();
    for r in [full, sparse] {
        let mut out = Vec::new();
        rip_probe::render::json(&r, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

/// A `calls` report with every optional part filled in.
fn calls_report() -> CallsReport {
    let bounds = Bounds {
        lo_ns: 3_000_000,
        hi_ns: 3_145_728,
    };
    CallsReport {
        schema: SCHEMA_VERSION,
        process: ProcessInfo {
            pid: 42,
            exe: Some("/srv/app".into()),
            comm: Some("app".into()),
            alive: false,
            lost: Some("process 42 exited during observation".into()),
            ns_pid: None,
            title: Some("app --serve".into()),
        },
        window_ns: 2_000_000_000,
        outlier_rule: Some(OutlierRule::Trained {
            percent: 250,
            training_ns: 500_000_000,
        }),
        functions: vec![FunctionCalls {
            function: "work".into(),
            module: "/srv/app".into(),
            module_offset: 0x1390,
            calls: 10,
            timed: 9,
            min_ns: Some(3_000_000),
            mean_ns: Some(3_100_000),
            p50: Some(bounds),
            p99: Some(bounds),
            max_ns: Some(24_000_000),
            histogram: vec![Bucket {
                lo_ns: 1 << 21,
                hi_ns: 1 << 22,
                count: 9,
            }],
            threshold_ns: Some(7_500_000),
            outliers: 1,
        }],
        outliers: vec![SlowCall {
            function: "work".into(),
            tid: 43,
            start_unix_ns: 1_795_853_265_120_000_000,
            duration_ns: 24_000_000,
            caller: frame(),
            stack: vec![frame(), frame()],
        }],
        outliers_omitted: 0,
        warnings: vec!["process 42 exited during observation after 1.0s".into()],
    }
}

fn locks_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(LocksReport)).unwrap()
}

fn json<R: serde::Serialize>(r: &R) -> serde_json::Value {
    let mut out = Vec::new();
    rip_probe::render::json(r, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Sample reports: every optional part filled in, and every part empty.
fn reports() -> Vec<Report> {
    let full = full_report_with_python();
    let mut empty = full.clone();
    empty.threads.clear();
    empty.tasks.clear();
    empty.groups.clear();
    empty.task_groups.clear();
    empty.rings.clear();
    empty.warnings.clear();
    empty.process.exe = None;
    empty.process.comm = None;
    empty.process.lost = None;
    let mut sparse = full.clone();
    for t in &mut sparse.threads {
        t.syscall = None;
        t.blocked = None;
        t.location = None;
        t.snaps = None;
        t.polling_task = None;
    }
    for t in &mut sparse.tasks {
        t.polling_tid = None;
        t.idle_ns = None;
        t.location = None;
    }
    vec![full, empty, sparse]
}

/// `report`'s JSON is valid against `validator` and has the schema version.
fn assert_valid<R: serde::Serialize>(validator: &jsonschema::Validator, report: &R) {
    let v = json(report);
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(v["schema"], SCHEMA_VERSION);
}

#[test]
fn every_report_validates_against_the_models_schema() {
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    for r in reports() {
        assert_valid(&validator, &r);
    }
    // And the check can fail: a report with a field of the wrong type.
    let mut v = json(&full_report_with_python());
    v["threads"][0]["tid"] = "one".into();
    assert!(!validator.is_valid(&v));
}

#[test]
fn a_calls_report_validates_against_its_schema() {
    let schema = calls_schema();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let mut sparse = calls_report();
    sparse.outlier_rule = Some(OutlierRule::SlowerThan {
        threshold_ns: 10_000_000,
    });
    sparse.functions[0].min_ns = None;
    sparse.functions[0].p50 = None;
    sparse.outliers.clear();
    for r in [calls_report(), sparse] {
        let mut out = Vec::new();
        rip_probe::render::json(&r, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

#[test]
fn every_locks_report_validates_against_its_schema() {
    let validator = jsonschema::validator_for(&locks_schema()).expect("a valid schema");
    let full = full_locks_report();
    let mut sparse = full.clone();
    sparse.process.lost = None;
    sparse.warnings.clear();
    for l in &mut sparse.locks {
        l.symbol = None;
        l.mutex = None;
        l.histogram.clear();
        l.top_waiters.iter_mut().for_each(|w| w.name = None);
        l.wakers.iter_mut().for_each(|w| w.location = None);
    }
    let mut empty = full.clone();
    empty.locks.clear();
    for r in [full, sparse, empty] {
        assert_valid(&validator, &r);
    }
    let mut v = json(&full_locks_report());
    v["locks"][0]["waits"] = "many".into();
    assert!(!validator.is_valid(&v));
}

/// The object types of the schema, by the heading docs/JSON.md gives them,
/// each with its property names.
fn schema_objects() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = objects_of(&schema(), "Report");
    for (name, fields) in objects_of(&locks_schema(), "LocksReport")
        .into_iter()
        .chain(objects_of(&calls_schema(), "CallsReport"))
        .chain(objects_of(&offcpu_schema(), "OffCpuReport"))
        .chain(objects_of(&leaks_schema(), "LeaksReport"))
        .chain(objects_of(&list_schema(), "ListReport"))
        .chain(objects_of(&cgroup_schema(), "ServiceReport"))
        .chain(objects_of(&original_schema(), "OriginalReport"))
        .chain(objects_of(&events_schema(), "Event"))
    {
        out.entry(name).or_default().extend(fields);
    }
    out
}

/// The object types of one schema whose root is called `root`.
fn objects_of(s: &serde_json::Value, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    // An object's properties; for a tagged enum (`oneOf` objects), the
    // union of its variants' properties, the tag included.
    fn props(o: &serde_json::Value) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = o["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        for variants in [&o["oneOf"], &o["anyOf"]] {
            for v in variants.as_array().into_iter().flatten() {
                out.extend(props(v));
            }
        }
        out
    }
    let heading = |def: &str| -> String {
        match def {
            "ProcessInfo" => "Process",
            "RingInfo" => "Ring",
            "SyscallArg" => "Arg",
            "InlinedFrame" => "Frame.inlined",
            "MutexFlavor" => "Mutex",
            d => d,
        }
        .to_string()
    };
    let mut out = BTreeMap::new();
    out.insert(root.to_string(), props(s));
    for (name, def) in s["$defs"].as_object().unwrap() {
        let fields = props(def);
        if !fields.is_empty() {
            out.insert(heading(name), fields);
        }
    }
    out
}

/// docs/JSON.md's fields, per heading: the first column of each table
/// row, and the `{`a`, `b`}` objects written inline in a type column
/// (as heading `Parent.field`).
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/JSON.md"))
        .expect("docs/JSON.md");
    let ticked = |s: &str| -> Vec<String> {
        s.split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, t)| t.to_string())
            .collect()
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in doc.lines() {
        if let Some(h) = line
            .strip_prefix("## ")
            .or_else(|| line.strip_prefix("### "))
        {
            section = h.trim().to_string();
            continue;
        }
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        if cols.len() < 4 || !cols[1].starts_with('`') {
            continue;
        }
        let field = ticked(cols[1]).remove(0);
        if let Some(inner) = cols[2].strip_prefix('{').and_then(|t| t.split('}').next()) {
            out.entry(format!("{section}.{field}"))
                .or_default()
                .extend(ticked(inner));
        }
        out.entry(section.clone()).or_default().insert(field);
    }
    out
}

#[test]
fn docs_json_md_documents_every_field_and_nothing_else() {
    let doc = documented();
    let schema = schema_objects();
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        schema.keys().collect::<Vec<_>>(),
        "the objects docs/JSON.md documents are the model's"
    );
    for (object, fields) in &schema {
        let d = &doc[object];
        let undocumented: Vec<_> = fields.difference(d).collect();
        let extra: Vec<_> = d.difference(fields).collect();
        assert!(
            undocumented.is_empty() && extra.is_empty(),
            "{object}: not in docs/JSON.md: {undocumented:?}; documented but not in the model: {extra:?}"
        );
    }
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/JSON.md")).unwrap();
    assert!(text.contains(&format!("(schema {SCHEMA_VERSION})")));
}

/// Every key the full report serializes is in the schema's objects: the
/// schema is the output's, not a description beside it.
#[test]
fn the_schema_covers_every_serialized_key() {
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
    let mut names = BTreeSet::new();
    keys(&json(&full_report_with_python()), &mut names);
    keys(&json(&full_locks_report()), &mut names);
    keys(&json(&calls_report()), &mut names);
    keys(&json(&offcpu_report()), &mut names);
    keys(&json(&leaks_report()), &mut names);
    let all: BTreeSet<String> = schema_objects().into_values().flatten().collect();
    let missing: Vec<_> = names.difference(&all).collect();
    assert!(missing.is_empty(), "{missing:?}");
}
