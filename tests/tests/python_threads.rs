//! CPython threads read from outside, for real: a program this test writes
//! parks threads in `Lock.acquire`, an `RLock` held across `time.sleep`,
//! `RLock.acquire`, `Condition.wait`, `queue.Queue.get`, `time.sleep` and
//! a socket `recv`, and burns the GIL in one more; `rip-probe --pid`
//! must show each thread's Python function in place of the native
//! `_PyEval_EvalFrameDefault` frames, in text and JSON, on Debian's
//! stripped 3.11 (the executable holds libpython) and on 3.12 built with
//! `--enable-shared` (libpython3.12.so). Each thread is named as
//! `threading` names it. Both interpreters are on every
//! machine of the project's kind (Debian's python3.11, which `cargo xtask
//! setup` installs, and the image's pyenv builds, which it checks), and
//! so is Debian's 3.13, which setup unpacks ([`rip_tests::PYTHON_3_13`]).
//! That program disables the cyclic GC, and no report may say it runs;
//! another keeps one thread in `gc.collect()`, and a report must say the
//! GC runs on that thread, and never on another.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{TempDir, bpf_tests_enabled, rip_probe_json, rip_probe_ok};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Each role's thread runs this function, and what it parks in.
const ROLES: [(&str, &str); 7] = [
    ("lock-w", "lock_waiter"),
    ("rholder", "rlock_holder"),
    ("rlock-w", "rlock_waiter"),
    ("cond-w", "cond_waiter"),
    ("q-get", "queue_getter"),
    ("sleeper", "sleeper"),
    ("recv", "receiver"),
];

const PROGRAM: &str = r#"
import gc, threading, time, queue, socket
gc.disable()
lock = threading.Lock(); lock.acquire()
rlock = threading.RLock()
cond = threading.Condition()
q = queue.Queue()
a, b = socket.socketpair()
held = threading.Event()
tids = {}
def lock_waiter():
    lock.acquire()
def rlock_holder():
    with rlock:
        held.set()
        time.sleep(100000)
def rlock_waiter():
    held.wait()
    rlock.acquire()
def cond_waiter():
    with cond:
        cond.wait()
def queue_getter():
    q.get()
def sleeper():
    time.sleep(100000)
def receiver():
    a.recv(10)
def burner():
    while True:
        pass
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
roles = [("lock-w", lock_waiter), ("rholder", rlock_holder), ("rlock-w", rlock_waiter),
         ("cond-w", cond_waiter), ("q-get", queue_getter), ("sleeper", sleeper),
         ("recv", receiver), ("burner", burner)]
for name, f in roles:
    threading.Thread(target=run, args=(name, f), name=name, daemon=True).start()
while len(tids) < len(roles):
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
print("ready", flush=True)
time.sleep(100000)
"#;

/// The Python program, killed on drop.
struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the program under `python`; its role → tid once it is ready.
fn start(python: &str, dir: &TempDir) -> (Program, HashMap<String, u32>) {
    let script = dir.join("threads.py");
    std::fs::write(&script, PROGRAM).unwrap();
    start_script(python, &script)
}

/// Starts `script` under `python`; the name → tid lines it prints before
/// `ready`.
fn start_script(python: &str, script: &std::path::Path) -> (Program, HashMap<String, u32>) {
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run `cargo xtask setup`"
    );
    let mut child = Program(
        Command::new(python)
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e}")),
    );
    let mut tids = HashMap::new();
    let out = BufReader::new(child.0.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if line == "ready" {
            return (child, tids);
        }
        let (name, tid) = line.split_once(' ').unwrap();
        tids.insert(name.to_string(), tid.parse().unwrap());
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

fn thread(report: &Value, tid: u32) -> &Value {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("tid {tid} not in the report"))
}

/// Whether every parked role's thread is blocked with its Python frames
/// merged into its native stack, its role's function among them.
fn all_parked(report: &Value, tids: &HashMap<String, u32>) -> bool {
    ROLES.iter().all(|(role, function)| {
        let t = thread(report, tids[*role]);
        t["state"] == "sleeping"
            && t["python"]["merged"] == true
            && names(&t["frames"]).iter().any(|n| n == function)
    })
}

/// The report once every parked thread is seen parked: polled, since a
/// thread printed its tid before it reached its wait.
fn parked_report(pid: u32, tids: &HashMap<String, u32>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = rip_probe_json(
            CLI,
            &["--pid", &pid.to_string(), "--duration", "0", "--json"],
        );
        // The GC is disabled: never said to run.
        assert_eq!(report["python"]["gc"], "idle", "{}", report["python"]);
        assert!(report["python"]["gc_thread"].is_null());
        if all_parked(&report, tids) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the threads never all showed parked: {report}"
        );
    }
}

/// `outermost`: the native function every thread starts in, when the
/// interpreter's C library names it (trixie's, which Debian's 3.13 runs
/// on, has no symbol for it: the frame is then only checked to be native).
fn check(python: &str, version: &str, outermost: Option<&str>) {
    let dir = TempDir::new("/tmp", "rip-python-threads");
    let (program, tids) = start(python, &dir);
    let pid = program.0.id();
    let report = parked_report(pid, &tids);
    assert_eq!(report["python"]["version"], version, "{report}");
    // Every thread of the process has a thread state: the main one and
    // the eight started.
    let with_python = report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["python"].is_object())
        .count();
    assert_eq!(with_python, 9, "{report}");
    for (role, function) in ROLES {
        let t = thread(&report, tids[role]);
        // Named as `threading` names it (the kernel's comm is the
        // interpreter's for every thread).
        assert_eq!(t["name"], role, "{t}");
        assert_eq!(t["name_source"], "python", "{t}");
        assert_eq!(t["python"]["name"], role, "{t}");
        let n = names(&t["frames"]);
        let at = n.iter().position(|f| f == function).unwrap();
        // Merged: the role's function is called from `run` (the next
        // Python frame out: before 3.11 each Python frame has native
        // frames of its own call between it and the next), and from
        // `threading`'s bootstrap, in place of the eval loop's frames,
        // which are all gone.
        let next_python = t["frames"].as_array().unwrap()[at + 1..]
            .iter()
            .find(|f| f["python"] == true)
            .and_then(|f| f["function"].as_str());
        assert_eq!(next_python, Some("run"), "{role}: {n:?}");
        assert!(
            n.contains(&rip_tests::python_function(version, "Thread._bootstrap")),
            "{role}: {n:?}"
        );
        assert!(
            !n.contains(&"_PyEval_EvalFrameDefault".to_string()),
            "{role}: {n:?}"
        );
        // Native frames stay around them: the thread starts in libc.
        let last = t["frames"].as_array().unwrap().last().unwrap();
        assert_ne!(last["python"], true, "{role}: {n:?}");
        if let Some(outermost) = outermost {
            assert_eq!(n.last().unwrap(), outermost, "{role}: {n:?}");
        }
        let frame = t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == function)
            .unwrap();
        assert_eq!(frame["python"], true);
        assert!(frame["file"].as_str().unwrap().ends_with("threads.py"));
        // The line it waits at: its function's last.
        assert_eq!(
            frame["line"],
            rip_tests::python_last_line(PROGRAM, function),
            "{frame}"
        );
    }
    // The main thread too.
    assert_eq!(thread(&report, pid)["name"], "MainThread");
    // Library functions by their qualified names, where each waits.
    let frames = |role: &str| names(&thread(&report, tids[role])["frames"]);
    let qualified = |q: &str| rip_tests::python_function(version, q);
    assert!(frames("cond-w").contains(&qualified("Condition.wait")));
    let q = frames("q-get");
    assert!(
        q.contains(&qualified("Queue.get")) && q.contains(&qualified("Condition.wait")),
        "{q:?}"
    );
    // The burner ran: its Python frames are there, apart from its sampled
    // native stack, and say why.
    // A thread running Python can move between the two reads that must
    // agree: then it has no frames, and its note says why.
    let burner = &thread(&report, tids["burner"])["python"];
    let burner_frames = names(&burner["frames"]);
    if burner_frames.is_empty() {
        assert!(
            burner["note"].as_str().is_some_and(|n| !n.is_empty()),
            "no frames and no reason: {burner}"
        );
    } else {
        assert_eq!(burner_frames[..2], ["burner", "run"], "{burner}");
    }
    // The GIL is claimed held only by a thread of the process.
    let gil = &report["python"];
    if gil["gil"] == "held" {
        let holder = gil["gil_holder"].as_u64().unwrap();
        assert!(
            report["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tid"] == holder),
            "{gil}"
        );
    } else {
        assert!(gil["gil_holder"].is_null(), "{gil}");
    }
    // Text shows the Python frames in the stacks, marked as such.
    let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
    for (_, function) in ROLES {
        assert!(
            text.contains(&format!(" python         {function} at ")),
            "{function}: {text}"
        );
    }
    assert!(text.contains(&format!("python {version}: ")), "{text}");
    assert!(!text.contains("cyclic GC"), "{text}");
}

/// The cyclic GC made to run long: a thread named `collector` keeps
/// calling `gc.collect()` over a million live lists in 500,000 cycles
/// (each full collection walks them all), while another sleeps.
const GC_PROGRAM: &str = r#"
import gc, threading, time
keep = []
for i in range(500000):
    a = []; b = [a]; a.append(b); keep.append(a)
tids = {}
def collector():
    while True:
        gc.collect()
def sleeper():
    time.sleep(100000)
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
for name, f in [("collector", collector), ("sleeper", sleeper)]:
    threading.Thread(target=run, args=(name, f), name=name, daemon=True).start()
while len(tids) < 2:
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
print("ready", flush=True)
time.sleep(100000)
"#;

/// The GC caught running, on the thread that runs it: polled (a report
/// may fall between two collections, or see the GIL change hands) until
/// one says so, and no report ever names another thread.
fn gc_check(python: &str, version: &str) {
    let dir = TempDir::new("/tmp", "rip-python-gc");
    let script = dir.join("gc.py");
    std::fs::write(&script, GC_PROGRAM).unwrap();
    let (program, tids) = start_script(python, &script);
    let pid = program.0.id();
    let collector = u64::from(tids["collector"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = rip_probe_json(
            CLI,
            &["--pid", &pid.to_string(), "--duration", "0", "--json"],
        );
        let py = &report["python"];
        assert_eq!(py["version"], version, "{py}");
        // Never idle while it collects all the time, never on another
        // thread than the collector.
        assert_ne!(py["gc"], "idle", "{py}");
        assert!(
            py["gc_thread"].is_null() || py["gc_thread"] == collector,
            "{py}"
        );
        for t in report["threads"].as_array().unwrap() {
            if t["python"]["runs_gc"] == true {
                assert_eq!(t["tid"], collector, "{t}");
            }
        }
        if py["gc"] == "running" && py["gc_thread"] == collector {
            let t = thread(&report, tids["collector"]);
            assert_eq!(t["python"]["runs_gc"], true, "{t}");
            assert_eq!(t["python"]["holds_gil"], true, "{t}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the GC was never seen running on the collector {collector}: {py}"
        );
    }
    // The text says so where it says who holds the GIL, once seen.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
        let line = text.lines().find(|l| l.starts_with("python ")).unwrap();
        if line.contains(&format!(
            "the GIL is held by tid {collector}, which runs the cyclic GC"
        )) {
            assert!(
                text.contains("[holds the GIL, runs the cyclic GC]"),
                "{text}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the text never said the collector runs the GC: {line}"
        );
    }
}

/// The GIL held across a blocking call: the main thread calls `pause()`
/// through `ctypes.PyDLL`, which keeps the GIL, while three threads that
/// run Python wait to take it and one waits on a `threading.Lock` (it
/// released the GIL, and wants the lock, not the GIL).
const GIL_PROGRAM: &str = r#"
import ctypes, threading, time
lock = threading.Lock(); lock.acquire()
tids = {}
def spinner():
    while True:
        time.sleep(0.001)
def lock_waiter():
    lock.acquire()
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
names = ["spin-0", "spin-1", "spin-2"]
for name in names:
    threading.Thread(target=run, args=(name, spinner), name=name, daemon=True).start()
threading.Thread(target=run, args=("lock-w", lock_waiter), name="lock-w", daemon=True).start()
while len(tids) < 4:
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
print("ready", flush=True)
ctypes.PyDLL(None).pause()
"#;

/// Who holds the GIL and who waits for it, read as the evidence says: the
/// main thread holds it, each spinner is seen waiting for it (polled
/// until all three are, since a waiter wakes every few milliseconds to
/// ask for the GIL again), and neither the holder nor the lock's waiter
/// is ever said to wait for it.
fn gil_check(python: &str) {
    let dir = TempDir::new("/tmp", "rip-python-gil");
    let script = dir.join("gil.py");
    std::fs::write(&script, GIL_PROGRAM).unwrap();
    let (program, tids) = start_script(python, &script);
    let pid = program.0.id();
    let spinners: Vec<u64> = ["spin-0", "spin-1", "spin-2"]
        .iter()
        .map(|n| u64::from(tids[*n]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = rip_probe_json(
            CLI,
            &["--pid", &pid.to_string(), "--duration", "0", "--json"],
        );
        let py = &report["python"];
        let waiters: Vec<u64> = py["gil_waiters"]
            .as_array()
            .unwrap_or_else(|| panic!("no gil_waiters: {py}"))
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        // Never the holder, the lock's waiter, or a thread not a spinner.
        assert!(
            waiters.iter().all(|w| spinners.contains(w)),
            "{waiters:?} are not all spinners {spinners:?}: {report}"
        );
        // The main thread holds it, blocked in pause(): two reads agree.
        assert_eq!(py["gil"], "held", "{py}");
        assert_eq!(py["gil_holder"], u64::from(pid), "{py}");
        let main = thread(&report, pid);
        assert_eq!(main["python"]["holds_gil"], true, "{main}");
        assert!(main["python"]["gil_wait"].is_null(), "{main}");
        let lock_w = thread(&report, tids["lock-w"]);
        assert!(lock_w["python"]["gil_wait"].is_null(), "{lock_w}");
        if waiters == spinners {
            for &tid in &spinners {
                let why = thread(&report, tid as u32)["python"]["gil_wait"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                assert!(
                    why.contains("the GIL's condition variable or mutex")
                        || why.contains("take_gil"),
                    "{why}"
                );
            }
            let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
            let line = text.lines().find(|l| l.starts_with("python ")).unwrap();
            assert!(
                line.contains(&format!("the GIL is held by tid {pid}")),
                "{line}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the spinners {spinners:?} were never all seen waiting for the GIL: {report}"
        );
    }
}

/// Debian's python3.11: stripped, libpython linked into the executable.
#[test]
fn debians_stripped_python_3_11() {
    if !bpf_tests_enabled("debians_stripped_python_3_11") {
        return;
    }
    check("/usr/bin/python3.11", "3.11", Some("clone3"));
}

/// CPython 3.12 built with `--enable-shared`: `_PyRuntime` in
/// libpython3.12.so.
#[test]
fn shared_python_3_12() {
    if !bpf_tests_enabled("shared_python_3_12") {
        return;
    }
    check(
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
        "3.12",
        Some("clone3"),
    );
}

/// Debian's CPython 3.13 (trixie's, stripped, libpython in the
/// executable; `cargo xtask setup` unpacks it with its own C library):
/// read through the `_Py_DebugOffsets` it publishes.
#[test]
fn debians_python_3_13() {
    if !bpf_tests_enabled("debians_python_3_13") {
        return;
    }
    check(rip_tests::PYTHON_3_13, "3.13", None);
}

/// The GIL's holder and waiters on each CPython version.
#[test]
fn gil_holder_and_waiters_3_11() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_11") {
        return;
    }
    gil_check("/usr/bin/python3.11");
}

#[test]
fn gil_holder_and_waiters_3_12() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_12") {
        return;
    }
    gil_check("/root/.pyenv/versions/3.12.1/bin/python3.12");
}

#[test]
fn gil_holder_and_waiters_3_13() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_13") {
        return;
    }
    gil_check(rip_tests::PYTHON_3_13);
}

/// pyenv's CPython 3.8, 3.9 and 3.10 (`--enable-shared`): frames as heap
/// objects, lines from `co_lnotab` (3.8, 3.9) and 3.10's `co_linetable`,
/// functions by `co_name`, each thread's tid from glibc's thread
/// descriptor.
#[test]
fn shared_python_3_8() {
    if !bpf_tests_enabled("shared_python_3_8") {
        return;
    }
    check(rip_tests::PYTHON_3_8, "3.8", Some("clone3"));
}

#[test]
fn shared_python_3_9() {
    if !bpf_tests_enabled("shared_python_3_9") {
        return;
    }
    check(rip_tests::PYTHON_3_9, "3.9", Some("clone3"));
}

#[test]
fn shared_python_3_10() {
    if !bpf_tests_enabled("shared_python_3_10") {
        return;
    }
    check(rip_tests::PYTHON_3_10, "3.10", Some("clone3"));
}

/// The GIL of 3.8 (`_PyRuntime.ceval.gil`, further out than 3.9's and
/// 3.10's, at the same place in `_PyRuntime`).
#[test]
fn gil_holder_and_waiters_3_8() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_8") {
        return;
    }
    gil_check(rip_tests::PYTHON_3_8);
}

#[test]
fn gil_holder_and_waiters_3_9() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_9") {
        return;
    }
    gil_check(rip_tests::PYTHON_3_9);
}

#[test]
fn gil_holder_and_waiters_3_10() {
    if !bpf_tests_enabled("gil_holder_and_waiters_3_10") {
        return;
    }
    gil_check(rip_tests::PYTHON_3_10);
}

/// Debian bullseye's CPython 3.9: stripped, libpython in the executable,
/// on its own glibc 2.31 (`cargo xtask setup` unpacks it).
#[test]
fn debians_stripped_python_3_9() {
    if !bpf_tests_enabled("debians_stripped_python_3_9") {
        return;
    }
    check(rip_tests::DEBIAN_PYTHON_3_9, "3.9", Some("__clone"));
}

#[test]
fn gil_holder_and_waiters_debians_3_9() {
    if !bpf_tests_enabled("gil_holder_and_waiters_debians_3_9") {
        return;
    }
    gil_check(rip_tests::DEBIAN_PYTHON_3_9);
}

/// The cyclic GC running, on each CPython version: its `collecting` flag
/// in `_PyRuntime` (3.8), in the interpreter (3.9–3.12, from rip's
/// tables), where 3.13 publishes it.
#[test]
fn gc_running_3_8() {
    if !bpf_tests_enabled("gc_running_3_8") {
        return;
    }
    gc_check(rip_tests::PYTHON_3_8, "3.8");
}

#[test]
fn gc_running_3_9() {
    if !bpf_tests_enabled("gc_running_3_9") {
        return;
    }
    gc_check(rip_tests::PYTHON_3_9, "3.9");
}

#[test]
fn gc_running_debians_3_9() {
    if !bpf_tests_enabled("gc_running_debians_3_9") {
        return;
    }
    gc_check(rip_tests::DEBIAN_PYTHON_3_9, "3.9");
}

#[test]
fn gc_running_3_10() {
    if !bpf_tests_enabled("gc_running_3_10") {
        return;
    }
    gc_check(rip_tests::PYTHON_3_10, "3.10");
}

#[test]
fn gc_running_3_11() {
    if !bpf_tests_enabled("gc_running_3_11") {
        return;
    }
    gc_check("/usr/bin/python3.11", "3.11");
}

#[test]
fn gc_running_3_12() {
    if !bpf_tests_enabled("gc_running_3_12") {
        return;
    }
    gc_check("/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12");
}

/// pyenv's 3.13.0 and Debian's 3.13 (trixie's): where `_Py_DebugOffsets`
/// says.
#[test]
fn gc_running_3_13() {
    if !bpf_tests_enabled("gc_running_3_13") {
        return;
    }
    gc_check("/root/.pyenv/versions/3.13.0/bin/python3.13", "3.13");
    gc_check(rip_tests::PYTHON_3_13, "3.13");
}
