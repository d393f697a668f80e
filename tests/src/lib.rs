//! Shared helpers for rip's end-to-end tests, and the workload programs
//! they run (under `src/bin/`).

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

use librip::reader::{RingFile, Slot};

/// Set to `1` to skip the tests that load BPF programs (for unprivileged
/// local runs). CI never sets it: there, a test that cannot load BPF fails
/// with the reason.
pub const SKIP_BPF_ENV: &str = "RIP_SKIP_BPF_TESTS";

/// Set to `1` to skip the tests that need root for something else than BPF
/// (mounting a small tmpfs). CI never sets it.
pub const SKIP_PRIVILEGED_ENV: &str = "RIP_SKIP_PRIVILEGED_TESTS";

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

/// Like [`bpf_tests_enabled`], for tests that need root to mount things.
pub fn privileged_tests_enabled(test: &str, what: &str) -> bool {
    if std::env::var(SKIP_PRIVILEGED_ENV).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED {test}: {SKIP_PRIVILEGED_ENV}=1 is set, {what} was not tested");
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

/// A directory removed (with its contents) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh 0700 directory under `base` (`/dev/shm` for tmpfs, `/tmp` for disk).
    pub fn new(base: &str, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(format!("{base}/rip-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small deterministic generator (xorshift64*), seeded per test.
pub struct Rng(u64);

impl Rng {
    /// Seeded with `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Runs `cmd`, failing the test with its stderr if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()))
}

/// The values of the `key ...` lines of a workload's stdout.
pub fn facts<'a>(stdout: &'a str, key: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .collect()
}

/// Reads a ring, failing the test with the reader's message.
pub fn read_ring(path: &Path) -> RingFile {
    RingFile::open(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Checks that a slot's entries are exactly its last snaps: consecutive
/// sequence numbers ending at `snaps - 1` (or at `snaps`, when the writer
/// stopped between storing an entry and counting it), as many as the depth
/// allows. Only holds for slots whose sequence started at 0.
pub fn check_whole(slot: &Slot, depth: u64) -> Result<(), String> {
    let n = slot.snaps;
    let got: Vec<u64> = slot.entries.iter().map(|e| e.seq).collect();
    let want = |last: u64| -> Vec<u64> {
        let first = (last + 1).saturating_sub(depth);
        (first..=last).collect()
    };
    let ok = match n {
        0 => got.is_empty() || got == [0],
        n => got == want(n - 1) || got == want(n),
    };
    if ok && slot.entries.iter().all(|e| e.addr != 0) {
        Ok(())
    } else {
        Err(format!(
            "slot {} ({:?} {:?}, id {}, gen {}) has {n} snaps but entries {got:?}",
            slot.index, slot.kind, slot.state, slot.id, slot.generation
        ))
    }
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_path_buf()
}

/// Builds librip optimized (its static and shared libraries and the
/// `snap_loops` example) in `target/nested`, a target directory of its own
/// since the cargo running the tests holds `target/`'s lock. Returns the
/// directory holding the artifacts.
pub fn build_librip_release() -> PathBuf {
    let root = workspace_root();
    let target = root.join("target/nested");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = run(Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "librip",
            "--lib",
            "--example",
            "snap_loops",
            "--target-dir",
        ])
        .arg(&target));
    assert!(
        out.status.success(),
        "building librip failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release")
}

/// Compiles a C program from `tests/c/` with the system `cc` into the
/// target directory and returns the executable's path.
pub fn build_c(name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("c")
        .join(format!("{name}.c"));
    // Tests running in parallel build the same program: each call gets a
    // directory of its own, so none executes a file another is writing
    // (ETXTBSY) or attaches uprobes to a file another replaced.
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = target_dir().join(format!(
        "c-build/{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    let out = dir.join(format!("c-{name}"));
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
