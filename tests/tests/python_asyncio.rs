//! CPython's asyncio tasks read from outside, for real: a program this
//! test writes parks tasks in `Event.wait`, `Queue.get`, `asyncio.sleep`,
//! a stream read on a socket, and in `await` of another task; `rip-probe
//! --pid` must list every task with its name and await chain, group them
//! by chain with exact counts, and say which future each group awaits (the
//! awaited task: one object for all its awaiters), in JSON, text and
//! `--folded`, on Debian's stripped 3.11, on a shared 3.12 and on Debian's
//! 3.13 (read through its `_Py_DebugOffsets`).

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{
    TempDir, bpf_tests_enabled,
    pprof::{pprof_top, pprof_top_of},
    rip_probe_json, rip_probe_ok,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

const PROGRAM: &str = r#"
import asyncio, socket
async def wait_event(ev):
    await ev.wait()
async def queue_getter(q):
    await q.get()
async def sleeper():
    await asyncio.sleep(100000)
async def reader(sock):
    r, w = await asyncio.open_connection(sock=sock)
    await r.read(10)
async def target():
    await asyncio.sleep(100000)
async def awaiter(t):
    await t
async def main():
    ev = asyncio.Event()
    q = asyncio.Queue()
    keep = []
    for i in range(5):
        keep.append(asyncio.create_task(wait_event(ev), name=f"ev-{i}"))
    for i in range(3):
        keep.append(asyncio.create_task(queue_getter(q), name=f"q-{i}"))
    for i in range(4):
        keep.append(asyncio.create_task(sleeper(), name=f"sleep-{i}"))
    pairs = [socket.socketpair() for _ in range(2)]
    for i, (a, b) in enumerate(pairs):
        keep.append(asyncio.create_task(reader(a), name=f"recv-{i}"))
    t = asyncio.create_task(target(), name="target")
    keep.append(t)
    for i in range(3):
        # Default names: Task-N.
        keep.append(asyncio.create_task(awaiter(t)))
    await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.sleep(100000)
asyncio.run(main())
"#;

/// Each group's await chain (innermost first) and its count; the main
/// task is `main` in `sleep`.
const GROUPS: [(&[&str], usize); 7] = [
    (&["Event.wait", "wait_event"], 5),
    (&["sleep", "sleeper"], 4),
    (&["Queue.get", "queue_getter"], 3),
    (&["awaiter"], 3),
    (
        &["StreamReader._wait_for_data", "StreamReader.read", "reader"],
        2,
    ),
    (&["sleep", "target"], 1),
    (&["sleep", "main"], 1),
];

struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(python: &str, dir: &TempDir) -> Program {
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run `cargo xtask setup`"
    );
    let script = dir.join("tasks.py");
    std::fs::write(&script, PROGRAM).unwrap();
    let mut child = Program(
        Command::new(python)
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e}")),
    );
    let out = BufReader::new(child.0.stdout.take().unwrap());
    for line in out.lines() {
        if line.unwrap() == "ready" {
            return child;
        }
    }
    panic!("{python} ended before it was ready");
}

fn names(frames: &Value) -> Vec<String> {
    frames
        .as_array()
        .unwrap_or_else(|| panic!("frames: {frames}"))
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The asyncio groups of a report: (chain, group).
fn groups(report: &Value) -> Vec<(Vec<String>, &Value)> {
    report["task_groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["origin"] == "asyncio")
        .map(|g| (names(&g["frames"]), g))
        .collect()
}

/// Each group's chain as rip names its functions on CPython `version`.
fn chain(version: &str, chain: &[&str]) -> Vec<String> {
    chain
        .iter()
        .map(|f| rip_tests::python_function(version, f))
        .collect()
}

/// Whether every task is seen at its await, grouped as expected.
fn settled(report: &Value, version: &str) -> bool {
    let g = groups(report);
    g.len() == GROUPS.len()
        && GROUPS.iter().all(|(expected, count)| {
            let expected = chain(version, expected);
            g.iter()
                .any(|(c, g)| *c == expected && g["count"] == *count && g["state"] == "idle")
        })
}

/// The report once every task is parked at its await: polled, since the
/// readers connect over a few turns of the loop after `ready`.
fn settled_report(pid: u32, version: &str, pprof: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = rip_probe_json(
            CLI,
            &[
                "--pid",
                &pid.to_string(),
                "--duration",
                "0",
                "--json",
                "--pprof",
                pprof.to_str().unwrap(),
            ],
        );
        if settled(&report, version) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the tasks never all showed at their awaits: {}",
            report["task_groups"]
        );
    }
}

fn check(python: &str, version: &str) {
    let dir = TempDir::new("/tmp", "rip-python-asyncio");
    let program = start(python, &dir);
    let pid = program.0.id();
    let pprof = dir.join("tasks.pb.gz");
    let report = settled_report(pid, version, &pprof);
    assert_eq!(report["python"]["version"], version, "{report}");
    let tasks: Vec<&Value> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["origin"] == "asyncio")
        .collect();
    // Every task, the main one included, and nothing else.
    assert_eq!(tasks.len(), 19, "{:#?}", report["tasks"]);
    let by_name = |name: &str| -> &Value {
        tasks
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no task {name}: {:#?}", report["tasks"]))
    };
    // Its id is the task object's address; its frames the chain.
    let target = by_name("target");
    let target_id = target["id"].as_u64().unwrap();
    assert_eq!(names(&target["python"]["frames"]), ["sleep", "target"]);
    assert_eq!(target["python"]["state"], "pending");
    assert_eq!(target["python"]["awaits"]["kind"], "future");
    for i in 0..5 {
        let t = by_name(&format!("ev-{i}"));
        assert_eq!(t["state"], "idle");
        assert_eq!(t["location"]["source"], "python");
        assert_eq!(
            t["location"]["frame"]["function"],
            rip_tests::python_function(version, "Event.wait")
        );
        let f = &t["python"]["frames"][1];
        assert!(f["file"].as_str().unwrap().ends_with("tasks.py"), "{f}");
        assert_eq!(f["line"], 4, "{f}");
        assert_eq!(f["python"], true);
    }
    // Each task's own coroutine (outermost) at the line it awaits: its
    // function's last.
    for t in &tasks {
        let frames = t["python"]["frames"].as_array().unwrap();
        let outer = frames.last().unwrap_or_else(|| panic!("no frames: {t}"));
        let function = outer["function"].as_str().unwrap();
        assert_eq!(
            outer["line"],
            rip_tests::python_last_line(PROGRAM, function),
            "{t}"
        );
    }
    // Default names are the interpreter's (3.12 keeps a number until
    // asked).
    let unnamed: Vec<&&Value> = tasks
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("Task-"))
        .collect();
    assert_eq!(unnamed.len(), 4, "the main task and three awaiters");
    let (_, awaiting) = groups(&report)
        .into_iter()
        .find(|(c, _)| c == &["awaiter"])
        .unwrap();
    // The three awaiters await one object: the target task.
    let on = awaiting["waits_on"].as_array().unwrap();
    assert_eq!(on.len(), 1, "{awaiting}");
    assert_eq!(on[0]["kind"], "task");
    assert_eq!(on[0]["addrs"][0].as_u64(), Some(target_id));
    assert_eq!(on[0]["name"], "target");
    assert_eq!(on[0]["count"], 3);
    // Each Event.wait awaits a future of its own.
    let (_, events) = groups(&report)
        .into_iter()
        .find(|(c, _)| c[0] == rip_tests::python_function(version, "Event.wait"))
        .unwrap();
    let on = events["waits_on"].as_array().unwrap();
    assert_eq!(on.len(), 5, "{events}");
    assert!(on.iter().all(|o| o["kind"] == "future" && o["count"] == 1));

    // The same report's pprof profile, read by go tool pprof: one `tasks`
    // sample per task, its stack the await chain; the awaiters of the
    // target task focused on by the future they await.
    let (rows, total) = pprof_top(&pprof, "tasks", "count");
    assert_eq!(total, tasks.len() as u64, "{rows:?}");
    for (function, count) in [
        ("wait_event", 5),
        ("queue_getter", 3),
        ("sleeper", 4),
        ("reader", 2),
        ("awaiter", 3),
        ("target", 1),
        ("main", 1),
    ] {
        assert_eq!(
            rows.get(function).map(|r| r.1),
            Some(count),
            "{function}: {rows:?}"
        );
    }
    let wait = rip_tests::python_function(version, "Event.wait");
    assert_eq!(rows.get(&wait).map(|r| r.0), Some(5), "{rows:?}");
    // A string to match, not a number: pprof reads a bare `0x…` as a
    // numeric range.
    let hex = format!("{target_id:#x}");
    let focus = format!("-tagfocus=awaits=[{}]{}", &hex[..1], &hex[1..]);
    let (focused, _) = pprof_top_of(&pprof, "tasks", "count", &[&focus]);
    assert_eq!(focused.values().map(|r| r.0).sum::<u64>(), 3, "{focused:?}");

    // Text: the section, one sentence per group with its count and chain
    // outermost first, the awaited task.
    let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
    assert!(
        text.contains("ASYNCIO TASKS (19, read from the interpreter without stopping it)"),
        "{text}"
    );
    assert!(text.contains("5 tasks awaiting "), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("5 tasks awaiting"))
        .unwrap();
    assert!(
        line.contains("tasks.py:4 wait_event → ") && line.ends_with(&format!(" {wait}")),
        "{line}"
    );
    assert!(
        text.contains(&format!("on task {target_id:#x} (target) (all of them)")),
        "{text}"
    );
    assert!(text.contains("3 tasks awaiting "), "{text}");

    // Folded: each chain under the task marker, counted.
    let folded = rip_probe_ok(
        CLI,
        &["--pid", &pid.to_string(), "--duration", "0", "--folded"],
    );
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";asyncio task;wait_event (tasks.py:")
                && l.contains(&format!(";{wait} (locks.py:"))
                && l.ends_with(" 5")),
        "{folded}"
    );
}

/// Debian's python3.11: stripped, `_asyncio` an extension module.
#[test]
fn debians_stripped_python_3_11() {
    if !bpf_tests_enabled("debians_stripped_python_3_11") {
        return;
    }
    check("/usr/bin/python3.11", "3.11");
}

/// CPython 3.12 built with `--enable-shared`.
#[test]
fn shared_python_3_12() {
    if !bpf_tests_enabled("shared_python_3_12") {
        return;
    }
    check("/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12");
}

/// Debian's CPython 3.13, read through its `_Py_DebugOffsets` (tasks in
/// `_asyncio`'s 3.13 layout, instances' attributes inline).
#[test]
fn debians_python_3_13() {
    if !bpf_tests_enabled("debians_python_3_13") {
        return;
    }
    check(rip_tests::PYTHON_3_13, "3.13");
}

/// pyenv's CPython 3.8, 3.9 and 3.10 (`--enable-shared`): coroutines
/// with frame objects of their own, awaits known by `YIELD_FROM`.
#[test]
fn shared_python_3_8() {
    if !bpf_tests_enabled("shared_python_3_8") {
        return;
    }
    check(rip_tests::PYTHON_3_8, "3.8");
}

#[test]
fn shared_python_3_9() {
    if !bpf_tests_enabled("shared_python_3_9") {
        return;
    }
    check(rip_tests::PYTHON_3_9, "3.9");
}

#[test]
fn shared_python_3_10() {
    if !bpf_tests_enabled("shared_python_3_10") {
        return;
    }
    check(rip_tests::PYTHON_3_10, "3.10");
}

/// Debian bullseye's CPython 3.9: stripped, `_asyncio` built into the
/// executable.
#[test]
fn debians_stripped_python_3_9() {
    if !bpf_tests_enabled("debians_stripped_python_3_9") {
        return;
    }
    check(rip_tests::DEBIAN_PYTHON_3_9, "3.9");
}
