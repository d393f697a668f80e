//! Shared helpers for rip's end-to-end tests, and the workload programs
//! they run (under `src/bin/`).

/// Set to `1` to skip the tests that load BPF programs (for unprivileged
/// local runs). CI never sets it: there, a test that cannot load BPF fails
/// with the reason.
pub const SKIP_BPF_ENV: &str = "RIP_SKIP_BPF_TESTS";

/// Returns `false` (after saying so on stderr) when BPF tests are
/// explicitly skipped; `true` otherwise. A test that gets `true` must load
/// its programs and fail if it cannot.
pub fn bpf_tests_enabled(test: &str) -> bool {
    if std::env::var(SKIP_BPF_ENV).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED {test}: {SKIP_BPF_ENV}=1 is set, BPF programs were not loaded");
        return false;
    }
    true
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// CLOCK_MONOTONIC now, in ns (the clock `bpf_ktime_get_ns` uses).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// Compiles a C program from `tests/c/` with the system `cc` into the
/// target directory and returns the executable's path.
pub fn build_c(name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("c")
        .join(format!("{name}.c"));
    let out = target_dir().join(format!("c-{name}"));
    let status = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc {} failed", src.display());
    out
}

/// The directory test artifacts go to (next to the test executables).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// A workload process that prints lines (`role <name> <tid>`, `worker
/// <tid>`, ...) and then `ready`. Killed on drop.
pub struct Workload {
    /// The process.
    pub child: Child,
    /// Lines printed before `ready`.
    pub lines: Vec<String>,
}

impl Workload {
    /// Starts `cmd` and waits for its `ready` line.
    pub fn start(mut cmd: Command) -> Workload {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let mut lines = Vec::new();
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        loop {
            let mut l = String::new();
            let n = out.read_line(&mut l).expect("read workload output");
            assert!(n > 0, "workload {cmd:?} exited before `ready`: {lines:?}");
            let l = l.trim().to_string();
            if l == "ready" {
                break;
            }
            lines.push(l);
        }
        Workload { child, lines }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The tid printed on the line `<prefix> <tid>` (e.g. `role sleeper`).
    pub fn tid(&self, prefix: &str) -> u32 {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix} <tid>` line in {:?}", self.lines))
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the rip-probe CLI at `exe` (pass `env!("CARGO_BIN_EXE_rip-probe-cli")`)
/// with `args`; returns (exit code, stdout, stderr).
pub fn rip_probe(exe: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(exe)
        .args(args)
        .output()
        .expect("run rip-probe");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The line number of the line containing `marker` in `file` (relative to
/// the tests package), e.g. `// SNAP: nap`.
pub fn marker_line(file: &str, marker: &str) -> u32 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).expect("read source");
    let i = text
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in {}", path.display()));
    i as u32 + 1
}
