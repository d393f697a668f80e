//! What `rip-probe --pid` and `rip-probe locks` claim about locks stays
//! true where a reading can be wrong: a hot mutex changing hands between
//! reads (on a loaded machine) is no deadlock and no thread waits for
//! itself, while a real ABBA deadlock is still found every time; a Go
//! program's futexes are its runtime's waits, never glibc locks; a Rust
//! thread in `thread::park` is parked; condition-variable waiters are one
//! line, not one per thread; and `locks` keeps idle timed waits apart from
//! contention.

use std::{
    path::PathBuf,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use rip_tests::{
    Workload, bpf_tests_enabled, build_c, json_thread, rip_probe_json, rip_probe_ok, target_dir,
};

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Threads spinning on every CPU until dropped: the loaded machine on
/// which the owner of a hot lock moves between two reads.
struct Burner(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Burner {
    fn start() -> Burner {
        let stop = Arc::new(AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        Burner(stop, threads)
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// Waits until at least `n` threads of `pid` sleep in futex(2), as the
/// workload's idle threads do once they have blocked.
fn until_in_futex(pid: u32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("syscall"))
                    .is_ok_and(|s| s.starts_with("202 "))
            })
            .count();
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {waiting} of {n} threads of {pid} ever slept in futex"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn canonical(c: Vec<u32>) -> Vec<u32> {
    let i = c.iter().enumerate().min_by_key(|&(_, t)| *t).unwrap().0;
    [&c[i..], &c[..i]].concat()
}

#[test]
fn a_hot_mutex_is_no_deadlock_and_a_real_one_is_still_found() {
    if !bpf_tests_enabled("a_hot_mutex_is_no_deadlock_and_a_real_one_is_still_found") {
        return;
    }
    // Four threads passing one mutex, each holding it 2 ms.
    let mut cmd = Command::new(build_c("lock_contention", &[]));
    cmd.args(["4", "2"]);
    let hot = Workload::start(cmd);
    let chains = Workload::start(Command::new(build_c("lock_chains", &[])));
    let abba = canonical(vec![chains.tid("role abba-a "), chains.tid("role abba-b ")]);
    let (hot_pid, chains_pid) = (hot.pid().to_string(), chains.pid().to_string());
    let _load = Burner::start();
    for i in 0..20 {
        let v = rip_probe_json(EXE, &["--pid", &hot_pid, "--duration", "0", "--json"]);
        assert_eq!(
            v["deadlocks"],
            serde_json::json!([]),
            "snapshot {i}: a hot mutex is no deadlock: {}",
            v["threads"]
        );
        for t in v["threads"].as_array().unwrap() {
            let wf = &t["waits_for"];
            assert!(
                wf.is_null() || wf["owner_tid"] != t["tid"],
                "snapshot {i}: thread {} waits for a lock it holds: {wf}",
                t["tid"]
            );
        }
        let text = rip_probe_ok(EXE, &["--pid", &hot_pid, "--duration", "0"]);
        assert!(
            !text.contains("DEADLOCK") && !text.contains("deadlock"),
            "snapshot {i}:\n{text}"
        );
        // The real ABBA deadlock, on the same loaded machine: found each time.
        let c = rip_probe_json(EXE, &["--pid", &chains_pid, "--duration", "0", "--json"]);
        let cycles: Vec<Vec<u32>> = serde_json::from_value(c["deadlocks"].clone()).unwrap();
        assert!(cycles.contains(&abba), "snapshot {i}: {cycles:?}");
    }
}

/// Debian's golang-go, installed when missing (as `cargo xtask setup`
/// does); `None` only when it cannot be.
fn go() -> Option<PathBuf> {
    let found = || {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join("go"))
            .find(|p| p.is_file())
    };
    if let Some(go) = found() {
        return Some(go);
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "golang-go"])
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        return None;
    }
    found()
}

#[test]
fn a_go_programs_futexes_are_go_runtime_waits() {
    if !bpf_tests_enabled("a_go_programs_futexes_are_go_runtime_waits") {
        return;
    }
    let Some(go) = go() else {
        eprintln!(
            "SKIPPED a_go_programs_futexes_are_go_runtime_waits: `go` is not installed and \
             `apt-get install -y golang-go` failed"
        );
        return;
    };
    let dir = target_dir().join(format!("go-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("futexes");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("go/futexes.go");
    let status = Command::new(go)
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .env("GOCACHE", target_dir().join("go-cache"))
        .env("GOPATH", target_dir().join("go-path"))
        .env("GO111MODULE", "off")
        .status()
        .expect("go runs");
    assert!(status.success(), "go build {} failed", src.display());
    let w = Workload::start(Command::new(&exe));
    // The main thread reads stdin; sysmon and the idle Ms sleep in futex.
    until_in_futex(w.pid(), 3);
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
    let mut idle_m = 0;
    for t in v["threads"].as_array().unwrap() {
        let wf = &t["waits_for"];
        if wf.is_null() {
            continue;
        }
        eprintln!("{}: {wf}", t["tid"]);
        assert!(
            wf["kind"] == "parked" || wf["kind"] == "runtime",
            "a Go futex read as a glibc lock: {wf}"
        );
        assert!(
            wf["runtime"].as_str().is_some_and(|r| r.starts_with("go_")),
            "{wf}"
        );
        assert!(wf["owner_tid"].is_null() && wf["mutex"].is_null(), "{wf}");
        assert_eq!(wf["owner"]["status"], "not_recorded", "{wf}");
        idle_m += usize::from(wf["runtime"] == "go_idle_m");
    }
    assert!(idle_m >= 1, "no idle M found: {}", v["threads"]);
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
    assert!(text.contains("Go runtime: idle M"), "{text}");
    // The goroutines blocked in sync.Mutex.Lock are reported as such (the
    // runtime's own words); no thread's futex may be read as a glibc lock.
    for word in [
        "waits for mutex",
        "waits for rwlock",
        "reader(s)",
        "held by",
    ] {
        assert!(!text.contains(word), "`{word}` in a Go report:\n{text}");
    }
}

#[test]
fn a_rust_thread_in_park_is_parked() {
    if !bpf_tests_enabled("a_rust_thread_in_park_is_parked") {
        return;
    }
    let w = Workload::start(Command::new(env!("CARGO_BIN_EXE_rip-std-locks")));
    let parker = w.tid("parker");
    until_in_futex(w.pid(), 3);
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
    let wf = &json_thread(&v, parker)["waits_for"];
    assert_eq!(wf["kind"], "parked", "{wf}");
    assert_eq!(wf["runtime"], "rust_park", "{wf}");
    assert!(wf["owner_tid"].is_null(), "{wf}");
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
    let line = format!("{parker} (parker): Rust thread::park");
    assert!(text.contains(&line), "no `{line}` in:\n{text}");
    assert!(!text.contains("fits no glibc"), "{text}");
}

/// The lines of the text report's LOCKS and IDLE WAITS sections.
fn lock_lines(text: &str) -> Vec<&str> {
    let mut on = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("LOCKS") || l.starts_with("IDLE WAITS") {
                on = true;
            } else if !l.starts_with(' ') {
                on = false;
            }
            on && l.starts_with("  ") && !l.trim_start().starts_with("tids:")
        })
        .collect()
}

#[test]
fn condition_variable_waiters_are_one_line() {
    if !bpf_tests_enabled("condition_variable_waiters_are_one_line") {
        return;
    }
    // 200 threads on one condition variable.
    let mut cmd = Command::new(build_c("lock_condvars", &[]));
    cmd.args(["200", "0", "20", "0", "0"]);
    let w = Workload::start(cmd);
    let text = rip_probe_ok(EXE, &["--pid", &w.pid().to_string(), "--duration", "0"]);
    let lines = lock_lines(&text);
    assert_eq!(
        lines,
        ["  200 threads wait on condition variable g_idle"],
        "{text}"
    );
    drop(w);
    // 200 threads, each on a condition variable of its own (a JVM's).
    let mut cmd = Command::new(build_c("lock_condvars", &[]));
    cmd.args(["200", "0", "20", "0", "1"]);
    let w = Workload::start(cmd);
    until_in_futex(w.pid(), 200);
    let text = rip_probe_ok(EXE, &["--pid", &w.pid().to_string(), "--duration", "0"]);
    let lines = lock_lines(&text);
    assert_eq!(
        lines,
        ["  200 threads wait, each on a condition variable of its own"],
        "{text}"
    );
}

#[test]
fn locks_keeps_idle_timed_waits_apart_from_contention() {
    if !bpf_tests_enabled("locks_keeps_idle_timed_waits_apart_from_contention") {
        return;
    }
    // Four threads in 20 ms timed waits nobody signals, four passing a
    // mutex: the timed waits add up to more waiting, and are no contention.
    let mut cmd = Command::new(build_c("lock_condvars", &[]));
    cmd.args(["0", "4", "20", "4", "0"]);
    let w = Workload::start(cmd);
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["locks", "--pid", &pid, "--duration", "1s", "--json"]);
    let locks = v["locks"].as_array().unwrap();
    let at = |name: &str| {
        locks
            .iter()
            .position(|l| l["symbol"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"))
    };
    let (hot, timed) = (at("g_hot"), at("g_timed"));
    assert_eq!(locks[hot]["idle"], false, "{}", locks[hot]);
    assert_eq!(locks[timed]["idle"], true, "{}", locks[timed]);
    assert!(hot < timed, "contention first: {v}");
    let text = rip_probe_ok(EXE, &["locks", "--pid", &pid, "--duration", "1s"]);
    let pos = |s: &str| {
        text.find(s)
            .unwrap_or_else(|| panic!("no `{s}` in:\n{text}"))
    };
    assert!(pos("mutex g_hot") < pos("IDLE WAITS"), "{text}");
    // The condition variable itself: its mutex, g_timed_lock, may be
    // contended for a moment when two timed waits end together, and is
    // then rightly listed among the contention.
    assert!(
        pos("IDLE WAITS") < pos("condition variable g_timed at"),
        "{text}"
    );
}

#[test]
fn a_normal_mutex_relocked_by_its_owner_is_a_self_deadlock() {
    if !bpf_tests_enabled("a_normal_mutex_relocked_by_its_owner_is_a_self_deadlock") {
        return;
    }
    let w = Workload::start(Command::new(build_c("lock_relock", &[])));
    // The error-checking mutex refused the relock, as the kernel never saw.
    assert!(
        w.lines.iter().any(|l| l == "errorcheck EDEADLK"),
        "{:?}",
        w.lines
    );
    let normal = w.tid("role relock-normal ");
    let errorcheck = w.tid("role relock-errorcheck ");
    until_in_futex(w.pid(), 1);
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
    assert_eq!(v["deadlocks"], serde_json::json!([[normal]]), "{v}");
    let wf = &json_thread(&v, normal)["waits_for"];
    assert_eq!(wf["symbol"], "g_normal", "{wf}");
    assert_eq!(wf["owner_tid"], normal, "{wf}");
    assert!(json_thread(&v, errorcheck)["waits_for"].is_null());
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
    assert!(
        text.contains(&format!(
            "DEADLOCK: 1 thread waits for itself: {normal} (relock-normal)"
        )) && text.contains("that it holds itself: a relock of a normal mutex waits forever"),
        "{text}"
    );
}
