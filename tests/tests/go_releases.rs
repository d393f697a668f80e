//! Goroutines of real programs built by Go 1.17, 1.18 and 1.20, the
//! releases no toolchain of which installs here: esbuild's Linux
//! executables from npm, stripped as shipped, each built by one of them
//! (`cargo xtask setup` installs them pinned and checked; a missing one
//! fails the test). Each is read live, without being stopped, in two
//! states its source fixes:
//!
//! - `--service`: the main goroutine reads stdin (a system call) and one
//!   goroutine waits to receive the packets it writes to stdout
//!   (cmd/esbuild/service.go's `runService`);
//! - `--serve`: a goroutine reads stdin (esbuild exits when it closes), the
//!   HTTP server waits in `Accept` (IO wait), and the main goroutine waits
//!   for the server to stop: on a `sync.WaitGroup` up to esbuild 0.14 (Go
//!   1.17, 1.18), whose semaphore only the runtime's semaphore table names
//!   (found in the stripped binary's code), on a channel from 0.17 (1.20).
//!
//! The runtime's own goroutines are checked too: each in its wait reason,
//! in the runtime's words, in the function the runtime parks it in.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{bpf_tests_enabled, rip_probe_json};
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// esbuild's executables `cargo xtask setup` installs (xtask's
/// `GO_RELEASES`): `(esbuild version, the Go that built it)`.
const RELEASES: &[(&str, &str)] = &[
    ("0.14.10", "go1.17.5"),
    ("0.14.39", "go1.18.1"),
    ("0.17.19", "go1.20.4"),
];

fn esbuild(version: &str) -> String {
    let exe = format!("/opt/rip-go/esbuild/{version}/package/bin/esbuild");
    assert!(
        std::path::Path::new(&exe).is_file(),
        "{exe} is missing: run `cargo xtask setup`"
    );
    exe
}

/// A process killed when dropped (its stdin closed first: esbuild exits).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The functions of a goroutine's stack, innermost first.
fn functions(g: &Value) -> Vec<String> {
    g["go"]["stack"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|f| f["function"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Goroutines by (status, wait reason, the function that created them:
/// "-" for the main goroutine). Go's GC workers (started at the first
/// collection, one per P) are left out: their number is the machine's.
fn census(r: &Value) -> BTreeMap<(String, String, String), usize> {
    let mut out = BTreeMap::new();
    for t in r["tasks"].as_array().unwrap() {
        if t["origin"] != "go" {
            continue;
        }
        let g = &t["go"];
        let by = g["created_by"]["function"].as_str().unwrap_or("-");
        if by == "runtime.gcBgMarkStartWorkers" {
            continue;
        }
        let key = (
            g["status"].as_str().unwrap().to_string(),
            g["wait_reason"].as_str().unwrap_or("-").to_string(),
            by.to_string(),
        );
        *out.entry(key).or_default() += 1;
    }
    out
}

/// The runtime's own goroutines every Go program of these versions has,
/// parked: (wait reason, what created it, the function it parks in).
fn runtime_goroutines(go: &str) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut v = vec![
        ("force gc (idle)", "runtime.init.", "runtime.forcegchelper"),
        ("GC sweep wait", "runtime.gcenable", "runtime.bgsweep"),
        ("GC scavenge wait", "runtime.gcenable", "runtime.bgscavenge"),
        ("finalizer wait", "runtime.createfing", "runtime.runfinq"),
    ];
    // runtime.init.N: its number is the version's.
    v[0].1 = match go {
        "go1.17.5" => "runtime.init.7",
        _ => "runtime.init.6",
    };
    v
}

/// Reports on `pid` until its goroutines are `want` (the program's, and
/// the runtime's own, all parked); fails with the last report after two
/// minutes, however loaded the machine.
fn parked(pid: u32, want: &BTreeMap<(String, String, String), usize>) -> Value {
    let pid = pid.to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
        let got = census(&r);
        if &got == want {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "goroutines never matched:\n got {got:#?}\nwant {want:#?}\nwarnings: {}",
            r["warnings"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn want(go: &str, program: &[(&str, &str, &str)]) -> BTreeMap<(String, String, String), usize> {
    let mut w = BTreeMap::new();
    for (reason, by, _) in runtime_goroutines(go) {
        *w.entry(("waiting".into(), reason.into(), by.into()))
            .or_default() += 1;
    }
    for (status, reason, by) in program {
        *w.entry((status.to_string(), reason.to_string(), by.to_string()))
            .or_default() += 1;
    }
    w
}

/// The one goroutine created by `by` ("-": the main one).
fn the_goroutine<'a>(r: &'a Value, by: &str) -> &'a Value {
    let gs: Vec<&Value> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["origin"] == "go" && t["go"]["created_by"]["function"].as_str().unwrap_or("-") == by
        })
        .collect();
    assert_eq!(gs.len(), 1, "one goroutine created by {by}");
    gs[0]
}

/// Every goroutine's stack named from the stripped binary's pclntab,
/// walked to its end (`runtime.goexit`, or `runtime.main`'s caller for
/// the main goroutine).
fn stacks_named(r: &Value, go: &str) {
    for t in r["tasks"].as_array().unwrap() {
        // The GC's workers (not counted) may be running: no stack then.
        if t["origin"] != "go"
            || t["go"]["created_by"]["function"] == "runtime.gcBgMarkStartWorkers"
        {
            continue;
        }
        let f = functions(t);
        assert!(f.len() >= 2, "{go}: {t}");
        assert!(
            !f.iter().any(|f| f == "?"),
            "{go}: a frame without a name: {f:?}"
        );
        assert!(
            t["go"]["stack_note"].is_null(),
            "{go}: walked to its end: {t}"
        );
        assert_eq!(
            f.last().map(String::as_str),
            Some("runtime.goexit"),
            "{go}: {f:?}"
        );
    }
    for (reason, by, parks_in) in runtime_goroutines(go) {
        // runtime.gcenable starts two: one per reason.
        let gs: Vec<&Value> = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["go"]["created_by"]["function"] == by && t["go"]["wait_reason"] == reason)
            .collect();
        assert_eq!(gs.len(), 1, "{go}: {reason}");
        let g = gs[0];
        assert!(
            functions(g).iter().any(|f| f == parks_in),
            "{go}: {reason}: {:?}",
            functions(g)
        );
    }
}

/// `esbuild --service=VERSION`: the version it writes first on stdout
/// says it is up; then the main goroutine reads stdin and the writer
/// waits for packets.
fn service(version: &str, go: &str) {
    let mut child = Command::new(esbuild(version))
        .arg(format!("--service={version}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("esbuild starts");
    let mut out = child.stdout.take().unwrap();
    let p = Running(child);
    // A uint32 length, then the version.
    let mut len = [0u8; 4];
    out.read_exact(&mut len)
        .expect("esbuild writes its version");
    let mut v = vec![0u8; u32::from_le_bytes(len) as usize];
    out.read_exact(&mut v).unwrap();
    assert_eq!(v, version.as_bytes());
    let r = parked(
        p.0.id(),
        &want(
            go,
            &[
                ("syscall", "-", "-"),
                ("waiting", "chan receive", "main.runService"),
            ],
        ),
    );
    eprintln!("{go} --service: {:#?}", census(&r));
    assert!(
        r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| !w.as_str().unwrap_or("").contains("goroutines")),
        "{}",
        r["warnings"]
    );
    stacks_named(&r, go);
    let main = the_goroutine(&r, "-");
    let f = functions(main);
    for want in [
        "os.(*File).Read",
        "main.runService",
        "main.main",
        "runtime.main",
    ] {
        assert!(f.iter().any(|g| g == want), "{go}: main goroutine: {f:?}");
    }
    assert_eq!(main["go"]["status"], "syscall");
    let writer = the_goroutine(&r, "main.runService");
    assert_eq!(
        functions(writer)[..2],
        ["runtime.gopark", "runtime.chanrecv"]
    );
    assert!(
        functions(writer)
            .iter()
            .any(|f| f == "main.runService.func1")
    );
    assert_eq!(writer["go"]["waits_on"]["kind"], "channel", "{writer}");
}

/// `esbuild --serve`: its " > Local: http://…" line on stderr says the
/// server listens; then the main goroutine waits for it to stop.
fn serve(version: &str, go: &str, dir: &std::path::Path) {
    let mut child = Command::new(esbuild(version))
        .arg("--serve=127.0.0.1:0")
        .arg(format!("--servedir={}", dir.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("esbuild starts");
    let err = BufReader::new(child.stderr.take().unwrap());
    let p = Running(child);
    let mut lines = Vec::new();
    for l in err.lines() {
        let l = l.expect("esbuild's stderr");
        let up = l.contains("http://127.0.0.1:");
        lines.push(l);
        if up {
            break;
        }
    }
    assert!(
        lines.iter().any(|l| l.contains("http://127.0.0.1:")),
        "{go}: esbuild --serve did not start: {lines:?}"
    );
    let (main_reason, server_by) = if go == "go1.20.4" {
        (
            "chan receive",
            "github.com/evanw/esbuild/pkg/api.(*internalContext).Serve",
        )
    } else {
        ("semacquire", "github.com/evanw/esbuild/pkg/api.serveImpl")
    };
    let r = parked(
        p.0.id(),
        &want(
            go,
            &[
                ("waiting", main_reason, "-"),
                ("syscall", "-", "main.main.func1"),
                ("waiting", "IO wait", server_by),
            ],
        ),
    );
    eprintln!("{go} --serve: {:#?}", census(&r));
    stacks_named(&r, go);
    let main = the_goroutine(&r, "-");
    let waits = &main["go"]["waits_on"];
    if go == "go1.20.4" {
        assert!(
            functions(main)
                .iter()
                .any(|f| f == "github.com/evanw/esbuild/pkg/cli.serveImpl")
        );
        assert_eq!(waits["kind"], "channel", "{main}");
    } else {
        // The WaitGroup's semaphore, from the semaphore table of a
        // binary without symbols.
        assert!(
            functions(main)
                .iter()
                .any(|f| f == "sync.(*WaitGroup).Wait"),
            "{:?}",
            functions(main)
        );
        assert_eq!(waits["kind"], "semaphore", "{go}: {main}");
        assert_eq!(waits["addrs"].as_array().unwrap().len(), 1, "{waits}");
    }
    let server = the_goroutine(&r, server_by);
    let f = functions(server);
    assert!(
        f.iter().any(|g| g == "net/http.(*Server).Serve"),
        "{go}: {f:?}"
    );
    assert!(
        f.iter().any(|g| g == "internal/poll.(*FD).Accept"),
        "{go}: {f:?}"
    );
}

#[test]
fn goroutines_of_esbuild_as_a_service() {
    if !bpf_tests_enabled("goroutines_of_esbuild_as_a_service") {
        return;
    }
    for (version, go) in RELEASES {
        service(version, go);
    }
}

#[test]
fn goroutines_of_esbuild_serving() {
    if !bpf_tests_enabled("goroutines_of_esbuild_serving") {
        return;
    }
    let dir = rip_tests::TempDir::new("/tmp", "go-releases");
    std::fs::write(dir.join("index.html"), "hi\n").unwrap();
    for (version, go) in RELEASES {
        serve(version, go, dir.path());
    }
}
