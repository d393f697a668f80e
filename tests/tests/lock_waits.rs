//! `rip-probe --pid` on threads stuck on each other's locks: who holds
//! each lock, the chain of waits to the thread that is not waiting for a
//! lock, and deadlocks, exactly, in JSON and text.

use std::{collections::HashMap, process::Command};

use rip_tests::{Workload, bpf_tests_enabled, build_c, rip_probe_json, rip_probe_ok};

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

#[test]
fn owners_chains_and_deadlocks() {
    if !bpf_tests_enabled("owners_chains_and_deadlocks") {
        return;
    }
    let w = Workload::start(Command::new(build_c("lock_chains", &[])));
    let pid = w.pid().to_string();
    let tid = |role: &str| w.tid(&format!("role {role} "));
    let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "200ms", "--json"]);
    let threads: HashMap<u64, &serde_json::Value> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["tid"].as_u64().unwrap(), t))
        .collect();
    let waits = |role: &str| &threads[&u64::from(tid(role))]["waits_for"];

    // Deadlocks: each cycle once, smallest tid first, in wait order.
    let canonical = |c: Vec<u32>| {
        let i = c.iter().enumerate().min_by_key(|&(_, t)| *t).unwrap().0;
        [&c[i..], &c[..i]].concat()
    };
    let mut want = vec![
        canonical(vec![tid("abba-a"), tid("abba-b")]),
        canonical(vec![tid("ring-1"), tid("ring-2"), tid("ring-3")]),
    ];
    want.sort();
    let got: Vec<Vec<u32>> = serde_json::from_value(v["deadlocks"].clone()).unwrap();
    assert_eq!(got, want);

    // Each waiter's lock by name, and its owner.
    for (waiter, lock, owner) in [
        ("abba-a", "g_abba_2", "abba-b"),
        ("abba-b", "g_abba_1", "abba-a"),
        ("ring-1", "g_ring_2", "ring-2"),
        ("ring-2", "g_ring_3", "ring-3"),
        ("ring-3", "g_ring_1", "ring-1"),
        ("mid", "g_chain_2", "reader"),
        ("top", "g_chain_1", "mid"),
        ("pi-waiter", "g_pi", "pi-sleeper"),
    ] {
        let wf = waits(waiter);
        assert_eq!(wf["symbol"], lock, "{waiter}: {wf}");
        assert_eq!(wf["kind"], "mutex", "{waiter}");
        assert_eq!(wf["owner"]["status"], "thread", "{waiter}: {wf}");
        assert_eq!(wf["owner_tid"], tid(owner), "{waiter}: {wf}");
    }
    assert_eq!(waits("pi-waiter")["mutex"]["pi"], true);
    // What an owner does is its own entry: the end of each chain.
    let doing = |waiter: &str| {
        let owner = waits(waiter)["owner_tid"].as_u64().expect("an owner");
        let t = threads[&owner];
        let call = t["syscall"]["text"].as_str().unwrap_or_default();
        (t["state"].clone(), call.to_string())
    };
    let (state, call) = doing("pi-waiter");
    assert_eq!(state, "sleeping");
    assert!(call.starts_with("clock_nanosleep("), "{call}");
    let (state, call) = doing("mid");
    assert_eq!(state, "sleeping");
    assert!(call.starts_with("read(3 (pipe:["), "{call}");
    // The robust mutex's owner exited; the process-shared one is held by
    // the child process.
    let r = waits("robust-waiter");
    assert_eq!(r["symbol"], "g_robust");
    assert_eq!(r["owner"]["status"], "exited", "{r}");
    assert_eq!(r["owner"]["tid"], tid("leaver"));
    assert_eq!(r["owner"]["robust"], true);
    assert!(r["owner_tid"].is_null());
    let s = waits("shared-waiter");
    let holder = tid("shared-holder");
    assert_eq!(s["owner"]["status"], "other_process", "{s}");
    assert_eq!(
        (s["owner"]["tid"].as_u64(), s["owner"]["pid"].as_u64()),
        (Some(u64::from(holder)), Some(u64::from(holder)))
    );
    // Threads not in a futex wait have none.
    assert!(threads[&u64::from(tid("reader"))]["waits_for"].is_null());

    // Text: deadlocks first, then one sentence per lock.
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "200ms"]);
    eprintln!("{text}");
    let (a, b) = (tid("abba-a"), tid("abba-b"));
    let first = a.min(b);
    let (fa, fb) = if first == a {
        ("abba-a", "abba-b")
    } else {
        ("abba-b", "abba-a")
    };
    let other = if first == a { b } else { a };
    let (lock_first, lock_other) = if first == a {
        ("g_abba_2", "g_abba_1")
    } else {
        ("g_abba_1", "g_abba_2")
    };
    let sentence = format!(
        "  {first} ({fa}) waits for mutex {lock_first} held by {other} ({fb}), which waits for mutex {lock_other} held by {first} ({fa}): deadlock\n"
    );
    let deadlock_at = text
        .find(&sentence)
        .unwrap_or_else(|| panic!("no {sentence:?}"));
    assert!(
        deadlock_at < text.find("SUMMARY").unwrap(),
        "deadlocks come first"
    );
    assert!(text.contains("DEADLOCK: 3 threads wait for each other: "));
    let chain = format!(
        "  {} (top) waits for mutex g_chain_1 held by {} (mid), which waits for mutex g_chain_2 held by {} (reader), sleeping in read(3 (pipe:[",
        tid("top"),
        tid("mid"),
        tid("reader")
    );
    assert!(text.contains(&chain), "no {chain:?}");
    assert!(text.contains(&format!(
        "waits for mutex g_robust: its owner {} exited (robust mutex: the next locker gets EOWNERDEAD)",
        tid("leaver")
    )));
    assert!(text.contains(&format!("held by thread {holder} of process {holder}")));
}
