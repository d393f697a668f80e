//! `rip-probe leaks` on `tests/c/leaks.c` (no librip, -O2 without frame
//! pointers: the stacks come from the CFI): the descriptors and mappings
//! leaked from one function each are found under it, with their exact
//! count and bytes, while the thousand opened and closed (and the hundred
//! mapped and unmapped) from the balanced functions leave nothing; the
//! same for heap blocks through glibc's malloc family (`tests/c/heap_leaks.c`,
//! every call traced by uprobes, so counts are exact); and the command's
//! one-line errors.
//!
//! The workload acts when told on stdin and says when it is done, and
//! rip-probe says when its window has begun (`RIP_PROBE_TIMING`), so no
//! step waits for a time a loaded machine may overrun.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
};

use rip_tests::{Background, assert_one_line_error, bpf_tests_enabled, build_c};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// What `tests/c/leaks.c` keeps per round.
const LEAK_FILES: u64 = 5;
const LEAK_EVENTFDS: u64 = 1;
const LEAK_MAPS: u64 = 3;
const MAP_BYTES: u64 = 64 * 1024;

/// The workload, waiting for `go` lines.
struct Leaky {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<std::process::ChildStdout>,
}

impl Leaky {
    fn start() -> Leaky {
        Leaky::start_c("leaks")
    }

    fn start_c(name: &str) -> Leaky {
        let mut child = Command::new(build_c(name, &["-fomit-frame-pointer"]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start tests/c/leaks.c");
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut l = Leaky { child, stdin, out };
        l.expect("ready");
        l
    }

    fn expect(&mut self, what: &str) {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("read the workload");
        assert_eq!(line.trim(), what, "the workload said {line:?}");
    }

    /// One round: leaks, balanced work, then `done`.
    fn round(&mut self) {
        writeln!(self.stdin, "go").unwrap();
        self.stdin.flush().unwrap();
        self.expect("done");
    }
}

impl Drop for Leaky {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rip-probe leaks --pid PID --json` over `rounds` rounds of the
/// workload, ended by Ctrl-C once the workload said it was done.
fn leaks_over(w: &mut Leaky, rounds: usize) -> Value {
    leaks_with(w, rounds, &["--no-heap", "--json"]).0
}

/// `rip-probe leaks --pid PID ARGS` over `rounds` rounds, as
/// [`leaks_over`]: the report as JSON (`Null` for text) and the text and
/// stderr.
fn leaks_with(w: &mut Leaky, rounds: usize, args: &[&str]) -> (Value, String, String) {
    let pid = w.child.id().to_string();
    let mut cmd = Command::new(CLI);
    cmd.args(["leaks", "--pid", &pid]).args(args);
    let mut bg = Background::spawn(&mut cmd);
    bg.wait_phase("attach leaks");
    for _ in 0..rounds {
        w.round();
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(bg.child.id() as i32, libc::SIGINT) };
    let f = bg.finish();
    assert!(f.status.success(), "rip-probe leaks: {}", f.stderr);
    let json = if args.contains(&"--json") {
        serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{e}: {}", f.stdout))
    } else {
        Value::Null
    };
    (json, f.stdout, f.stderr)
}

fn functions(stack: &Value) -> Vec<String> {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str().map(String::from))
        .collect()
}

fn stacks<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == kind)
        .collect()
}

#[test]
fn leaked_descriptors_and_mappings_are_found_under_their_function_and_no_balanced_one() {
    if !bpf_tests_enabled("leaks") {
        return;
    }
    let mut w = Leaky::start();
    let rounds = 2;
    let r = leaks_over(&mut w, rounds);
    let lost = &r["lost"];
    assert_eq!(lost["events"], 0, "{lost}");
    assert_eq!(lost["calls"], 0, "{lost}");
    assert!(
        r["open_at_start"].as_u64().unwrap() >= 3,
        "{}",
        r["open_at_start"]
    );

    // Descriptors: exactly what leak_fds() kept, all under it.
    let fds = stacks(&r, "fd");
    let held: u64 = fds.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    assert_eq!(
        held,
        (LEAK_FILES + LEAK_EVENTFDS) * rounds as u64,
        "{:#}",
        r["stacks"]
    );
    for s in &fds {
        let f = functions(s);
        assert!(f.iter().any(|f| f == "leak_fds"), "{f:?}");
        assert!(!f.iter().any(|f| f.starts_with("balanced")), "{f:?}");
    }
    let files: u64 = fds
        .iter()
        .filter(|s| s["fd_kind"] == "file" && s["call"].as_str().unwrap().starts_with("open"))
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(files, LEAK_FILES * rounds as u64);
    let eventfds: u64 = fds
        .iter()
        .filter(|s| s["fd_kind"] == "eventfd")
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(eventfds, LEAK_EVENTFDS * rounds as u64);

    // Mappings: leak_map()'s, with their bytes; none from balanced_map().
    let maps = stacks(&r, "mapping");
    let under: Vec<&&Value> = maps
        .iter()
        .filter(|s| functions(s).iter().any(|f| f == "leak_map"))
        .collect();
    let count: u64 = under.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    let bytes: u64 = under.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
    assert_eq!(count, LEAK_MAPS * rounds as u64, "{maps:#?}");
    assert_eq!(bytes, LEAK_MAPS * MAP_BYTES * rounds as u64, "{maps:#?}");
    for s in &maps {
        let f = functions(s);
        assert!(!f.iter().any(|f| f == "balanced_map"), "{f:?}");
    }

    // What the balanced functions opened and closed is counted as
    // released, not reported.
    let released = r["released"].as_array().unwrap();
    let fd_released = released
        .iter()
        .find(|t| t["kind"] == "fd")
        .map_or(0, |t| t["count"].as_u64().unwrap());
    assert!(fd_released >= 1200 * rounds as u64, "{released:?}");
    let map_released = released
        .iter()
        .find(|t| t["kind"] == "mapping")
        .map_or(0, |t| t["count"].as_u64().unwrap());
    assert!(map_released >= 100 * rounds as u64, "{released:?}");
}

/// The text view names the leaking function and the filter's summary.
#[test]
fn the_text_report_names_the_leaking_function() {
    if !bpf_tests_enabled("leaks text") {
        return;
    }
    let mut w = Leaky::start();
    let mut bg = Background::spawn(Command::new(CLI).args([
        "leaks",
        "--pid",
        &w.child.id().to_string(),
        "--no-heap",
    ]));
    bg.wait_phase("attach leaks");
    w.round();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(bg.child.id() as i32, libc::SIGINT) };
    let f = bg.finish();
    assert!(f.status.success(), "{}", f.stderr);
    for want in [
        "6 descriptors",
        "descriptors (file): 5",
        "from openat",
        "leak_fds at tests/c/leaks.c:",
        "released in the window (filtered out):",
    ] {
        assert!(f.stdout.contains(want), "no {want:?} in\n{}", f.stdout);
    }
}

/// What `tests/c/heap_leaks.c` loses per round.
const HEAP_LEAK_BLOCKS: u64 = 40;
const HEAP_LEAK_SIZE: u64 = 1000;
const HEAP_ZEROED: u64 = 10;
/// Bytes of each calloc'd block lost.
const HEAP_ZEROED_BYTES: u64 = 10 * 100;
/// Blocks its balanced function allocates and frees per round.
const HEAP_BALANCED: u64 = 100 + 400 + 100 + 50 * 9 + 50 * 3;
/// Allocator calls its balanced function makes per round (a realloc
/// frees its old block itself).
const HEAP_BALANCED_CALLS: u64 = 2 * (100 + 400 + 100) + 50 * 10 + 50 * 6;

#[test]
fn leaked_heap_blocks_are_found_under_their_call_path_and_no_balanced_one() {
    if !bpf_tests_enabled("leaks heap") {
        return;
    }
    let mut w = Leaky::start_c("heap_leaks");
    let rounds = 3;
    let (r, _, stderr) = leaks_with(&mut w, rounds, &["--json"]);
    let rounds = rounds as u64;
    // The cost was said before the window.
    assert!(
        stderr.contains("rip-probe: heap: uprobes on") && stderr.contains("allocator calls/s"),
        "{stderr}"
    );
    let heap = &r["traced"]["heap"];
    assert_eq!(heap["name"], "glibc", "{heap}");
    let probed: Vec<&str> = heap["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for f in ["malloc", "free", "calloc", "realloc", "posix_memalign"] {
        assert!(probed.contains(&f), "{f} not probed: {probed:?}");
    }
    // Every call was followed: the counts below are exact.
    let lost = &r["lost"];
    assert_eq!(lost["events"], 0, "{lost}");
    assert_eq!(lost["heap_calls"], 0, "{lost}");

    let blocks = stacks(&r, "heap");
    let under = |func: &str| -> (u64, u64) {
        blocks
            .iter()
            .filter(|s| functions(s).iter().any(|f| f == func))
            .fold((0, 0), |(c, b), s| {
                (
                    c + s["count"].as_u64().unwrap(),
                    b + s["bytes"].as_u64().unwrap(),
                )
            })
    };
    assert_eq!(
        under("leak_here"),
        (
            HEAP_LEAK_BLOCKS * rounds,
            HEAP_LEAK_BLOCKS * HEAP_LEAK_SIZE * rounds
        ),
        "{:#}",
        r["stacks"]
    );
    for s in &blocks {
        let f = functions(s);
        if f.iter().any(|f| f == "leak_here") {
            assert_eq!(s["call"], "malloc");
            assert!(f.iter().any(|f| f == "leak_path"), "{f:?}");
        }
    }
    let zeroed: Vec<&&Value> = blocks
        .iter()
        .filter(|s| functions(s).iter().any(|f| f == "leak_zeroed"))
        .collect();
    assert!(zeroed.iter().all(|s| s["call"] == "calloc"), "{zeroed:#?}");
    assert_eq!(
        under("leak_zeroed"),
        (
            HEAP_ZEROED * rounds,
            HEAP_ZEROED * HEAP_ZEROED_BYTES * rounds
        )
    );
    // No false leak: nothing under the balanced path.
    for s in &blocks {
        let f = functions(s);
        assert!(!f.iter().any(|f| f == "balanced_heap"), "{f:?}");
    }
    // What it allocated and freed is counted as released.
    let released = r["released"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "heap")
        .map_or(0, |t| t["count"].as_u64().unwrap());
    assert!(released >= HEAP_BALANCED * rounds, "{}", r["released"]);
    assert!(
        heap["calls"].as_u64().unwrap() >= HEAP_BALANCED_CALLS * rounds,
        "{heap}"
    );
    // The series ends with what is outstanding.
    let last = r["series"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["heap_count"].as_u64().unwrap() >= (HEAP_LEAK_BLOCKS + HEAP_ZEROED) * rounds,
        "{last}"
    );
}

/// The text view of the heap names the leaking function and the
/// allocator.
#[test]
fn the_heap_text_report_names_the_leaking_function() {
    if !bpf_tests_enabled("leaks heap text") {
        return;
    }
    let mut w = Leaky::start_c("heap_leaks");
    let dir = rip_tests::TempDir::new("/tmp", "leaks-svg");
    let svg = dir.join("heap.svg");
    let (_, text, _) = leaks_with(&mut w, 1, &["--svg", svg.to_str().unwrap()]);
    // The flame graph's widths are the outstanding bytes: leak_here()'s
    // 40 blocks of 1000 bytes, out of 50,000.
    let graph = std::fs::read_to_string(&svg).expect("the flame graph was written");
    assert!(graph.starts_with("<?xml"), "{graph:.200}");
    for want in [
        "<title>leak_here (40,000 bytes, 80.00%)</title>",
        "<title>leak_zeroed (10,000 bytes, 20.00%)</title>",
        "Outstanding bytes: ",
    ] {
        assert!(graph.contains(want), "no {want:?} in the flame graph");
    }
    assert!(!graph.contains("balanced_heap"));
    for want in [
        "50 heap blocks (48.8 KiB)",
        "heap: 40, 39.1 KiB",
        "from malloc",
        "leak_here at tests/c/heap_leaks.c:",
        "libc.so",
        "flame graph of the outstanding bytes: ",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
    assert!(!text.contains("balanced_heap"), "{text}");
}

#[test]
fn errors_are_one_line() {
    assert_one_line_error(
        CLI,
        &["leaks", "--pid", "999999999", "--duration", "1s"],
        "999999999",
    );
    assert_one_line_error(
        CLI,
        &["leaks", "--pid", "1", "--duration", "0s"],
        "leaks needs a window",
    );
}
