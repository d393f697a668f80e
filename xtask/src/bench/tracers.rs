//! The tracers attached beside a workload: bpftrace, rip-probe, an LTTng
//! session, gdb. Each waits until it is really attached before the
//! workload is told to go, and is stopped (by its pid) afterwards.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use super::proc::{Proc, Sample, parse_sample, shell_words, wait_idle};
use crate::util::output;

/// rip-probe counts as settled after attaching once its CPU time stops
/// growing for this long.
pub const RIP_PROBE_QUIET: Duration = Duration::from_millis(200);

/// How long a tracer may take to attach.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// The bpftrace program for `probes` (which may name `{pid}` and `{exe}`):
/// a BEGIN probe that says `attached` (bpftrace runs BEGIN once every
/// probe is attached) and the probes themselves.
pub fn bpftrace_program(probes: &str, pid: &str, exe: &str) -> String {
    format!(
        "BEGIN {{ printf(\"attached\\n\"); }} {}",
        probes.replace("{pid}", pid).replace("{exe}", exe)
    )
}

/// The bpftrace command line for `probes` on process `pid` running `exe`.
pub fn bpftrace_args(probes: &str, pid: &str, exe: &str) -> Vec<String> {
    vec![
        "bpftrace".into(),
        "-p".into(),
        pid.into(),
        "-e".into(),
        bpftrace_program(probes, pid, exe),
    ]
}

/// bpftrace attached to a process.
pub struct Bpftrace(Proc);

impl Bpftrace {
    /// Starts bpftrace with `probes` (which count their hits in `@hits`)
    /// on `pid` running `exe` and waits until it has attached.
    pub fn attach(probes: &str, pid: u32, exe: &Path) -> Result<Bpftrace> {
        let args = bpftrace_args(probes, &pid.to_string(), &exe.to_string_lossy());
        let mut p = Proc::start(&args, &[])?;
        let attached = p
            .stdout
            .as_mut()
            .expect("piped")
            .wait_for(ATTACH_TIMEOUT, |l| l == "attached");
        if let Err(e) = attached {
            let err = p
                .stderr
                .as_mut()
                .expect("piped")
                .drain(Duration::from_secs(1));
            bail!("bpftrace did not attach: {e:#}; stderr: {err:?}");
        }
        Ok(Bpftrace(p))
    }

    /// Stops bpftrace (SIGINT, so it prints its maps) and returns the count
    /// in `@hits`.
    pub fn finish(mut self) -> Result<u64> {
        self.0.signal(libc::SIGINT);
        let lines = self
            .0
            .stdout
            .as_mut()
            .expect("piped")
            .drain(Duration::from_secs(30));
        let hits = lines.iter().find_map(|l| parse_map_count(l, "@hits"));
        self.0.wait_or_kill(Duration::from_secs(5));
        hits.context("bpftrace printed no @hits")
    }
}

/// Parses bpftrace's `@name: N` map line.
pub fn parse_map_count(line: &str, name: &str) -> Option<u64> {
    line.strip_prefix(name)?
        .strip_prefix(':')?
        .trim()
        .parse()
        .ok()
}

/// The rip-probe command line watching `pid` (with an uprobe on `uprobe`).
pub fn rip_probe_args(exe: &str, pid: &str, uprobe: Option<&str>) -> Vec<String> {
    let mut a = vec![
        exe.to_string(),
        "--pid".into(),
        pid.to_string(),
        "--duration".into(),
        "600s".into(),
    ];
    if let Some(f) = uprobe {
        a.extend(["--uprobe".into(), f.into()]);
    }
    a
}

/// The `rip-probe` command line taking one snapshot of `pid`, with no
/// window: nothing attached while the target runs.
pub fn rip_probe_snapshot_args(exe: &str, pid: &str) -> Vec<String> {
    [exe, "--pid", pid, "--duration", "0", "--json"]
        .map(String::from)
        .to_vec()
}

/// Snapshots of a process taken one after the other
/// ([`rip_probe_snapshot_args`]) until stopped, on the machine's last CPU:
/// the workloads that measure overhead run on the first, so what they
/// lose is what looking at them costs, not a CPU shared with rip-probe.
pub struct RipProbeSnapshots {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    taking: std::thread::JoinHandle<Result<u64, String>>,
}

impl RipProbeSnapshots {
    /// Takes one snapshot of `pid` (so that a failure stops the row
    /// before it is measured), then keeps taking them on another thread.
    pub fn start(exe: &Path, pid: u32) -> Result<RipProbeSnapshots> {
        let args = rip_probe_snapshot_args(&exe.to_string_lossy(), &pid.to_string());
        let cpu = std::thread::available_parallelism().map_or(0, |n| n.get() - 1);
        snapshot(&args, cpu).map_err(anyhow::Error::msg)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let taking = std::thread::spawn(move || {
            let mut n = 1;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                snapshot(&args, cpu)?;
                n += 1;
            }
            Ok(n)
        });
        Ok(RipProbeSnapshots { stop, taking })
    }

    /// Stops after the snapshot under way; returns how many were taken.
    pub fn finish(self) -> Result<u64, String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.taking
            .join()
            .map_err(|_| "the snapshot loop panicked".to_string())?
    }
}

/// Runs one snapshot command `args` on CPU `cpu`.
fn snapshot(args: &[String], cpu: usize) -> Result<(), String> {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    super::proc::pin_to_cpu(&mut cmd, cpu);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", args[0]))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            shell_words(args),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The `rip-probe locks` command line counting `pid`'s futex contention
/// for longer than any run.
pub fn rip_probe_locks_args(exe: &str, pid: &str) -> Vec<String> {
    [exe, "locks", "--pid", pid, "--duration", "600s"]
        .map(String::from)
        .to_vec()
}

/// The `rip-probe offcpu` command line observing `pid` for longer than
/// any run, with kernel stacks (what offcputime takes too) when `kernel`,
/// folded stacks out.
pub fn rip_probe_offcpu_args(exe: &str, pid: &str, kernel: bool) -> Vec<String> {
    let mut a: Vec<String> = [exe, "offcpu", "--pid", pid, "--duration", "600s"]
        .map(String::from)
        .to_vec();
    if kernel {
        a.push("--kernel-stacks".into());
    }
    a.push("--folded".into());
    a
}

/// BCC's `offcputime` (libbpf-tools) on `pid` for longer than any run
/// (user and kernel stacks; this build has no folded output).
pub fn offcputime_args(pid: &str) -> Vec<String> {
    ["offcputime", "-p", pid, "600"].map(String::from).to_vec()
}

/// Whether process `pid` holds a BPF link (its programs are attached).
fn holds_bpf_link(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf_link")
            })
        })
        .unwrap_or(false)
}

/// BCC's offcputime attached to a process.
pub struct Offcputime(Proc);

impl Offcputime {
    /// Starts `offcputime -p PID 600` and waits until its programs are
    /// attached (it says nothing until the end: its BPF link is the sign)
    /// and it has settled.
    pub fn attach(pid: u32) -> Result<Offcputime> {
        let mut p = Proc::start(&offcputime_args(&pid.to_string()), &[])?;
        let start = std::time::Instant::now();
        while !holds_bpf_link(p.pid()) {
            if start.elapsed() > ATTACH_TIMEOUT {
                let err = p
                    .stderr
                    .as_mut()
                    .expect("piped")
                    .drain(Duration::from_secs(1));
                bail!("offcputime did not attach: {err:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(Offcputime(p))
    }

    /// Stops offcputime (SIGINT: it prints its stacks and exits).
    pub fn finish(mut self) -> Result<(), String> {
        self.0.signal(libc::SIGINT);
        if self.0.wait_or_kill(Duration::from_secs(20)) {
            Ok(())
        } else {
            Err("offcputime did not exit after SIGINT".into())
        }
    }
}

/// rip-probe's CLI attached to a process.
pub struct RipProbe(Proc);

/// `env` with rip-probe's phase timings on (the attach is waited for by
/// its line).
fn with_timing<'a>(env: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![("RIP_PROBE_TIMING", "1")];
    all.extend_from_slice(env);
    all
}

impl RipProbe {
    /// Starts `rip-probe locks --pid PID --duration 600s` with its phase
    /// timings on, and waits until its futex programs are attached and it
    /// has settled.
    pub fn attach_locks(exe: &Path, pid: u32) -> Result<RipProbe> {
        let args = rip_probe_locks_args(&exe.to_string_lossy(), &pid.to_string());
        let mut p = Proc::start(&args, &[("RIP_PROBE_TIMING", "1")])?;
        p.stderr
            .as_mut()
            .expect("piped")
            .wait_for(ATTACH_TIMEOUT, |l| {
                l.starts_with("rip-probe timing: load and attach:")
            })
            .context("rip-probe locks did not attach")?;
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbe(p))
    }

    /// Starts `rip-probe offcpu --pid PID --duration 600s
    /// [--kernel-stacks] --folded` with its phase timings on (and `env`),
    /// and waits until its program is attached and it has settled.
    pub fn attach_offcpu(
        exe: &Path,
        pid: u32,
        kernel: bool,
        env: &[(&str, &str)],
    ) -> Result<RipProbe> {
        let args = rip_probe_offcpu_args(&exe.to_string_lossy(), &pid.to_string(), kernel);
        let mut p = Proc::start(&args, &with_timing(env))?;
        p.stderr
            .as_mut()
            .expect("piped")
            .wait_for(ATTACH_TIMEOUT, |l| {
                l.starts_with("rip-probe timing: attach offcpu:")
            })
            .context("rip-probe offcpu did not attach")?;
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbe(p))
    }

    /// Starts `rip-probe --pid PID [--uprobe F] --duration 600s` with its
    /// phase timings on (and `env`), and waits for the line saying its
    /// programs are attached.
    pub fn attach(
        exe: &Path,
        pid: u32,
        uprobe: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<RipProbe> {
        let args = rip_probe_args(&exe.to_string_lossy(), &pid.to_string(), uprobe);
        let mut p = Proc::start(&args, &with_timing(env))?;
        let phase = if uprobe.is_some() {
            "rip-probe timing: attach uprobes:"
        } else {
            "rip-probe timing: load and attach:"
        };
        p.stderr
            .as_mut()
            .expect("piped")
            .wait_for(ATTACH_TIMEOUT, |l| l.starts_with(phase))
            .context("rip-probe did not attach")?;
        // Right after attaching, rip-probe parses the kernel's BTF on a
        // second thread (a fraction of a second of CPU): the workload
        // starts once that start-up work is over.
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbe(p))
    }

    /// Starts `rip-bench-uprobe PID FUNCTION` (rip-probe's library,
    /// nobody reading the events) and waits until it has attached and
    /// settled.
    pub fn attach_library(exe: &Path, pid: u32, function: &str) -> Result<RipProbe> {
        Self::start_library(exe, &[pid.to_string(), function.into()])
    }

    /// Attaches floor program `name` on sched_switch through
    /// `rip-bench-uprobe --switch-floor` and waits until it is attached.
    pub fn attach_switch_floor(exe: &Path, name: &str) -> Result<RipProbe> {
        Self::start_library(exe, &["--switch-floor".into(), name.into()])
    }

    /// Starts `rip-bench-uprobe ARGS` and waits for its `attached` line
    /// and for it to settle.
    fn start_library(exe: &Path, args: &[String]) -> Result<RipProbe> {
        let mut argv = vec![exe.to_string_lossy().into_owned()];
        argv.extend_from_slice(args);
        let mut p = Proc::start(&argv, &[])?;
        p.stdout
            .as_mut()
            .expect("piped")
            .wait_for(ATTACH_TIMEOUT, |l| l.starts_with("attached "))
            .with_context(|| format!("rip-bench-uprobe {} did not attach", args.join(" ")))?;
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbe(p))
    }

    /// Detaches the library's probes (they live as long as the process).
    pub fn kill(mut self) {
        self.0.signal(libc::SIGKILL);
        self.0.wait_or_kill(Duration::from_secs(5));
    }

    /// Waits for rip-probe to notice the workload's exit and report
    /// (killing it if it does not); on an unclean exit, says what it
    /// printed last.
    pub fn finish(mut self) -> Result<(), String> {
        if self.0.wait_or_kill(Duration::from_secs(20)) {
            return Ok(());
        }
        let err = self.0.stderr.as_mut().expect("piped");
        err.drain(Duration::from_secs(1));
        let last = err
            .seen
            .iter()
            .rfind(|l| !l.starts_with("rip-probe timing:"))
            .map_or("nothing on stderr".to_string(), |l| format!("`{l}`"));
        Err(format!(
            "rip-probe did not exit cleanly after the workload: {last}"
        ))
    }
}

/// A session daemon for LTTng: the one already running, or one started
/// here (stopped on drop).
pub struct LttngDaemon(Option<Proc>);

impl LttngDaemon {
    /// Finds or starts `lttng-sessiond` (user space only).
    pub fn ensure() -> Result<LttngDaemon> {
        let running = || output(Command::new("lttng").args(["--no-sessiond", "list"])).is_some();
        if running() {
            return Ok(LttngDaemon(None));
        }
        let mut p = Proc::start(&["lttng-sessiond".into(), "--no-kernel".into()], &[])?;
        for _ in 0..100 {
            if running() {
                return Ok(LttngDaemon(Some(p)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let err = p
            .stderr
            .as_mut()
            .expect("piped")
            .drain(Duration::from_secs(1));
        bail!("lttng-sessiond did not start: {:?}", err.last())
    }

    /// Whether this bench started the daemon.
    pub fn started_here(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for LttngDaemon {
    fn drop(&mut self) {
        if let Some(p) = &mut self.0 {
            p.signal(libc::SIGTERM);
            p.wait_or_kill(Duration::from_secs(10));
        }
    }
}

/// The commands that set up the snapshot-mode session `name`.
pub fn lttng_setup(name: &str) -> [Vec<String>; 3] {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    [
        v(&["lttng", "create", name, "--snapshot"]),
        v(&["lttng", "enable-event", "-u", "rip_bench:*", "-s", name]),
        v(&["lttng", "start", name]),
    ]
}

/// A snapshot-mode LTTng session with the loop's events enabled,
/// destroyed on drop.
pub struct LttngSession(String);

impl LttngSession {
    /// Creates, configures and starts session `name`.
    pub fn start(name: &str) -> Result<LttngSession> {
        let session = LttngSession(name.to_string());
        for cmd in lttng_setup(name) {
            let out = Command::new(&cmd[0])
                .args(&cmd[1..])
                .output()
                .context("running lttng")?;
            if !out.status.success() {
                bail!(
                    "`{}` failed: {}",
                    shell_words(&cmd),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(session)
    }
}

impl Drop for LttngSession {
    fn drop(&mut self) {
        let _ = Command::new("lttng")
            .args(["destroy", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The gdb script that counts the hits of a breakpoint on `f`.
pub const GDB_SCRIPT: &str = "\
set pagination off
set confirm off
set $hits = 0
break f
commands
silent
set $hits = $hits + 1
continue
end
run
printf \"gdb hits %d\\n\", $hits
";

/// The gdb command line that runs `exe n` under [`GDB_SCRIPT`] at `script`.
pub fn gdb_args(script: &str, exe: &str, n: u64) -> Vec<String> {
    [
        "gdb",
        "-batch",
        "-nx",
        "-iex",
        "set debuginfod enabled off",
        "-x",
        script,
        "--args",
        exe,
        &n.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// Writes [`GDB_SCRIPT`] under `dir`.
pub fn write_gdb_script(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("count-f.gdb");
    std::fs::write(&p, GDB_SCRIPT).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// Runs `exe n` under gdb with a counting breakpoint on `f`; returns what
/// the program measured and gdb's count.
pub fn gdb_run(script: &Path, exe: &Path, n: u64, timeout: Duration) -> Result<(Sample, u64)> {
    let args = gdb_args(&script.to_string_lossy(), &exe.to_string_lossy(), n);
    let mut p = Proc::start(&args, &[])?;
    let out = p.stdout.as_mut().expect("piped");
    let hits = out
        .wait_for(timeout, |l| l.starts_with("gdb hits "))
        .context("gdb did not finish the loop")?;
    let sample = out.seen.iter().find_map(|l| parse_sample(l));
    p.wait_or_kill(Duration::from_secs(10));
    let hits = hits["gdb hits ".len()..]
        .trim()
        .parse()
        .context("gdb's count")?;
    Ok((
        sample.context("the program under gdb printed no measurement")?,
        hits,
    ))
}

/// The `rip-probe calls` command line counting `function` in `pid` (until
/// the process exits).
pub fn rip_probe_calls_args(exe: &str, pid: &str, function: &str) -> Vec<String> {
    [
        exe,
        "calls",
        "--pid",
        pid,
        "--uprobe",
        function,
        "--duration",
        "600s",
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// `rip-probe calls` attached to a process.
pub struct RipProbeCalls(Proc);

impl RipProbeCalls {
    /// Starts `rip-probe calls` with its phase timings on and waits until
    /// its probes are attached and it has settled.
    pub fn attach(exe: &Path, pid: u32, function: &str) -> Result<RipProbeCalls> {
        let args = rip_probe_calls_args(&exe.to_string_lossy(), &pid.to_string(), function);
        let mut p = Proc::start(&args, &[("RIP_PROBE_TIMING", "1")])?;
        p.stderr
            .as_mut()
            .expect("piped")
            .wait_for(Duration::from_secs(60), |l| {
                l.starts_with("rip-probe timing: attach uprobes:")
            })
            .context("rip-probe calls did not attach")?;
        wait_idle(p.pid(), RIP_PROBE_QUIET, Duration::from_secs(5));
        Ok(RipProbeCalls(p))
    }

    /// Waits for the report rip-probe writes when the workload exits; the
    /// calls it counted.
    pub fn finish(mut self) -> Result<u64> {
        let ok = self.0.wait_or_kill(Duration::from_secs(20));
        let out = self
            .0
            .stdout
            .as_mut()
            .expect("piped")
            .drain(Duration::from_secs(1))
            .join("\n");
        anyhow::ensure!(ok, "rip-probe calls did not exit cleanly: {out}");
        let v: serde_json::Value =
            serde_json::from_str(&out).context("rip-probe calls printed no JSON report")?;
        v["functions"][0]["calls"]
            .as_u64()
            .context("the report counts no calls")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpftrace_programs_say_when_attached() {
        let p = bpftrace_program(
            "uprobe:{exe}:f /pid == {pid}/ { @hits = count(); }",
            "42",
            "/l",
        );
        assert_eq!(
            p,
            "BEGIN { printf(\"attached\\n\"); } uprobe:/l:f /pid == 42/ { @hits = count(); }"
        );
        assert_eq!(bpftrace_args("x", "7", "e")[..3], ["bpftrace", "-p", "7"]);
    }

    #[test]
    fn bpftrace_maps() {
        assert_eq!(parse_map_count("@hits: 100000", "@hits"), Some(100_000));
        assert_eq!(parse_map_count("@hits_x: 1", "@hits"), None);
        assert_eq!(parse_map_count("@exits: 5", "@hits"), None);
        assert_eq!(parse_map_count("Attaching 2 probes...", "@hits"), None);
    }

    #[test]
    fn commands() {
        assert_eq!(
            shell_words(&gdb_args("s.gdb", "loop", 2000)),
            "gdb -batch -nx -iex 'set debuginfod enabled off' -x s.gdb --args loop 2000"
        );
        assert_eq!(
            shell_words(&rip_probe_args("rip-probe", "9", Some("f"))),
            "rip-probe --pid 9 --duration 600s --uprobe f"
        );
        assert_eq!(
            shell_words(&lttng_setup("s")[1]),
            "lttng enable-event -u 'rip_bench:*' -s s"
        );
    }
}
