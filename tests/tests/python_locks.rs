//! CPython's `threading` locks read from outside, for real: a program
//! this test writes parks 5 threads in `Lock.acquire` on one lock and 3 on
//! another, holds an `RLock` (twice, recursively) in a thread asleep in
//! `time.sleep` while 2 threads wait for it, parks one thread in
//! `Condition.wait`, holds another `Condition`'s `RLock` while a thread
//! waits to enter it, and parks one in `Semaphore.acquire`. `rip-probe
//! --pid` must group the waiters by the object they wait on, with exact
//! waiters, name the `RLock`'s and the held `Condition`'s owner by tid
//! (two reads agree), and say that a `Lock` and a semaphore record no
//! owner, in JSON and text, on Debian's 3.11 (waiters of one lock sleep on
//! its `sem_t`), on a shared 3.12, and on Debian's 3.13 (each `Lock`
//! waiter parks on a futex of its own in CPython's parking lot). The same
//! program in a pid namespace of its own is reported under our ids. Two
//! threads each holding the `RLock` the other waits for are a deadlock.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{TempDir, bpf_tests_enabled, rip_probe_json, rip_probe_ok};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

const PROGRAM: &str = r#"
import threading, time
lock_a = threading.Lock(); lock_a.acquire()
lock_b = threading.Lock(); lock_b.acquire()
rlock = threading.RLock()
cond = threading.Condition()
busy = threading.Condition()
sem = threading.Semaphore(0)
held = threading.Event()
busy_held = threading.Event()
tids = {}
def wait_a():
    lock_a.acquire()
def wait_b():
    lock_b.acquire()
def rlock_holder():
    with rlock:
        with rlock:
            held.set()
            time.sleep(100000)
def rlock_waiter():
    held.wait()
    rlock.acquire()
def cond_waiter():
    with cond:
        cond.wait()
def busy_holder():
    with busy:
        busy_held.set()
        time.sleep(100000)
def busy_waiter():
    busy_held.wait()
    with busy:
        pass
def sem_waiter():
    sem.acquire()
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
roles = ([("a-%d" % i, wait_a) for i in range(5)] + [("b-%d" % i, wait_b) for i in range(3)]
         + [("rholder", rlock_holder), ("rw-0", rlock_waiter), ("rw-1", rlock_waiter),
            ("cond-w", cond_waiter), ("bholder", busy_holder), ("busy-w", busy_waiter),
            ("sem-w", sem_waiter)])
for name, f in roles:
    threading.Thread(target=run, args=(name, f), name=name, daemon=True).start()
while len(tids) < len(roles):
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
for name in ["lock_a", "lock_b", "rlock", "cond", "busy", "sem"]:
    print("id", name, id(globals()[name]), flush=True)
print("ready", flush=True)
time.sleep(100000)
"#;

/// The Python program (or `unshare` running it, and then the program's
/// pid), killed on drop.
struct Program(Child, Option<u32>);

impl Program {
    /// The program's pid, as the host numbers it.
    fn pid(&self) -> u32 {
        self.1.unwrap_or_else(|| self.0.id())
    }
}

/// Our tid of the thread process `pid`'s own pid namespace numbers
/// `ns_tid` (the last id of its `NSpid` line).
fn host_tid(pid: u32, ns_tid: u64) -> u32 {
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = e.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
        let ids: Vec<u64> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        if ids.len() == 2 && ids[1] == ns_tid {
            return tid;
        }
    }
    panic!("no thread {ns_tid} in the pid namespace of {pid}");
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the program printed: each role's tid, each object's `id()`.
struct Started {
    program: Program,
    tids: HashMap<String, u64>,
    ids: HashMap<String, u64>,
}

fn start(python: &str, dir: &TempDir) -> Started {
    start_program(python, dir, PROGRAM, false)
}

/// Starts `program` under `python`, in a pid namespace of its own when
/// `contained` (`unshare --pid --fork --mount-proc`: it is pid 1 there,
/// and `Started` gives our ids of its threads, not the ones it printed).
fn start_program(python: &str, dir: &TempDir, program: &str, contained: bool) -> Started {
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run `cargo xtask setup`"
    );
    let script = dir.join("locks.py");
    std::fs::write(&script, program).unwrap();
    let mut cmd = if contained {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--kill-child", "--mount-proc", python]);
        c
    } else {
        Command::new(python)
    };
    let mut child = Program(
        cmd.arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e}")),
        None,
    );
    let (mut tids, mut ids) = (HashMap::new(), HashMap::new());
    let out = BufReader::new(child.0.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if line == "ready" {
            if contained {
                // unshare's child is the program.
                let unshare = child.0.id();
                let children =
                    std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                        .unwrap();
                let pid: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
                for tid in tids.values_mut() {
                    *tid = u64::from(host_tid(pid, *tid));
                }
                child.1 = Some(pid);
            }
            return Started {
                program: child,
                tids,
                ids,
            };
        }
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["id", name, id] => ids.insert(name.to_string(), id.parse().unwrap()),
            [name, tid] => tids.insert(name.to_string(), tid.parse().unwrap()),
            _ => panic!("{line}"),
        };
    }
    panic!("{python} ended before it was ready");
}

/// The object each waiter must be seen waiting on: (object's name, its
/// `threading` class, the waiters' roles).
const GROUPS: [(&str, &str, &[&str]); 6] = [
    ("lock_a", "Lock", &["a-0", "a-1", "a-2", "a-3", "a-4"]),
    ("lock_b", "Lock", &["b-0", "b-1", "b-2"]),
    ("rlock", "RLock", &["rw-0", "rw-1"]),
    ("cond", "Condition", &["cond-w"]),
    ("busy", "Condition", &["busy-w"]),
    ("sem", "Semaphore", &["sem-w"]),
];

/// The report's Python lock of object `id`.
fn lock(report: &Value, id: u64) -> Option<&Value> {
    report["python"]["locks"]
        .as_array()?
        .iter()
        .find(|l| l["object"] == id)
}

fn waiters(l: &Value) -> Vec<u64> {
    l["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

/// The report once every waiter is seen on its object: polled, since a
/// thread printed its tid before it reached its wait.
fn settled(pid: u32, s: &Started) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = rip_probe_json(
            CLI,
            &["--pid", &pid.to_string(), "--duration", "0", "--json"],
        );
        let all = GROUPS.iter().all(|(name, _, roles)| {
            lock(&report, s.ids[*name]).is_some_and(|l| {
                let w = waiters(l);
                roles.iter().all(|r| w.contains(&s.tids[*r]))
            })
        });
        if all {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the waiters were never all seen on their objects: {}",
            report["python"]
        );
    }
}

fn check(python: &str, version: &str) {
    let dir = TempDir::new("/tmp", "rip-python-locks");
    check_started(&start(python, &dir), version);
}

fn check_started(s: &Started, version: &str) {
    let pid = s.program.pid();
    let report = settled(pid, s);
    assert_eq!(report["python"]["version"], version);
    let py = &report["python"];
    // One entry per object waited on, and no other.
    assert_eq!(py["locks"].as_array().unwrap().len(), GROUPS.len(), "{py}");
    for (name, kind, roles) in GROUPS {
        let l = lock(&report, s.ids[name]).unwrap();
        let mut expected: Vec<u64> = roles.iter().map(|r| s.tids[*r]).collect();
        expected.sort_unstable();
        assert_eq!(waiters(l), expected, "{name}: {l}");
        assert_eq!(l["kind"], kind, "{l}");
        assert_eq!(l["name"], name, "{l}");
        for r in roles {
            let t = report["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tid"] == s.tids[*r])
                .unwrap();
            assert_eq!(t["python"]["waits_on"], s.ids[name], "{r}: {t}");
            assert_eq!(t["waits_for"]["lock"], s.ids[name], "{r}: {t}");
            assert_eq!(t["waits_for"]["runtime"], "python_lock", "{r}: {t}");
        }
    }
    let owner = |name: &str| &lock(&report, s.ids[name]).unwrap()["owner"];
    // A Lock records no owner: none is named, and the report says so.
    for name in ["lock_a", "lock_b"] {
        let l = lock(&report, s.ids[name]).unwrap();
        assert_eq!(owner(name)["status"], "not_recorded", "{l}");
        assert!(
            owner(name)["reason"]
                .as_str()
                .unwrap()
                .contains("threading.Lock records no owner"),
            "{l}"
        );
        assert_eq!(l["held"], true, "{l}");
    }
    // The RLock's owner: the sleeper holding it twice.
    let rl = lock(&report, s.ids["rlock"]).unwrap();
    assert_eq!(owner("rlock")["status"], "thread", "{rl}");
    assert_eq!(owner("rlock")["tid"], s.tids["rholder"], "{rl}");
    assert_eq!(rl["count"], 2, "{rl}");
    for r in ["rw-0", "rw-1"] {
        let t = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == s.tids[r])
            .unwrap();
        assert_eq!(t["waits_for"]["owner_tid"], s.tids["rholder"], "{t}");
    }
    // A Condition whose RLock is held: its holder; one whose RLock is
    // free (its waiter released it in wait()): no owner.
    let busy = lock(&report, s.ids["busy"]).unwrap();
    assert_eq!(owner("busy")["tid"], s.tids["bholder"], "{busy}");
    assert_eq!(busy["held"], true, "{busy}");
    let cond = lock(&report, s.ids["cond"]).unwrap();
    assert_eq!(cond["held"], false, "{cond}");
    assert!(cond["owner"]["tid"].is_null(), "{cond}");
    assert_eq!(owner("sem")["status"], "not_recorded");
    // Text: one line per object, with its waiters.
    let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what}: {text}"))
            .to_string()
    };
    assert!(
        line(&format!("threading.Lock lock_a at {:#x}", s.ids["lock_a"]))
            .starts_with("  5 threads wait for threading.Lock lock_a"),
        "{text}"
    );
    assert!(
        line(&format!("threading.Lock lock_b at {:#x}", s.ids["lock_b"]))
            .contains("3 threads wait for threading.Lock lock_b at 0x")
            && line("lock_b at").ends_with("a threading.Lock records no owner"),
        "{text}"
    );
    assert!(
        line("threading.RLock rlock at").contains(&format!(
            "2 threads wait for threading.RLock rlock at {:#x} held by {} (rholder)",
            s.ids["rlock"], s.tids["rholder"]
        )),
        "{text}"
    );
    assert!(
        line("threading.Semaphore sem at").contains("a semaphore records no owner"),
        "{text}"
    );
}

/// Debian's python3.11: each lock a `sem_t`.
#[test]
fn locks_by_object_3_11() {
    if !bpf_tests_enabled("locks_by_object_3_11") {
        return;
    }
    check("/usr/bin/python3.11", "3.11");
}

/// CPython 3.12 built with `--enable-shared`.
#[test]
fn locks_by_object_3_12() {
    if !bpf_tests_enabled("locks_by_object_3_12") {
        return;
    }
    check("/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12");
}

/// Debian's 3.13: a `Lock` is a `PyMutex`, its waiters parked apart.
#[test]
fn locks_by_object_3_13() {
    if !bpf_tests_enabled("locks_by_object_3_13") {
        return;
    }
    check(rip_tests::PYTHON_3_13, "3.13");
}

/// A CPython process in a pid namespace of its own records its threads'
/// ids as that namespace numbers them: the waiters, the RLock's owner and
/// every line are under ours (the program printed its own; they were
/// mapped to ours through `NSpid`), the same report as outside.
#[test]
fn locks_by_object_in_a_pid_namespace_3_11() {
    if !bpf_tests_enabled("locks_by_object_in_a_pid_namespace_3_11") {
        return;
    }
    let dir = TempDir::new("/tmp", "rip-python-locks");
    let s = start_program("/usr/bin/python3.11", &dir, PROGRAM, true);
    let pid = s.program.pid();
    // Its ids are not ours: the test would prove nothing otherwise.
    assert!(s.tids.values().all(|&t| t != 1 && t > 100), "{:?}", s.tids);
    check_started(&s, "3.11");
    let report = rip_probe_json(
        CLI,
        &["--pid", &pid.to_string(), "--duration", "0", "--json"],
    );
    // Every Python thread merged under one of our tids: the main thread
    // (1 there) is the process.
    let main = report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == pid)
        .unwrap();
    assert_eq!(main["name"], "MainThread", "{main}");
}

/// Two threads each holding the `RLock` the other waits for (and a third
/// queued behind one of them): a deadlock through Python locks.
const DEADLOCK: &str = r#"
import threading, time
r1 = threading.RLock()
r2 = threading.RLock()
both = threading.Barrier(2)
tids = {}
def left():
    with r1:
        both.wait()
        r2.acquire()
def right():
    with r2:
        both.wait()
        r1.acquire()
def behind():
    time.sleep(0.2)
    r1.acquire()
def run(name, f):
    tids[name] = threading.get_native_id()
    f()
for name, f in [("left", left), ("right", right), ("behind", behind)]:
    threading.Thread(target=run, args=(name, f), name=name, daemon=True).start()
while len(tids) < 3:
    time.sleep(0.01)
for name, tid in tids.items():
    print(name, tid, flush=True)
for name in ["r1", "r2"]:
    print("id", name, id(globals()[name]), flush=True)
print("ready", flush=True)
time.sleep(100000)
"#;

/// `rip-probe --pid` names the cycle in `deadlocks` and at the top of the
/// text, through the `RLock`s' owners, as it does for glibc mutexes;
/// the thread queued behind is no part of it.
fn deadlock_check(python: &str, version: &str) {
    let dir = TempDir::new("/tmp", "rip-python-deadlock");
    let s = start_program(python, &dir, DEADLOCK, false);
    let pid = s.program.pid();
    let (left, right, behind) = (s.tids["left"], s.tids["right"], s.tids["behind"]);
    let cycle = {
        let mut c = [left, right];
        c.sort_unstable();
        c
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let report = loop {
        let report = rip_probe_json(
            CLI,
            &["--pid", &pid.to_string(), "--duration", "0", "--json"],
        );
        assert_eq!(report["python"]["version"], version);
        // Never another cycle than the one there is.
        let deadlocks = report["deadlocks"].as_array().unwrap();
        assert!(deadlocks.len() <= 1, "{deadlocks:?}");
        if let Some(d) = deadlocks.first() {
            // In wait order from the smallest tid: both orders are the
            // cycle's rotations.
            let got: Vec<u64> = d
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap())
                .collect();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, cycle, "{d}");
            // `behind` sleeps 0.2 s before it queues for r1: the report
            // that holds its wait too.
            let queued = report["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tid"] == behind && !t["waits_for"].is_null());
            if queued {
                break report;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the deadlock was never reported: {}",
            report["python"]
        );
    };
    let thread = |tid: u64| {
        report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == tid)
            .unwrap()
    };
    for (tid, lock, owner) in [
        (left, "r2", right),
        (right, "r1", left),
        (behind, "r1", left),
    ] {
        let w = &thread(tid)["waits_for"];
        assert_eq!(w["lock"], s.ids[lock], "{w}");
        assert_eq!(w["owner_tid"], owner, "{w}");
        assert_eq!(w["runtime"], "python_lock", "{w}");
    }
    let text = rip_probe_ok(CLI, &["--pid", &pid.to_string(), "--duration", "0"]);
    let name = |tid: u64| if tid == left { "left" } else { "right" };
    let (a, b) = (cycle[0], cycle[1]);
    assert!(
        text.contains(&format!(
            "DEADLOCK: 2 threads wait for each other: {a} ({}), {b} ({})",
            name(a),
            name(b)
        )),
        "{text}"
    );
    let (lock_a, lock_b) = if a == left {
        ("r2", "r1")
    } else {
        ("r1", "r2")
    };
    assert!(
        text.contains(&format!(
            "  {a} ({}) waits for threading.RLock {lock_a} at {:#x} held by {b} ({}), which waits \
             for threading.RLock {lock_b} at {:#x} held by {a} ({}): deadlock",
            name(a),
            s.ids[lock_a],
            name(b),
            s.ids[lock_b],
            name(a)
        )),
        "{text}"
    );
}

#[test]
fn rlock_deadlock_3_11() {
    if !bpf_tests_enabled("rlock_deadlock_3_11") {
        return;
    }
    deadlock_check("/usr/bin/python3.11", "3.11");
}

#[test]
fn rlock_deadlock_3_12() {
    if !bpf_tests_enabled("rlock_deadlock_3_12") {
        return;
    }
    deadlock_check("/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12");
}

#[test]
fn rlock_deadlock_3_13() {
    if !bpf_tests_enabled("rlock_deadlock_3_13") {
        return;
    }
    deadlock_check(rip_tests::PYTHON_3_13, "3.13");
}
