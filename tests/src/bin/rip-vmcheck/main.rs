//! The guest suite of `cargo xtask vmtest`: checks rip-probe, the binary a
//! user would copy, against static workloads on whatever kernel it runs on
//! (a qemu guest's /init runs it; xtask also runs it on the host). Each
//! check prints one line, `RIPCHECK <check> PASS|FAIL <detail>`; rip-probe's
//! stderr lines (degraded-feature notes) are printed as `RIPNOTE <check>
//! <line>`, the kernel as `RIPINFO kernel <release>`, and the end as
//! `RIPDONE`. Exits 1 if any check failed.
//!
//! Usage: `rip-vmcheck --probe RIP_PROBE --stuck VM_STUCK --uninstrumented
//! UNINSTRUMENTED [--dir DIR] [--dmesg-all]` (DIR: where ring files go, on
//! tmpfs; `--dmesg-all`: check the whole kernel log, as a guest does, not
//! only what was logged while the suite ran). `rip-vmcheck
//! --sampled-workload RING` is the `sampler` check's workload (the suite
//! runs itself).

mod sampler;

use std::{
    collections::BTreeSet,
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use rip_ebpf::{names, offcpu::names as offcpu_names};
use serde_json::Value;

/// librip's allocation sampler, for the `sampler` check's workload: it
/// forwards every call and samples none unless the workload makes a ring
/// with an allocation table.
#[global_allocator]
static ALLOC: librip::alloc::Sampled<std::alloc::System> =
    librip::alloc::Sampled::new(std::alloc::System);

/// The workload's source: the `SNAP:` markers give the expected lines.
const STUCK_SRC: &str = include_str!("../../../c/vm_stuck.c");
const UNINSTRUMENTED_SRC: &str = include_str!("../../../c/uninstrumented.c");
/// What `tests/c/heap_leaks.c` loses per round: blocks of bytes from
/// `leak_here` (malloc) and from `leak_zeroed` (calloc).
const HEAP_LEAKS: [(&str, &str, u64, u64); 2] = [
    ("leak_here", "malloc", 40, 1000),
    ("leak_zeroed", "calloc", 10, 1000),
];
/// Rounds of `heap_leaks` the `leaks` check traces.
const HEAP_ROUNDS: u64 = 3;
/// How long any one rip-probe or workload run may take (TCG is slow).
const CMD_TIMEOUT: Duration = Duration::from_secs(90);
/// The names rip's BPF programs carry in the kernel.
const OUR_PROGS: [&str; 6] = [
    names::SCHED_SWITCH_BTF,
    names::SCHED_SWITCH,
    names::SCHED_SWITCH_KSTACK,
    names::TASK_ITER,
    names::TASK_ITER_KSTACK,
    names::FN_ENTRY,
];

struct Paths {
    probe: PathBuf,
    stuck: PathBuf,
    uninstrumented: PathBuf,
    dir: PathBuf,
    dmesg_all: bool,
}

/// One blocked role of `vm_stuck.c`: the syscalls it may be in (libc
/// picks), and what its decoded arguments must show.
struct Role {
    name: &'static str,
    syscalls: &'static [(&'static str, i64)],
    args: ArgCheck,
}

enum ArgCheck {
    /// `syscall.text` contains this.
    Text(&'static str),
    /// The first argument's raw value is the futex word printed as `futex ADDR`.
    FutexAddr,
}

const ROLES: &[Role] = &[
    Role {
        name: "pipe-reader",
        syscalls: &[("read", 0)],
        args: ArgCheck::Text("pipe:["),
    },
    Role {
        name: "sleeper",
        syscalls: &[("nanosleep", 35), ("clock_nanosleep", 230)],
        args: ArgCheck::Text("1h00m"),
    },
    Role {
        name: "locker",
        syscalls: &[("futex", 202)],
        args: ArgCheck::FutexAddr,
    },
    Role {
        name: "acceptor",
        syscalls: &[("accept", 43), ("accept4", 288)],
        args: ArgCheck::Text("socket:["),
    },
];

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 3 && args[1] == "--sampled-workload" {
        sampler::workload(Path::new(&args[2]));
    }
    let paths = match parse_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rip-vmcheck: {e:#}");
            std::process::exit(2);
        }
    };
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("RIPINFO kernel {}", release.trim());
    let kmsg_start = if paths.dmesg_all {
        None
    } else {
        Some(kmsg_last_seq())
    };
    let mut failed = false;
    let mut report = |check: &str, r: Result<String>| match r {
        Ok(detail) => println!("RIPCHECK {check} PASS {detail}"),
        Err(e) => {
            failed = true;
            println!("RIPCHECK {check} FAIL {}", one_line(&format!("{e:#}")));
        }
    };
    let _ = std::fs::create_dir_all(&paths.dir);
    let ring = paths
        .dir
        .join(format!("vm-stuck.{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&ring);
    let stuck = start_stuck(&paths, &ring);
    match stuck {
        Ok(mut w) => {
            report("pid", check_pid(&paths, &w));
            report("dump", check_dump(&paths, &mut w, &ring));
        }
        Err(e) => {
            let e = e.context("starting vm_stuck");
            report("pid", Err(anyhow::anyhow!("{e:#}")));
            report("dump", Err(e));
        }
    }
    let _ = std::fs::remove_file(&ring);
    report("uprobe", check_uprobe(&paths));
    report("calls", check_calls(&paths));
    report("locks", check_locks(&paths));
    report("offcpu", check_offcpu(&paths));
    report("switch", check_switch(&paths));
    report("bounds", check_bounds(&paths));
    report("foreign", check_foreign(&paths));
    report("pidns", check_pidns(&paths));
    report("cleanup", check_cleanup(&paths));
    report("bulk", check_bulk(&paths));
    report("leaks", check_leaks(&paths));
    report("sampler", sampler::check(&paths));
    report("dmesg", check_dmesg(kmsg_start));
    println!("RIPDONE");
    std::process::exit(i32::from(failed));
}

fn parse_args() -> Result<Paths> {
    let mut args = std::env::args().skip(1);
    let (mut probe, mut stuck, mut uninstrumented) = (None, None, None);
    let mut dir = PathBuf::from("/dev/shm/rip-vmcheck");
    let mut dmesg_all = false;
    while let Some(a) = args.next() {
        if a == "--dmesg-all" {
            dmesg_all = true;
            continue;
        }
        let v = args
            .next()
            .map(PathBuf::from)
            .with_context(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--probe" => probe = Some(v),
            "--stuck" => stuck = Some(v),
            "--uninstrumented" => uninstrumented = Some(v),
            "--dir" => dir = v,
            _ => bail!("unknown argument {a}"),
        }
    }
    let need = |p: Option<PathBuf>, what: &str| {
        p.with_context(|| {
            format!("usage: rip-vmcheck --probe P --stuck P --uninstrumented P: {what} missing")
        })
    };
    Ok(Paths {
        probe: need(probe, "--probe")?,
        stuck: need(stuck, "--stuck")?,
        uninstrumented: need(uninstrumented, "--uninstrumented")?,
        dir,
        dmesg_all,
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The 1-based line of the first line of `src` containing `marker`.
fn marker_line(src: &str, marker: &str) -> u64 {
    src.lines()
        .position(|l| l.contains(marker))
        .map_or(0, |i| i as u64 + 1)
}

/// A workload process that printed lines and then `ready`; killed on drop.
struct Workload {
    child: Child,
    lines: Vec<String>,
}

impl Workload {
    fn start(cmd: &mut Command) -> Result<Workload> {
        use std::io::BufRead;
        // stdin stays open until the workload is dropped: one that reads
        // its commands (many_functions) waits on it.
        let mut child = cmd
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
        let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if out.read_line(&mut l)? == 0 {
                let _ = child.kill();
                let status = child.wait()?;
                bail!("exited ({status}) before `ready`: {lines:?}");
            }
            match l.trim() {
                "ready" => break,
                l => lines.push(l.to_string()),
            }
        }
        Ok(Workload { child, lines })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The value of the line `<key> <value>`.
    fn fact(&self, key: &str) -> Result<&str> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .with_context(|| format!("no `{key}` line in {:?}", self.lines))
    }

    fn tid(&self, role: &str) -> Result<u32> {
        Ok(self.fact(&format!("role {role}"))?.parse()?)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to completion within [`CMD_TIMEOUT`]: (exit code, stdout, stderr).
fn run(cmd: &mut Command) -> Result<(i32, String, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + CMD_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} did not finish in {CMD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    Ok((status.code().unwrap_or(-1), out, err))
}

/// Runs rip-probe with `args` (which include `--json`), printing its
/// stderr as notes; its report.
fn probe_json(paths: &Paths, check: &str, args: &[&str]) -> Result<Value> {
    let (code, out, err) = run(Command::new(&paths.probe).args(args))?;
    for l in err.lines().filter(|l| !l.trim().is_empty()) {
        println!("RIPNOTE {check} {l}");
    }
    ensure!(
        code == 0,
        "rip-probe {} exited {code}: {}",
        args.join(" "),
        err.lines().last().unwrap_or("")
    );
    let v = serde_json::from_str(&out)
        .with_context(|| format!("rip-probe {}: not JSON", args.join(" ")))?;
    Ok(rip_tests::inline_stacks(v))
}

fn thread(report: &Value, tid: u32) -> Result<&Value> {
    report["threads"]
        .as_array()
        .context("no threads array")?
        .iter()
        .find(|t| t["tid"] == tid)
        .with_context(|| format!("tid {tid} not in the report"))
}

fn start_stuck(paths: &Paths, ring: &Path) -> Result<Workload> {
    Workload::start(Command::new(&paths.stuck).arg(ring))
}

/// The syscall number a thread is in, from /proc (None: running, or gone).
fn proc_syscall(pid: u32, tid: u32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// `pid`: every role of vm_stuck blocked in its syscall, with its argument,
/// a blocked time of at least what we know, and its last snap's line.
fn check_pid(paths: &Paths, w: &Workload) -> Result<String> {
    let pid = w.pid();
    // Wait (from /proc) until every role is inside its syscall.
    let deadline = Instant::now() + Duration::from_secs(30);
    for r in ROLES {
        let tid = w.tid(r.name)?;
        while !proc_syscall(pid, tid).is_some_and(|n| r.syscalls.iter().any(|s| s.1 == n)) {
            ensure!(
                Instant::now() < deadline,
                "{} ({tid}) never blocked in {:?}: /proc says {:?}",
                r.name,
                r.syscalls,
                proc_syscall(pid, tid)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let blocked_at = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let known = blocked_at.elapsed();
    let v = probe_json(
        paths,
        "pid",
        &["--pid", &pid.to_string(), "--duration", "500ms", "--json"],
    )?;
    ensure!(v["mode"] == "pid", "mode {}", v["mode"]);
    let futex: u64 = {
        let a = w.fact("futex")?;
        u64::from_str_radix(a.trim_start_matches("0x"), 16)?
    };
    for r in ROLES {
        let tid = w.tid(r.name)?;
        let t = thread(&v, tid)?;
        let ctx = || format!("{} ({tid}): {t}", r.name);
        ensure!(t["state"] == "sleeping", "state {}; {}", t["state"], ctx());
        let name = t["syscall"]["name"].as_str().unwrap_or_default();
        ensure!(
            r.syscalls.iter().any(|s| s.0 == name),
            "syscall {name:?}, want one of {:?}; {}",
            r.syscalls,
            ctx()
        );
        match r.args {
            ArgCheck::Text(want) => ensure!(
                t["syscall"]["text"]
                    .as_str()
                    .is_some_and(|s| s.contains(want)),
                "syscall text lacks {want:?}; {}",
                ctx()
            ),
            ArgCheck::FutexAddr => ensure!(
                t["syscall"]["args"][0]["raw"].as_u64() == Some(futex),
                "futex address, want {futex:#x}; {}",
                ctx()
            ),
        }
        let ns = t["blocked"]["ns"].as_u64().unwrap_or(0);
        ensure!(
            ns >= known.as_nanos() as u64,
            "blocked {ns} ns < known {known:?}; {}",
            ctx()
        );
        ensure!(
            t["kernel_stack"].as_array().is_some_and(|s| !s.is_empty()),
            "no kernel stack; {}",
            ctx()
        );
        check_snap(t, r.name)?;
    }
    Ok(format!(
        "{} roles blocked ≥{:.1}s at their snap lines",
        ROLES.len(),
        known.as_secs_f64()
    ))
}

/// The thread's location is its ring's last snap, at the role's marker.
fn check_snap(t: &Value, role: &str) -> Result<()> {
    let loc = &t["location"];
    let want = marker_line(STUCK_SRC, &format!("SNAP: {role} "));
    ensure!(loc["source"] == "ring", "{role}: location source {loc}");
    let file = loc["frame"]["file"].as_str().unwrap_or_default();
    ensure!(
        file.ends_with("vm_stuck.c") && loc["frame"]["line"].as_u64() == Some(want),
        "{role}: last snap {file}:{}, want vm_stuck.c:{want}",
        loc["frame"]["line"]
    );
    Ok(())
}

/// `dump`: after SIGKILL the ring still says where each thread was.
fn check_dump(paths: &Paths, w: &mut Workload, ring: &Path) -> Result<String> {
    w.child.kill()?;
    w.child.wait()?;
    let ring_s = ring.to_str().context("ring path not UTF-8")?;
    let v = probe_json(paths, "dump", &["dump", ring_s, "--json", "--exited"])?;
    ensure!(v["mode"] == "dump", "mode {}", v["mode"]);
    ensure!(
        v["process"]["alive"] == false,
        "process alive after SIGKILL: {}",
        v["process"]
    );
    let threads = v["threads"].as_array().context("no threads")?;
    ensure!(
        threads.len() == ROLES.len() + 1,
        "{} slots, want {} (roles and main)",
        threads.len(),
        ROLES.len() + 1
    );
    for r in ROLES {
        let tid = w.tid(r.name)?;
        let t = thread(&v, tid)?;
        ensure!(t["name"] == r.name, "{tid}: name {}", t["name"]);
        ensure!(
            !["running", "runnable", "sleeping"].contains(&t["state"].as_str().unwrap_or("")),
            "{}: dead process's thread shown as {}",
            r.name,
            t["state"]
        );
        check_snap(t, r.name)?;
    }
    Ok(format!(
        "{} slots post mortem, last snaps right",
        threads.len()
    ))
}

/// `uprobe`: workers of a program without librip are in `worker_wait`.
fn check_uprobe(paths: &Paths) -> Result<String> {
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("2"))?;
    let workers: Vec<u32> = w
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("worker ")?.parse().ok())
        .collect();
    ensure!(workers.len() == 2, "workers: {:?}", w.lines);
    let v = probe_json(
        paths,
        "uprobe",
        &[
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "1s",
            "--uprobe",
            "worker_*",
            "--json",
        ],
    )?;
    let line = marker_line(UNINSTRUMENTED_SRC, "int worker_wait(void)");
    for tid in workers {
        let t = thread(&v, tid)?;
        let loc = &t["location"];
        ensure!(loc["source"] == "uprobe", "{tid}: location {loc}");
        ensure!(
            loc["frame"]["function"] == "worker_wait",
            "{tid}: function {}",
            loc["frame"]["function"]
        );
        let got = loc["frame"]["line"].as_u64().unwrap_or(0);
        ensure!(
            (line..=line + 2).contains(&got),
            "{tid}: line {got}, worker_wait starts at {line}"
        );
    }
    Ok("2 workers last entered worker_wait".into())
}

/// Uprobes in bulk: `--uprobe 'fn_*'` on `many_functions` (beside
/// `uninstrumented`) attaches and detaches 1,000 functions through one
/// uprobe_multi link on Linux 6.6 and later. Before, one uprobe each:
/// 1,000 are refused with the most that detach in 2 s on this kernel (as
/// measured by rip-probe; allowed where one detach takes 2 ms or less),
/// and `fn_9*` gets 111 with
/// `RIP_PROBE_ONE_BY_ONE_MAX` (what one costs). The detail gives the
/// attach and the whole run's time (a 100 ms window).
fn check_bulk(paths: &Paths) -> Result<String> {
    let exe = paths.uninstrumented.with_file_name("many_functions");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    let mut refused = String::new();
    if version < (6, 6) {
        let w = Workload::start(&mut Command::new(&exe))?;
        let t = Instant::now();
        let (code, _, err) = run(Command::new(&paths.probe)
            .args(["--pid", &w.pid().to_string(), "--uprobe", "fn_*"])
            .args(["--duration", "100ms", "--json"]))?;
        let line = err.lines().last().unwrap_or("");
        refused = if code == 0 {
            // Allowed: one detach measured at most 2 ms (1,000 in 2 s).
            format!(
                "1000 allowed one by one (detach measured fast), whole run {:.1} s; ",
                t.elapsed().as_secs_f64()
            )
        } else {
            ensure!(
                code == 2 && line.contains("one by one would take about"),
                "1,000 uprobes one by one: exited {code}: {line}"
            );
            let most = line
                .split("at most ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .context("no `at most` in the refusal")?;
            let each = line
                .split(" to detach on this kernel (")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .unwrap_or("?");
            format!("1000 refused one by one (at most {most}, {each} each); ")
        };
    }
    // Before 6.6, 1,000 take minutes to detach under emulation, past the
    // guest's time limit; 111 (fn_9, fn_90…fn_99, fn_900…fn_999) give the
    // cost per function.
    let (pattern, count) = if version < (6, 6) {
        ("fn_9*", 111)
    } else {
        ("fn_*", 1000)
    };
    let w = Workload::start(&mut Command::new(&exe))?;
    let t = Instant::now();
    let (code, _, err) = run(Command::new(&paths.probe)
        .args(["--pid", &w.pid().to_string(), "--uprobe", pattern])
        .args(["--duration", "100ms", "--json"])
        .env("RIP_PROBE_ONE_BY_ONE_MAX", "111")
        .env("RIP_PROBE_TIMING", "1"))?;
    let whole = t.elapsed();
    for l in err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("rip-probe timing: "))
    {
        println!("RIPNOTE bulk {l}");
    }
    ensure!(
        code == 0,
        "rip-probe exited {code}: {}",
        err.lines().last().unwrap_or("")
    );
    let attach_ms = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("rip-probe timing: attach uprobes: ")?
                .strip_suffix("ms")?
                .parse::<f64>()
                .ok()
        })
        .context("no `attach uprobes` timing")?;
    let single = err.lines().any(|l| l.contains("one uprobe per function"));
    let how = if single {
        "one uprobe each"
    } else {
        "one uprobe_multi link"
    };
    ensure!(
        single == (version < (6, 6)),
        "Linux {}.{} got {how}",
        version.0,
        version.1
    );
    Ok(format!(
        "{refused}{count} functions by {how}: attach {attach_ms:.0} ms, attach+100 ms window+detach {:.1} s",
        whole.as_secs_f64()
    ))
}

/// `rip-probe leaks --pid` with the heap's uprobes on the static
/// `heap_leaks` (glibc's malloc family inside the executable, -O2 without
/// frame pointers): over three rounds, exactly the blocks each leaking
/// function lost are outstanding under it, from the right call, and
/// nothing under `balanced_heap`, whose thousand calls a round through the
/// whole family were each followed (no event lost).
fn check_leaks(paths: &Paths) -> Result<String> {
    use std::io::{BufRead, BufReader, Write};
    let exe = paths.uninstrumented.with_file_name("heap_leaks");
    let child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let mut w = Workload {
        lines: Vec::new(),
        child,
    };
    let mut stdin = w.child.stdin.take().context("piped")?;
    let (tx, said) = std::sync::mpsc::channel::<String>();
    let out = BufReader::new(w.child.stdout.take().context("piped")?);
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let expect = |what: &str| -> Result<()> {
        let l = said
            .recv_timeout(CMD_TIMEOUT)
            .with_context(|| format!("heap_leaks did not say `{what}`"))?;
        ensure!(l == what, "heap_leaks said {l:?}, not {what:?}");
        Ok(())
    };
    expect("ready")?;

    // rip-probe's phases on stderr (RIP_PROBE_TIMING): the window is open
    // once `attach leaks` is said.
    let mut probe = Command::new(&paths.probe)
        .args(["leaks", "--pid", &w.pid().to_string(), "--json"])
        .env("RIP_PROBE_TIMING", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start rip-probe leaks")?;
    let json = {
        let mut o = probe.stdout.take().context("piped")?;
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = o.read_to_string(&mut s);
            s
        })
    };
    let (etx, errs) = std::sync::mpsc::channel::<String>();
    let err = BufReader::new(probe.stderr.take().context("piped")?);
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            let _ = etx.send(l);
        }
    });
    let mut notes = Vec::new();
    let attached = loop {
        match errs.recv_timeout(CMD_TIMEOUT) {
            Ok(l) if l.starts_with("rip-probe timing: attach leaks: ") => break true,
            Ok(l) => notes.push(l),
            Err(_) => break false,
        }
    };
    // SIGTERM ends the window as Ctrl-C does (a shell that started this
    // suite in the background may have left SIGINT ignored).
    let stop = |probe: &mut Child| {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(probe.id() as i32, libc::SIGTERM) };
    };
    if !attached {
        let _ = probe.kill();
        let _ = probe.wait();
        bail!(
            "rip-probe leaks never opened its window: {}",
            notes.last().map_or("", String::as_str)
        );
    }
    for _ in 0..HEAP_ROUNDS {
        writeln!(stdin, "go")?;
        stdin.flush()?;
        if let Err(e) = expect("done") {
            stop(&mut probe);
            let _ = probe.wait();
            return Err(e);
        }
    }
    stop(&mut probe);
    let deadline = Instant::now() + CMD_TIMEOUT;
    let status = loop {
        if let Some(s) = probe.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = probe.kill();
            let _ = probe.wait();
            bail!("rip-probe leaks did not end in {CMD_TIMEOUT:?} after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    notes.extend(errs.try_iter());
    for l in notes
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("rip-probe timing: "))
    {
        println!("RIPNOTE leaks {l}");
    }
    ensure!(
        status.success(),
        "rip-probe leaks: {status}: {}",
        notes.last().map_or("", String::as_str)
    );
    let out = json.join().unwrap_or_default();
    let r = rip_tests::inline_stacks(
        serde_json::from_str(&out).context("rip-probe leaks --json: not JSON")?,
    );
    let heap = &r["traced"]["heap"];
    ensure!(heap.is_object(), "the heap was not traced: {}", r["traced"]);
    let lost = &r["lost"];
    ensure!(
        lost["events"] == 0 && lost["heap_calls"] == 0,
        "events lost: {lost}"
    );
    let mut found = Vec::new();
    for (func, call, count, bytes) in HEAP_LEAKS {
        let under = heap_under(&r, func)?;
        let (n, b) = count_and_bytes(&under);
        ensure!(
            (n, b) == (count * HEAP_ROUNDS, count * bytes * HEAP_ROUNDS),
            "under {func}: {n} blocks, {b} bytes; {} and {} lost",
            count * HEAP_ROUNDS,
            count * bytes * HEAP_ROUNDS
        );
        ensure!(
            under.iter().all(|s| s["call"] == call),
            "{func}'s blocks not all from {call}"
        );
        found.push(format!("{n} from {func} ({call})"));
    }
    ensure!(
        heap_under(&r, "balanced_heap")?.is_empty(),
        "a false leak under balanced_heap"
    );
    Ok(format!(
        "{} through {}: {}, none under balanced_heap, {} allocator calls followed",
        heap["name"].as_str().unwrap_or("?"),
        heap["functions"].as_array().map_or(0, Vec::len),
        found.join(", "),
        heap["calls"].as_u64().unwrap_or(0)
    ))
}

/// The heap's stacks of a `rip-probe leaks --json` report (stacks inlined)
/// that have `function` among their frames.
fn heap_under<'a>(report: &'a Value, function: &str) -> Result<Vec<&'a Value>> {
    Ok(report["stacks"]
        .as_array()
        .context("no stacks")?
        .iter()
        .filter(|s| s["kind"] == "heap")
        .filter(|s| {
            s["frames"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["function"] == function))
        })
        .collect())
}

/// The blocks and bytes of `stacks`, added up.
fn count_and_bytes(stacks: &[&Value]) -> (u64, u64) {
    let sum = |key: &str| stacks.iter().filter_map(|s| s[key].as_u64()).sum();
    (sum("count"), sum("bytes"))
}

/// `rip-probe calls`: its uprobe and uretprobe programs load on this
/// kernel, and the workers' calls of `worker_wait` (a 200 ms poll each)
/// are counted and timed.
fn check_calls(paths: &Paths) -> Result<String> {
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("2"))?;
    let v = probe_json(
        paths,
        "calls",
        &[
            "calls",
            "--pid",
            &w.pid().to_string(),
            "--uprobe",
            "worker_wait",
            "--duration",
            "2s",
            "--json",
        ],
    )?;
    let f = &v["functions"][0];
    ensure!(
        f["function"] == "worker_wait",
        "functions: {}",
        v["functions"]
    );
    let calls = f["calls"].as_u64().unwrap_or(0);
    let timed = f["timed"].as_u64().unwrap_or(0);
    // Two workers, one call each per 200 ms: about 20 in 2 s.
    ensure!((4..=40).contains(&calls), "{calls} calls of worker_wait");
    ensure!(timed >= 2, "{timed} of {calls} calls timed");
    let min = f["min_ns"].as_u64().unwrap_or(0);
    ensure!(
        (100_000_000..1_000_000_000).contains(&min),
        "shortest worker_wait {min} ns, its poll waits 200 ms"
    );
    Ok(format!(
        "{calls} calls of worker_wait, {timed} timed, shortest {} ms",
        min / 1_000_000
    ))
}

/// `rip-probe locks`: the futex programs (the build this kernel gets) load,
/// count over a window and detach.
fn check_locks(paths: &Paths) -> Result<String> {
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("2"))?;
    let v = probe_json(
        paths,
        "locks",
        &[
            "locks",
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "1s",
            "--json",
        ],
    )?;
    ensure!(v["locks"].is_array(), "no locks array: {v}");
    let window = v["window_ns"].as_u64().unwrap_or(0);
    ensure!(window >= 900_000_000, "window {window} ns");
    Ok(format!(
        "{} futex words counted over {} ms",
        v["locks"].as_array().map_or(0, Vec::len),
        window / 1_000_000
    ))
}

/// `rip-probe offcpu`: the off-CPU program (the build this kernel gets)
/// loads, and the workers' time off the CPU is found under `worker_wait`
/// (a 200 ms poll), unwound from the binary's CFI.
fn check_offcpu(paths: &Paths) -> Result<String> {
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("2"))?;
    let v = probe_json(
        paths,
        "offcpu",
        &[
            "offcpu",
            "--pid",
            &w.pid().to_string(),
            "--duration",
            "2s",
            "--json",
        ],
    )?;
    let window = v["window_ns"].as_u64().unwrap_or(0);
    ensure!(window >= 1_900_000_000, "window {window} ns");
    let stacks = v["stacks"].as_array().cloned().unwrap_or_default();
    let in_wait: u64 = stacks
        .iter()
        .filter(|s| {
            s["frames"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["function"] == "worker_wait"))
        })
        .map(|s| s["off_cpu_ns"].as_u64().unwrap_or(0))
        .sum();
    // Two workers, each in poll nearly all the time.
    ensure!(
        in_wait >= window * 3 / 2,
        "{} ms under worker_wait in a {} ms window: {} stacks",
        in_wait / 1_000_000,
        window / 1_000_000,
        stacks.len()
    );
    Ok(format!(
        "{} ms off CPU under worker_wait in {} ms, {} stacks",
        in_wait / 1_000_000,
        window / 1_000_000,
        stacks.len()
    ))
}

/// `switch`: which sched_switch program this kernel takes, for `--pid`
/// and for `offcpu` (`RIP_PROBE_TIMING=1` names it): the BTF-typed one,
/// or a raw one with the kernel's reason. Both commands must make the same
/// choice (their BTF-typed programs need the same of the kernel), and
/// each window must still report the workload's threads.
fn check_switch(paths: &Paths) -> Result<String> {
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("2"))?;
    let pid = w.pid().to_string();
    let mut chosen = Vec::new();
    for args in [
        &["--pid", &pid, "--duration", "1s", "--json"][..],
        &["offcpu", "--pid", &pid, "--duration", "1s", "--json"][..],
    ] {
        let (code, out, err) = run(Command::new(&paths.probe)
            .args(args)
            .env("RIP_PROBE_TIMING", "1"))?;
        ensure!(
            code == 0,
            "rip-probe {} exited {code}: {}",
            args.join(" "),
            err.lines().last().unwrap_or("")
        );
        let v: Value = serde_json::from_str(&out)
            .with_context(|| format!("rip-probe {}: not JSON", args.join(" ")))?;
        ensure!(
            v["window_ns"].as_u64().unwrap_or(0) >= 900_000_000,
            "rip-probe {}: window {}",
            args.join(" "),
            v["window_ns"]
        );
        let program = err
            .lines()
            .find_map(|l| l.strip_prefix("rip-probe timing: sched_switch program: "))
            .with_context(|| {
                format!("rip-probe {} named no sched_switch program", args.join(" "))
            })?;
        let name = program.split(' ').next().unwrap_or_default();
        let btf = [names::SCHED_SWITCH_BTF, offcpu_names::OFFCPU_SWITCH_BTF].contains(&name);
        let raw = [
            names::SCHED_SWITCH,
            names::SCHED_SWITCH_KSTACK,
            offcpu_names::OFFCPU_SWITCH,
            offcpu_names::OFFCPU_SWITCH_KSTACK,
        ]
        .contains(&name);
        ensure!(btf || raw, "unknown sched_switch program {program:?}");
        ensure!(
            btf || program.contains('('),
            "{name} loaded with no reason given for the fallback: {program:?}"
        );
        // Said as a note too: the matrix lists notes, not what passed.
        println!("RIPNOTE switch {} runs {program}", args[0]);
        chosen.push((btf, program.to_string()));
    }
    ensure!(
        chosen[0].0 == chosen[1].0,
        "--pid and offcpu chose differently: {:?}",
        chosen
    );
    Ok(format!("--pid {}; offcpu {}", chosen[0].1, chosen[1].1))
}

/// `bounds`: blocked times are true. A vm_stuck looked at as soon as it is
/// ready: no thread is blocked longer than the time since it was started
/// (its threads' age), and each time says how it was obtained. Then
/// workers that wait at most 200 ms at a time in poll, looked at after
/// 2 s windows: none is claimed blocked for anything near the window.
fn check_bounds(paths: &Paths) -> Result<String> {
    let ring = paths
        .dir
        .join(format!("vm-bounds.{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&ring);
    let born = Instant::now();
    let v = start_stuck(paths, &ring).and_then(|w| {
        probe_json(
            paths,
            "bounds",
            &["--pid", &w.pid().to_string(), "--duration", "0", "--json"],
        )
    });
    let age = born.elapsed().as_nanos() as u64;
    let _ = std::fs::remove_file(&ring);
    let v = v?;
    let blocked: Vec<&Value> = v["threads"]
        .as_array()
        .context("no threads array")?
        .iter()
        .filter(|t| !t["blocked"].is_null())
        .collect();
    ensure!(!blocked.is_empty(), "no blocked thread in a fresh vm_stuck");
    for t in &blocked {
        let b = &t["blocked"];
        let source = b["source"].as_str().unwrap_or_default();
        ensure!(
            ["switch", "window", "task_clock", "none"].contains(&source)
                && b["exact"] == (source == "switch"),
            "blocked {b} says not how it was obtained: {t}"
        );
        let ns = b["ns"].as_u64().unwrap_or(u64::MAX);
        ensure!(
            ns <= age,
            "tid {} blocked {ns} ns in a process {age} ns old",
            t["tid"]
        );
    }
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("4"))?;
    let workers: Vec<u32> = w
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("worker ")?.trim().parse().ok())
        .collect();
    let mut longest = 0;
    for _ in 0..3 {
        let v = probe_json(
            paths,
            "bounds",
            &["--pid", &w.pid().to_string(), "--duration", "2s", "--json"],
        )?;
        for &tid in &workers {
            let ns = thread(&v, tid)?["blocked"]["ns"].as_u64().unwrap_or(0);
            ensure!(
                ns < 1_000_000_000,
                "worker {tid}, in 200 ms polls, reported blocked {ns} ns"
            );
            longest = longest.max(ns);
        }
    }
    Ok(format!(
        "{} fresh threads within their {} ms age; workers in 200 ms polls at most {} ms",
        blocked.len(),
        age / 1_000_000,
        longest / 1_000_000
    ))
}

/// Debian's busybox: a program nobody built for rip, static and stripped,
/// as distributions ship it. In the guests it is the one in the initramfs.
const BUSYBOX: &str = "/bin/busybox";

/// `foreign`: `rip-probe --pid` on `busybox sleep`, a stripped program we
/// did not write: blocked in a sleep for at least as long as we know, the
/// duration decoded, the location the user pc in busybox. The text report
/// goes to the log (`RIPTEXT`), to read as a user would.
fn check_foreign(paths: &Paths) -> Result<String> {
    // Before the spawn: an upper bound of the process's age.
    let spawned = Instant::now();
    let mut child = Command::new(BUSYBOX)
        .args(["sleep", "3600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {BUSYBOX} sleep"))?;
    let pid = child.id();
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while proc_syscall(pid, pid)
            .is_none_or(|n| n != libc::SYS_nanosleep && n != libc::SYS_clock_nanosleep)
        {
            ensure!(Instant::now() < deadline, "busybox sleep never slept");
            std::thread::sleep(Duration::from_millis(20));
        }
        let blocked_at = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let known = blocked_at.elapsed();
        let (code, out, err) = run(Command::new(&paths.probe).args([
            "--pid",
            &pid.to_string(),
            "--duration",
            "200ms",
        ]))?;
        ensure!(code == 0, "rip-probe --pid (text) exited {code}: {err}");
        for l in out.lines() {
            println!("RIPTEXT foreign {l}");
        }
        let v = probe_json(
            paths,
            "foreign",
            &["--pid", &pid.to_string(), "--duration", "200ms", "--json"],
        )?;
        let t = thread(&v, pid)?;
        ensure!(t["state"] == "sleeping", "state {}: {t}", t["state"]);
        let name = t["syscall"]["name"].as_str().unwrap_or_default();
        ensure!(name.ends_with("nanosleep"), "syscall {name:?}: {t}");
        let text = t["syscall"]["text"].as_str().unwrap_or_default();
        ensure!(
            text.contains("1h00m"),
            "sleep duration not decoded: {text:?}"
        );
        // What rip claims, held to what is known: exact, at least as long
        // as we watched it sleep; a lower bound (it slept before the
        // attach, so sched_switch never saw it go), at least the window it
        // was watched in without switching, and said with "≥" in the text.
        // Either way never more than the process has existed.
        let since_spawn = spawned.elapsed().as_nanos() as u64;
        let ns = t["blocked"]["ns"].as_u64().unwrap_or(0);
        ensure!(
            ns <= since_spawn,
            "blocked {ns} ns > its age {since_spawn} ns: {t}"
        );
        if t["blocked"]["exact"] == true {
            ensure!(
                ns >= known.as_nanos() as u64,
                "blocked (exact) {ns} ns < known {known:?}"
            );
        } else {
            ensure!(
                ns >= 200_000_000,
                "blocked ≥{ns} ns, less than the 200 ms window it was watched sleeping in: {t}"
            );
            ensure!(
                out.contains('≥'),
                "the text does not say the blocked time is a lower bound"
            );
        }
        let module = t["location"]["frame"]["module"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            module.ends_with("busybox"),
            "location not in busybox: {}",
            t["location"]
        );
        Ok(format!(
            "busybox sleep: {text}, blocked ≥{:.1}s",
            known.as_secs_f64()
        ))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The process whose parent is `ppid` (the first found).
fn child_of(ppid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the parenthesised name: state, then ppid.
        let parent: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (parent == ppid).then_some(pid)
    })
}

/// `pidns`: rip-probe inside the pid and mount namespaces of its target (as
/// a debug container sharing them): vm_stuck is pid 1 of a namespace made
/// by `unshare`, rip-probe is run there by `nsenter`, and the report's pid
/// and tids are the namespace's (those the workload prints), each role in
/// its syscall.
fn check_pidns(paths: &Paths) -> Result<String> {
    let ring = paths
        .dir
        .join(format!("vm-stuck-ns.{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&ring);
    let w = Workload::start(
        Command::new(BUSYBOX)
            .args(["unshare", "--pid", "--fork", "--mount-proc", "--"])
            .arg(&paths.stuck)
            .arg(&ring),
    )?;
    let result = (|| {
        let inside = child_of(w.pid()).context("no process under unshare")?;
        let mut tries = 0;
        loop {
            tries += 1;
            let (code, out, err) = run(Command::new(BUSYBOX)
                .args(["nsenter", "-t", &inside.to_string(), "-p", "-m", "--"])
                .arg(&paths.probe)
                .args(["--pid", "1", "--duration", "300ms", "--json"]))?;
            for l in err.lines().filter(|l| !l.trim().is_empty()) {
                println!("RIPNOTE pidns {l}");
            }
            ensure!(
                code == 0,
                "rip-probe exited {code}: {}",
                err.lines().last().unwrap_or("")
            );
            let v: Value = serde_json::from_str(&out).context("not JSON")?;
            ensure!(v["process"]["pid"] == 1, "process {}", v["process"]);
            let blocked = ROLES.iter().try_fold(0, |n, r| {
                let tid = w.tid(r.name)?;
                let t = thread(&v, tid)?;
                let name = t["syscall"]["name"].as_str().unwrap_or_default();
                let ok = t["state"] == "sleeping" && r.syscalls.iter().any(|s| s.0 == name);
                ensure!(
                    ok || tries < 5,
                    "{} ({tid}) not blocked in {:?}: {t}",
                    r.name,
                    r.syscalls
                );
                anyhow::Ok(n + usize::from(ok))
            })?;
            if blocked == ROLES.len() {
                check_snap(thread(&v, w.tid("sleeper")?)?, "sleeper")?;
                let n = v["threads"].as_array().map_or(0, Vec::len);
                return Ok(format!(
                    "pid 1 and {n} threads by the namespace's ids, {} roles in their syscalls",
                    ROLES.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    })();
    // busybox unshare does not kill its child when killed: the namespace's
    // init first, which ends everything in it.
    if let Some(inside) = child_of(w.pid()) {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(inside as i32, libc::SIGKILL) };
    }
    drop(w);
    let _ = std::fs::remove_file(&ring);
    result
}

/// `cleanup`: rip-probe SIGKILLed while attached leaves no program, link
/// or uprobe event behind.
fn check_cleanup(paths: &Paths) -> Result<String> {
    let progs_before = bpf::ids(bpf::PROG_GET_NEXT_ID)?;
    let links_before = bpf::ids(bpf::LINK_GET_NEXT_ID)?;
    let events_before = uprobe_events();
    let w = Workload::start(Command::new(&paths.uninstrumented).arg("1"))?;
    let stderr_path = paths.dir.join("cleanup-rip-probe.stderr");
    let mut probe = Command::new(&paths.probe)
        .args(["--pid", &w.pid().to_string(), "--duration", "120s"])
        .args(["--uprobe", "worker_*"])
        .stdout(Stdio::null())
        // A file, not a pipe: nobody reads it while rip-probe runs.
        .stderr(std::fs::File::create(&stderr_path)?)
        .spawn()
        .context("cannot start rip-probe")?;
    // Ours: programs with our names loaded since the baseline, and links to them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (progs, links) = loop {
        let progs: BTreeSet<u32> = bpf::ids(bpf::PROG_GET_NEXT_ID)?
            .difference(&progs_before)
            .copied()
            .filter(|&id| bpf::prog_name(id).is_some_and(|n| OUR_PROGS.contains(&n.as_str())))
            .collect();
        let links: BTreeSet<u32> = bpf::ids(bpf::LINK_GET_NEXT_ID)?
            .difference(&links_before)
            .copied()
            .filter(|&id| bpf::link_prog(id).is_some_and(|p| progs.contains(&p)))
            .collect();
        // sched_switch and fn_entry at least (task_iter comes and goes).
        if progs.len() >= 2 && uprobe_attached(&w) {
            break (progs, links);
        }
        if let Some(s) = probe.try_wait()? {
            let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            bail!(
                "rip-probe exited ({s}) before attaching: {}",
                err.lines().last().unwrap_or("")
            );
        }
        if Instant::now() > deadline {
            let _ = probe.kill();
            let _ = probe.wait();
            bail!("rip-probe never attached in 60 s: our programs {progs:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    probe.kill()?;
    probe.wait()?;
    // The kernel frees programs after their last fd closes and an RCU grace period.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p: Vec<u32> = bpf::ids(bpf::PROG_GET_NEXT_ID)?
            .intersection(&progs)
            .copied()
            .collect();
        let l: Vec<u32> = bpf::ids(bpf::LINK_GET_NEXT_ID)?
            .intersection(&links)
            .copied()
            .collect();
        if p.is_empty() && l.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "10 s after SIGKILL: programs {p:?}, links {l:?} remain"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let events = uprobe_events();
    ensure!(
        events == events_before,
        "uprobe_events changed: {:?}",
        one_line(&events)
    );
    ensure!(
        w.child.id() > 0 && std::fs::metadata(format!("/proc/{}", w.pid())).is_ok(),
        "the target died with rip-probe"
    );
    Ok(format!(
        "{} programs and {} links attached, none left after SIGKILL",
        progs.len(),
        links.len()
    ))
}

fn uprobe_events() -> String {
    std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default()
}

/// Whether a uprobe has hit in `w`: the kernel maps the `[uprobes]`
/// out-of-line page into a process at its first hit (and keeps it, so this
/// only tells that attaching happened).
fn uprobe_attached(w: &Workload) -> bool {
    std::fs::read_to_string(format!("/proc/{}/maps", w.pid()))
        .is_ok_and(|m| m.contains("[uprobes]"))
}

/// `dmesg`: the kernel logged no warning, bug or oops (during the suite
/// when `start` is the last sequence number before it; ever when `None`).
fn check_dmesg(start: Option<u64>) -> Result<String> {
    let records = kmsg_since(start)?;
    let bad: Vec<&String> = records
        .iter()
        .filter(|m| {
            ["WARNING", "BUG", "Call Trace", "Oops"]
                .iter()
                .any(|w| m.contains(w))
        })
        .collect();
    ensure!(
        bad.is_empty(),
        "kernel log: {}",
        one_line(&bad[0].to_string())
    );
    let scope = if start.is_some() {
        "during the suite"
    } else {
        "since boot"
    };
    Ok(format!(
        "{} kernel messages {scope}, none bad",
        records.len()
    ))
}

/// Records of /dev/kmsg with a sequence number above `start` (all: `None`).
fn kmsg_since(start: Option<u64>) -> Result<Vec<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .context("open /dev/kmsg")?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]).into_owned();
                // "prio,seq,time,flags;message"
                let seq = rec
                    .split(',')
                    .nth(1)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                if start.is_none_or(|s| seq > s) {
                    let msg = rec.split_once(';').map_or(rec.as_str(), |m| m.1);
                    out.push(msg.lines().next().unwrap_or("").to_string());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // The oldest records were overwritten while we read: go on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) => return Err(e).context("read /dev/kmsg"),
        }
    }
    Ok(out)
}

/// The last sequence number in the kernel log now (so only what the suite
/// causes is checked); 0 when there is none.
fn kmsg_last_seq() -> u64 {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
    else {
        return 0;
    };
    let mut last = 0;
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(n) if n > 0 => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                if let Some(s) = rec.split(',').nth(1).and_then(|s| s.parse().ok()) {
                    last = s;
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            _ => return last,
        }
    }
}

/// The few bpf(2) commands the cleanup check needs, without a BPF library:
/// ids of loaded programs and links, a program's name, a link's program.
mod bpf {
    use std::collections::BTreeSet;

    use anyhow::{Result, bail};

    pub const PROG_GET_NEXT_ID: u32 = 11;
    pub const LINK_GET_NEXT_ID: u32 = 31;
    const PROG_GET_FD_BY_ID: u32 = 13;
    const OBJ_GET_INFO_BY_FD: u32 = 15;
    const LINK_GET_FD_BY_ID: u32 = 30;

    fn bpf(cmd: u32, attr: &mut [u64; 16]) -> i64 {
        // SAFETY: attr is a zeroed 128-byte buffer, larger than any union
        // member these commands read or write, and outlives the call.
        unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                attr.as_mut_ptr(),
                std::mem::size_of_val(attr),
            )
        }
    }

    /// All ids `cmd` (a `*_GET_NEXT_ID`) walks through.
    pub fn ids(cmd: u32) -> Result<BTreeSet<u32>> {
        let mut out = BTreeSet::new();
        let mut id = 0u32;
        loop {
            let mut attr = [0u64; 16];
            attr[0] = u64::from(id); // start_id; next_id is the next u32
            if bpf(cmd, &mut attr) < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOENT) {
                    return Ok(out);
                }
                bail!("bpf(GET_NEXT_ID): {e}");
            }
            id = (attr[0] >> 32) as u32;
            out.insert(id);
        }
    }

    /// Info of the object `get_fd` (a `*_GET_FD_BY_ID`) opens for `id`.
    fn info(get_fd: u32, id: u32) -> Option<[u8; 128]> {
        let mut attr = [0u64; 16];
        attr[0] = u64::from(id);
        let fd = bpf(get_fd, &mut attr);
        if fd < 0 {
            return None;
        }
        let mut info = [0u8; 128];
        let mut attr = [0u64; 16];
        // bpf_fd, info_len, info pointer.
        attr[0] = (fd as u64) | ((info.len() as u64) << 32);
        attr[1] = info.as_mut_ptr() as u64;
        let r = bpf(OBJ_GET_INFO_BY_FD, &mut attr);
        // SAFETY: fd is the descriptor the kernel just gave us.
        unsafe { libc::close(fd as i32) };
        (r == 0).then_some(info)
    }

    /// A program's name (bpf_prog_info.name, at offset 64), if it still exists.
    pub fn prog_name(id: u32) -> Option<String> {
        let info = info(PROG_GET_FD_BY_ID, id)?;
        let name = &info[64..80];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some(String::from_utf8_lossy(&name[..end]).into_owned())
    }

    /// The program a link points at (bpf_link_info.prog_id, at offset 8).
    pub fn link_prog(id: u32) -> Option<u32> {
        let info = info(LINK_GET_FD_BY_ID, id)?;
        Some(u32::from_ne_bytes(info[8..12].try_into().ok()?))
    }
}
