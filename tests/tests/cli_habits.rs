//! rip-probe behaves as the command-line tools its users know: a reader
//! that stops reading (`| head -1`) ends it quietly with status 0;
//! `--watch --json` writes JSON lines; `list --json` lists a ring's
//! process, and run unprivileged says how many processes it could not
//! examine; usage mistakes get clap's whole message and exit 2.

use std::process::{Command, Stdio};

use rip_tests::{TempDir, Workload, bpf_tests_enabled, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const WORKLOAD: &str = env!("CARGO_BIN_EXE_rip-dump-workload");

/// A process with a ring (the dump workload's `sites` mode) in `dir`.
fn ring_process(dir: &TempDir) -> Workload {
    let ring = dir.join("sites.ring");
    let mut cmd = Command::new(WORKLOAD);
    cmd.args(["sites", ring.to_str().unwrap()]);
    Workload::start(cmd)
}

/// `sh_line` run by bash with pipefail: the pipeline's status (the
/// first failing command's), stdout and stderr.
fn pipeline(sh_line: &str) -> (i32, String, String) {
    let o = Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {sh_line}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `--watch` never ends on its own: only the closed pipe ends it, so the
/// pipeline's status is rip-probe's answer to EPIPE.
#[test]
fn a_reader_that_stops_reading_ends_it_quietly() {
    if !bpf_tests_enabled("a_reader_that_stops_reading_ends_it_quietly") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "habits-pipe");
    let w = ring_process(&dir);
    for json in ["", "--json"] {
        let (code, out, err) = pipeline(&format!(
            "{CLI} --pid {} --watch --duration 50ms {json} | head -1",
            w.pid()
        ));
        assert_eq!(code, 0, "{err}");
        assert_eq!(err, "", "nothing on stderr");
        assert_eq!(out.lines().count(), 1, "{out}");
    }
}

/// `--watch --json` is JSON lines: each line one whole report, no blank
/// lines between them; the text form heads each report with its time and
/// window.
#[test]
fn watch_json_is_json_lines_and_text_is_stamped() {
    if !bpf_tests_enabled("watch_json_is_json_lines_and_text_is_stamped") {
        return;
    }
    let dir = TempDir::new("/dev/shm", "habits-watch");
    let w = ring_process(&dir);
    let (code, out, err) = pipeline(&format!(
        "{CLI} --pid {} --watch --duration 100ms --json | head -3",
        w.pid()
    ));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("each line is a report");
        assert_eq!(v["schema"], rip_probe::model::SCHEMA_VERSION);
        assert_eq!(v["process"]["pid"], w.pid());
    }
    let (code, out, err) = pipeline(&format!(
        "{CLI} --pid {} --watch --duration 100ms | awk '/^===/ {{ print; if (++n == 2) exit }}'",
        w.pid()
    ));
    assert_eq!(code, 0, "{err}");
    let stamps: Vec<&str> = out.lines().collect();
    assert_eq!(stamps.len(), 2, "{out}");
    for s in stamps {
        // `=== 2026-11-24T10:34:48Z (window 0.100s) ===`
        let (time, window) = s
            .strip_prefix("=== ")
            .and_then(|s| s.strip_suffix("s) ==="))
            .and_then(|s| s.split_once(" (window "))
            .unwrap_or_else(|| panic!("not a stamp: {s}"));
        let b = time.as_bytes();
        assert!(
            b.len() == 20 && b[10] == b'T' && b[19] == b'Z' && b[4] == b'-',
            "a UTC time to the second: {s}"
        );
        let window: f64 = window.parse().expect("a window in seconds");
        assert!(
            window >= 0.1,
            "each window is this iteration's --duration: {s}"
        );
    }
}

#[test]
fn list_json_lists_a_rings_process_and_counts_what_it_cannot_see() {
    let dir = TempDir::new("/dev/shm", "habits-list");
    let w = ring_process(&dir);
    let (code, out, err) = rip_probe(CLI, &["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], rip_probe::model::SCHEMA_VERSION);
    let me = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == w.pid())
        .unwrap_or_else(|| panic!("the workload is listed: {v}"));
    assert_eq!(me["ring"], dir.join("sites.ring").to_str().unwrap());
    assert!(me["threads"].as_u64().unwrap() >= 1, "{me}");

    // As nobody, root's workload cannot be examined: not listed, counted,
    // and the text says so.
    let nobody = |args: &[&str]| {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", CLI])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let v: serde_json::Value = serde_json::from_str(&nobody(&["list", "--json"])).unwrap();
    assert!(
        !v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == w.pid()),
        "{v}"
    );
    assert!(v["unseen"].as_u64().unwrap() >= 1, "{v}");
    let text = nobody(&["list"]);
    assert!(
        text.contains("processes could not be examined") && text.contains("run as root"),
        "{text}"
    );
}

/// Usage mistakes through the binary: clap's message on stderr, status 2.
#[test]
fn usage_mistakes_exit_2_with_claps_message() {
    let (code, out, err) = rip_probe(CLI, &["dump"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("required arguments were not provided:\n  <FILE>"),
        "{err}"
    );
    assert!(err.contains("Usage: rip-probe dump <FILE>"), "{err}");
    let (code, _, err) = rip_probe(CLI, &["dupm"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a similar subcommand exists: 'dump'"), "{err}");
}
