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
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
};

use rip_tests::{Background, assert_one_line_error, bpf_tests_enabled, build_c, rip_probe};
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

/// The attributes of each element named `tag` in `svg`, in order.
fn elements(svg: &str, tag: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut out = Vec::new();
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e))
                if e.name().as_ref() == tag.as_bytes() =>
            {
                out.push(
                    e.attributes()
                        .map(|a| {
                            let a = a.unwrap();
                            (
                                String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                                String::from_utf8(a.value.to_vec()).unwrap(),
                            )
                        })
                        .collect(),
                );
            }
            Ok(_) => {}
            Err(e) => panic!("the SVG is not XML at {}: {e}", reader.buffer_position()),
        }
    }
    out
}

/// `--timeline`: one panel per quantity, each series a polyline with a
/// vertex per point of the report's series, at its time and value.
#[test]
fn the_timeline_draws_the_series_of_the_report() {
    if !bpf_tests_enabled("leaks timeline") {
        return;
    }
    let mut w = Leaky::start_c("heap_leaks");
    let dir = rip_tests::TempDir::new("/tmp", "leaks-timeline");
    let file = dir.join("timeline.svg");
    let (r, _, _) = leaks_with(&mut w, 2, &["--json", "--timeline", file.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&file).expect("the timeline was written");
    let series = r["series"].as_array().unwrap();
    // At least the point noted at the end (the others, every 100 ms,
    // depend on how long the rounds took).
    assert!(!series.is_empty(), "{series:?}");
    let panels = elements(&svg, "g");
    let ids: Vec<&str> = panels.iter().map(|p| p["id"].as_str()).collect();
    assert_eq!(ids, ["bytes", "held", "rate"]);
    let lines = elements(&svg, "polyline");
    let names: Vec<&str> = lines.iter().map(|l| l["data-series"].as_str()).collect();
    assert_eq!(
        names,
        [
            "heap_bytes",
            "mapped_bytes",
            "descriptors",
            "heap_count",
            "heap_calls_per_s"
        ]
    );
    let num = |m: &std::collections::HashMap<String, String>, k: &str| -> f64 {
        m[k].parse().unwrap_or_else(|_| panic!("{k}={}", m[k]))
    };
    let window = r["window_ns"].as_u64().unwrap() as f64;
    let last_at = series.last().unwrap()["at_ns"].as_u64().unwrap() as f64;
    let span = window.max(last_at);
    // Each line of the first two panels against the JSON's points.
    for (line, panel, field) in [
        (0, 0, "heap_bytes"),
        (1, 0, "mapped_bytes"),
        (2, 1, "descriptors"),
        (3, 1, "heap_count"),
    ] {
        let p = &panels[panel];
        let (max, top, bottom) = (
            num(p, "data-max"),
            num(p, "data-top"),
            num(p, "data-bottom"),
        );
        let (left, right) = (num(p, "data-left"), num(p, "data-right"));
        let vertices: Vec<(f64, f64)> = lines[line]["points"]
            .split_whitespace()
            .map(|xy| {
                let (x, y) = xy.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        // Outstanding since the window began: 0 at its start.
        assert_eq!(lines[line]["data-origin"], "1");
        assert_eq!(vertices[0], (left, bottom), "{field}");
        let vertices = &vertices[1..];
        assert_eq!(vertices.len(), series.len(), "{field}");
        for (&(x, y), point) in vertices.iter().zip(series) {
            let v = point[field].as_u64().unwrap() as f64;
            assert!(v <= max, "{field} {v} above the axis' {max}");
            let at = point["at_ns"].as_u64().unwrap() as f64;
            let want_x = left + (right - left) * at / span;
            let want_y = bottom - (bottom - top) * v / max;
            assert!((x - want_x).abs() < 0.02, "{field}: x {x} for {want_x}");
            assert!((y - want_y).abs() < 0.02, "{field}: y {y} for {want_y}");
        }
    }
    // The leaked blocks raise the heap's line: it ends at least at two
    // rounds' leaks, and the axis holds its highest point.
    let last = series.last().unwrap();
    let leaked = 2 * (HEAP_LEAK_BLOCKS * HEAP_LEAK_SIZE + HEAP_ZEROED * HEAP_ZEROED_BYTES);
    assert!(last["heap_bytes"].as_u64().unwrap() >= leaked, "{last}");
    // The allocator was called in the window: some interval's rate is
    // above zero, on an axis of its own.
    let rate_max = num(&panels[2], "data-max");
    assert!(rate_max >= 1.0);
    let bottom = num(&panels[2], "data-bottom");
    assert!(
        lines[4]["points"].split_whitespace().any(|xy| xy
            .split_once(',')
            .unwrap()
            .1
            .parse::<f64>()
            .unwrap()
            < bottom),
        "{}",
        lines[4]["points"]
    );
}

/// A bad command line or input: exit status `code`, nothing on stdout,
/// one line on stderr holding `expect` (clap's messages, for what does
/// not parse, are clap's several lines), and no file made in `dir`.
fn refused(args: &[&str], code: i32, expect: &str, dir: &Path) {
    let (status, out, err) = rip_probe(CLI, args);
    assert_eq!(status, code, "{args:?}: {err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    assert!(err.contains(expect), "{args:?}: {err}");
    if code != 2 || err.starts_with("rip-probe: error: ") {
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.iter()
            .all(|p| p.extension().is_some_and(|e| e == "ring")),
        "{args:?} left {left:?}"
    );
}

/// Each bad input of `leaks` is refused before anything is traced, with
/// what to do: 2 for a command line that cannot work, 1 for what was
/// found (no such process, not a ring).
#[test]
fn bad_input_is_refused_with_one_line_and_no_file() {
    let dir = rip_tests::TempDir::new("/tmp", "leaks-refused");
    let d = dir.path();
    let out = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (svg, pb, tl) = (out("a.svg"), out("a.pb.gz"), out("a-timeline.svg"));
    let files = ["--svg", &svg, "--pprof", &pb, "--timeline", &tl];
    // A live process to name (this test's own), never traced: each
    // mistake is found first.
    let me = std::process::id().to_string();
    let window = ["leaks", "--pid", &me, "--duration", "1s"];
    let with = |more: &[&str]| -> Vec<String> {
        window.iter().chain(more).map(|s| s.to_string()).collect()
    };
    let run = |args: Vec<String>, code, expect: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, code, expect, d);
    };
    let all = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    run(
        all(&["leaks", "--pid", "999999999", "--duration", "1s"])
            .into_iter()
            .chain(all(&files))
            .collect(),
        1,
        "no process with pid 999999999: check the pid",
    );
    run(
        all(&["leaks", "--pid", &me, "--duration", "0s"])
            .into_iter()
            .chain(all(&files))
            .collect(),
        2,
        "leaks needs a window: give --duration a length",
    );
    run(
        all(&["leaks", "--pid", &me, "--duration", "soon"]),
        2,
        "`soon` is not a duration (try 500ms, 2s, 1m)",
    );
    run(
        with(&["--pprof", "/proc/leaks.pb.gz"]),
        2,
        "--pprof /proc/leaks.pb.gz: cannot create a file in /proc",
    );
    run(
        with(&["--svg", &out("no/such/dir/a.svg")]),
        2,
        "does not exist",
    );
    run(
        with(&["--timeline", d.to_str().unwrap()]),
        2,
        "is a directory",
    );
    // The sampler's report is one reading: no window to profile or draw.
    let ring = out("sampled.ring");
    for flag in ["--pprof", "--timeline"] {
        run(
            all(&["leaks", &ring, flag, &pb]),
            2,
            &format!("{flag} writes a traced window's report"),
        );
        run(
            all(&["leaks", "--pid", &me, "--sampled", flag, &pb]),
            2,
            "cannot be used with",
        );
    }
    // A file that is not a ring, and a ring cut short.
    let text = dir.join("notes.ring");
    std::fs::write(&text, "not a ring\n".repeat(100)).unwrap();
    run(
        all(&["leaks", text.to_str().unwrap()]),
        1,
        "not a librip ring file (bad magic): pass a .ring file written by librip",
    );
    let whole = dir.join("whole.ring");
    let opts = librip::RingOptions {
        thread_slots: 4,
        coroutine_slots: 4,
        depth: 8,
    };
    librip::Ring::create(&whole, opts).expect("a ring");
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.ring");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    run(
        all(&["leaks", cut.to_str().unwrap()]),
        1,
        "ring file truncated",
    );
    // A whole ring without the sampler's table says how to get one.
    run(
        all(&["leaks", whole.to_str().unwrap()]),
        2,
        "has no allocation table: run the program with RIP_ALLOC_SAMPLE=512k",
    );
}

/// The workload exits during the window: the report says so and holds
/// what was leaked until then, every file asked for is written whole,
/// and the BPF programs rip-probe held are all unloaded.
#[test]
fn a_process_that_exits_mid_window_is_reported_and_no_probe_stays() {
    if !bpf_tests_enabled("leaks exit mid-window") {
        return;
    }
    let mut w = Leaky::start_c("heap_leaks");
    let dir = rip_tests::TempDir::new("/tmp", "leaks-exit");
    let names = ["held.pb.gz", "timeline.svg"];
    let pid = w.child.id().to_string();
    // --svg goes with the text report: JSON with the other two.
    let mut cmd = Command::new(CLI);
    cmd.args(["leaks", "--pid", &pid, "--duration", "10m", "--json"])
        .arg("--pprof")
        .arg(dir.join(names[0]))
        .arg("--timeline")
        .arg(dir.join(names[1]));
    let mut bg = Background::spawn(&mut cmd);
    bg.wait_phase("attach leaks");
    let progs = rip_tests::bpf_programs_held_by(bg.child.id());
    assert!(!progs.is_empty(), "rip-probe holds no BPF program");
    w.round();
    // SIGKILL: the process ends now, not at a line it reads.
    let _ = w.child.kill();
    let _ = w.child.wait();
    let f = bg.finish();
    assert!(f.status.success(), "{}", f.stderr);
    let r: Value = serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{e}: {}", f.stdout));
    assert_eq!(r["process"]["alive"], false, "{}", r["process"]);
    let warned = r["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().contains("exited during observation")),
        "{warned:?}"
    );
    // What it leaked before it died is counted, exactly (its stacks may
    // be unnamed: blocks younger than 200 ms are unwound at the end, and
    // a dead process's binaries can no longer be opened).
    let held: u64 = stacks(&r, "heap")
        .iter()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(held, HEAP_LEAK_BLOCKS + HEAP_ZEROED, "{:#}", r["stacks"]);
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["held.pb.gz", "timeline.svg"]);
    let timeline = std::fs::read_to_string(dir.join(names[1])).unwrap();
    assert!(timeline.trim_end().ends_with("</svg>"), "{timeline:.300}");
    let pb = std::fs::read(dir.join(names[0])).unwrap();
    assert_eq!(&pb[..2], b"\x1f\x8b", "a gzipped profile");
    assert_eq!(
        rip_tests::bpf_programs_still_loaded(&progs),
        Vec::<u64>::new(),
        "programs left loaded"
    );
}

/// An output replaced by a FIFO during the window is refused at the end
/// with one line and exit status 2; the other files asked for are not
/// written either, and no BPF program stays loaded.
#[test]
fn an_output_refused_at_the_end_leaves_no_file_and_no_probe() {
    if !bpf_tests_enabled("leaks output refused") {
        return;
    }
    let mut w = Leaky::start();
    let dir = rip_tests::TempDir::new("/tmp", "leaks-late-fifo");
    let (svg, pb, tl) = (dir.join("a.svg"), dir.join("a.pb.gz"), dir.join("t.svg"));
    let pid = w.child.id().to_string();
    let mut cmd = Command::new(CLI);
    cmd.args(["leaks", "--pid", &pid, "--no-heap"])
        .arg("--pprof")
        .arg(&pb)
        .arg("--timeline")
        .arg(&tl)
        .arg("--svg")
        .arg(&svg);
    let mut bg = Background::spawn(&mut cmd);
    bg.wait_phase("attach leaks");
    let progs = rip_tests::bpf_programs_held_by(bg.child.id());
    assert!(!progs.is_empty(), "rip-probe holds no BPF program");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &svg,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    w.round();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(bg.child.id() as i32, libc::SIGINT) };
    let f = bg.finish();
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr);
    assert!(f.stdout.is_empty(), "{}", f.stdout);
    let errors: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("rip-probe: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{}", f.stderr);
    assert!(
        errors[0].contains("--svg") && errors[0].contains("is a FIFO"),
        "{}",
        f.stderr
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, vec![svg.clone()], "only the FIFO put there");
    assert_eq!(
        rip_tests::bpf_programs_still_loaded(&progs),
        Vec::<u64>::new(),
        "programs left loaded"
    );
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
