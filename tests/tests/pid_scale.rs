//! 10,000 blocked threads: every one is in `rip-probe --pid --json`, with
//! its state, syscall, last snap and user stack (what the report costs,
//! with and without stacks, is measured by `cargo xtask bench`, next to gdb
//! and eu-stack).

use std::{
    collections::{BTreeMap, HashSet},
    process::Command,
    time::Instant,
};

use rip_tests::{TempDir, Workload, bpf_tests_enabled, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const SERVER: &str = env!("CARGO_BIN_EXE_rip-demo-server");
const WORKERS: usize = 10_000;

#[test]
fn ten_thousand_blocked_threads() {
    if !bpf_tests_enabled("ten_thousand_blocked_threads") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "pid-scale");
    let ring = dir.join("scale.ring");
    let mut cmd = Command::new(SERVER);
    cmd.args([
        "--workers",
        &WORKERS.to_string(),
        "--spinners",
        "0",
        "--ring",
    ])
    .arg(&ring);
    let w = Workload::start(cmd);
    let pid = w.pid().to_string();

    let window = 1.0;
    let mut beyond = f64::MAX;
    let mut v = serde_json::Value::Null;
    for _ in 0..2 {
        let t = Instant::now();
        let (code, out, err) = rip_probe(
            CLI,
            &["--pid", &pid, "--duration", "1s", "--json", "--no-stacks"],
        );
        let took = t.elapsed().as_secs_f64();
        assert_eq!(code, 0, "{err}");
        beyond = beyond.min(took - window);
        v = serde_json::from_str(&out).unwrap();
    }
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), WORKERS + 6, "every thread listed");
    let pool: Vec<_> = threads
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("pool-"))
        .collect();
    assert_eq!(pool.len(), WORKERS);
    for t in &pool {
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], "futex", "{t}");
        assert!(
            t["location"]["frame"]["function"]
                .as_str()
                .is_some_and(|f| f.ends_with("Pool::take")),
            "{t}"
        );
    }
    assert_eq!(v["groups"][0]["count"], WORKERS);

    // With stacks (the default): every pool thread's, one group still.
    let (code, out, err) = rip_probe(CLI, &["--pid", &pid, "--duration", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let stacks = rip_tests::inline_stacks(serde_json::from_str(&out).unwrap());
    let pool: Vec<&serde_json::Value> = stacks["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("pool-"))
        .collect();
    // pthread_mutex_lock in libc, called from the pool's closure in the
    // server.
    let full = |f: &[serde_json::Value]| {
        let has = |key: &str, end: &str| {
            f.iter()
                .any(|f| f[key].as_str().is_some_and(|n| n.ends_with(end)))
        };
        has("function", "pthread_mutex_lock") && has("module", "/rip-demo-server")
    };
    let with_stack = pool
        .iter()
        .filter(|t| t["frames"].as_array().is_some_and(|f| full(f)))
        .count();
    assert_eq!(with_stack, WORKERS, "{}", pool[0]["frames"]);
    assert_eq!(
        stacks["groups"][0]["count"], WORKERS,
        "one stack: one group"
    );
    // And the report with the stack table, thread by thread, against what
    // /proc says of each before and after it and the role each plays.
    let before = proc_threads(w.pid());
    let (code, out, err) = rip_probe(CLI, &["--pid", &pid, "--duration", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let after = proc_threads(w.pid());
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_as_proc_and_roles_say(&report, &w.lines, &before, &after);
    let profile = if cfg!(debug_assertions) {
        "test"
    } else {
        "release"
    };
    eprintln!(
        "{} threads: report in {beyond:.3}s beyond the 1s window ({profile} build of rip-probe)",
        threads.len()
    );
    // The time is printed, not asserted: on a machine shared with other
    // work it says nothing about rip-probe. `cargo xtask bench` measures
    // it, side by side with gdb, on the release build.
}

/// What /proc says of one thread: its state letter and the number of the
/// system call it is in (`/proc/PID/task/TID/stat` and `syscall`).
#[derive(Debug, PartialEq)]
struct ProcThread {
    state: char,
    syscall: Option<i64>,
}

/// Every thread of process `pid`, by tid (threads gone while read are
/// left out).
fn proc_threads(pid: u32) -> BTreeMap<u64, ProcThread> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let name = e.unwrap().file_name();
        let Some(tid) = name.to_str().and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        let dir = format!("/proc/{pid}/task/{tid}");
        let (Ok(stat), Ok(syscall)) = (
            std::fs::read_to_string(format!("{dir}/stat")),
            std::fs::read_to_string(format!("{dir}/syscall")),
        ) else {
            continue;
        };
        // The state follows the command name, which is in parentheses and
        // may hold anything.
        let state = stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .chars()
            .next()
            .unwrap();
        // `running` for a thread on a CPU, else the number and arguments.
        let syscall = syscall
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok());
        out.insert(tid, ProcThread { state, syscall });
    }
    out
}

/// The report's word for a /proc state letter.
fn state_word(c: char) -> &'static str {
    match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "uninterruptible",
        'I' => "idle",
        'T' => "stopped",
        't' => "traced",
        other => panic!("state {other} in a live process's /proc"),
    }
}

/// The functions of a stack, the inlined ones included.
fn functions(stack: &serde_json::Value) -> Vec<String> {
    let mut names = Vec::new();
    for f in stack.as_array().unwrap() {
        names.extend(f["function"].as_str().map(str::to_string));
        for i in f["inlined"].as_array().into_iter().flatten() {
            names.extend(i["function"].as_str().map(str::to_string));
        }
    }
    names
}

/// Checks every thread of a `--json` report of the demo server (its
/// `role NAME TID` lines in `roles`) against /proc, read `before` and
/// `after` the report: the same threads; where both reads agree (the
/// demo's threads never move), the same state and system call; each
/// role's system call, user stack (its function, through the stack
/// table) and kernel stack (the kernel's side of that call); and the
/// table itself: each distinct stack once, every index in it.
fn assert_as_proc_and_roles_say(
    report: &serde_json::Value,
    roles: &[String],
    before: &BTreeMap<u64, ProcThread>,
    after: &BTreeMap<u64, ProcThread>,
) {
    let stacks = report["stacks"].as_array().expect("a stack table");
    let distinct: HashSet<String> = stacks.iter().map(|s| s.to_string()).collect();
    assert_eq!(distinct.len(), stacks.len(), "each distinct stack once");
    let stack = |t: &serde_json::Value, field: &str| -> &serde_json::Value {
        let id = t[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: an index: {t}"));
        stacks
            .get(id as usize)
            .unwrap_or_else(|| panic!("{field} {id} not in the table of {}", stacks.len()))
    };
    let threads = report["threads"].as_array().unwrap();
    let tids: Vec<u64> = threads.iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    // The process has no thread that starts or ends: the same set.
    assert!(
        before.keys().eq(after.keys()),
        "the workload's threads changed"
    );
    assert!(tids.iter().eq(before.keys()), "every thread once, by tid");

    let role_of: BTreeMap<u64, &str> = roles
        .iter()
        .filter_map(|l| {
            let mut w = l.strip_prefix("role ")?.split(' ');
            let (name, tid) = (w.next()?, w.next()?.parse().ok()?);
            Some((tid, name))
        })
        .collect();
    assert_eq!(role_of.len(), threads.len(), "a role for every thread");
    let mut compared = 0;
    let mut pool_stacks = HashSet::new();
    for t in threads {
        let tid = t["tid"].as_u64().unwrap();
        let role = role_of[&tid];
        let kind = role.trim_end_matches(|c: char| c.is_ascii_digit());
        // (system call, a part of the name of the function on the user
        // stack that made it — libc's or std's: the demo's own functions
        // may be inlined, or left by a tail call — and a part of a kernel
        // function's name on the kernel stack).
        let (syscall, user, kernel) = match kind {
            "pool-" | "locker-a" | "locker-b" => ("futex", "pthread_mutex_lock", "futex"),
            "pipe-reader" => ("read", "libc_read", "pipe_read"),
            "sleeper" => ("clock_nanosleep", "nanosleep", "nanosleep"),
            "acceptor" => ("accept4", "accept", "accept"),
            "main" => ("futex", "park", "futex"),
            other => panic!("no role {other}"),
        };
        let (b, a) = (&before[&tid], &after[&tid]);
        if b == a {
            compared += 1;
            assert_eq!(t["state"], state_word(b.state), "{role}: {b:?}: {t}");
            assert_eq!(t["syscall"]["nr"].as_i64(), b.syscall, "{role}: {b:?}: {t}");
        }
        assert_eq!(t["state"], "sleeping", "{role}: {t}");
        assert_eq!(t["syscall"]["name"], syscall, "{role}: {t}");
        let frames = stack(t, "frames");
        let u = functions(frames);
        assert!(
            u.iter().any(|f| f.contains(user)),
            "{role}: no *{user}* in its user stack {u:?}"
        );
        // Unwound through the libraries into the program.
        assert!(
            frames.as_array().unwrap().iter().any(|f| f["module"]
                .as_str()
                .is_some_and(|m| m.ends_with("/rip-demo-server"))),
            "{role}: no frame of the program in {u:?}"
        );
        let k = functions(stack(t, "kernel_stack"));
        assert!(
            k.iter().any(|f| f.contains(kernel)),
            "{role}: no *{kernel}* in its kernel stack {k:?}"
        );
        if kind == "pool-" {
            pool_stacks.insert((t["frames"].as_u64(), t["kernel_stack"].as_u64()));
        }
    }
    // The demo's threads never leave their calls: /proc agrees with
    // itself on every one.
    assert_eq!(compared, threads.len(), "threads that changed under /proc");
    // The pool's workers, blocked on one mutex from one place, share one
    // user stack: one entry of the table, not one per worker.
    let users: HashSet<_> = pool_stacks.iter().map(|(u, _)| u).collect();
    assert_eq!(users.len(), 1, "{pool_stacks:?}");
}
