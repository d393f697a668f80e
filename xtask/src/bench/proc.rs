//! Processes the bench drives: workloads that speak the protocol of
//! `tests/bench/bench.h` (`ready`, a line on stdin, `calls N elapsed_ns T`),
//! tracers running beside them, and one-shot commands whose wall time and
//! peak RSS are measured.

use std::{
    fs::File,
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// What a workload measured itself: `calls` calls (or operations) in
/// `elapsed_ns` of its own clock, startup and attach excluded, and the
/// involuntary context switches it suffered meanwhile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Calls made.
    pub calls: u64,
    /// Time the calls took, in ns.
    pub elapsed_ns: u64,
    /// Involuntary context switches of the process during the calls.
    pub nivcsw: u64,
}

impl Sample {
    /// Nanoseconds per call.
    pub fn per_call_ns(&self) -> f64 {
        self.elapsed_ns as f64 / self.calls.max(1) as f64
    }
}

/// Parses a workload's `calls N elapsed_ns T nivcsw K` line.
pub fn parse_sample(line: &str) -> Option<Sample> {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w[..] {
        ["calls", calls, "elapsed_ns", ns, "nivcsw", k] => Some(Sample {
            calls: calls.parse().ok()?,
            elapsed_ns: ns.parse().ok()?,
            nivcsw: k.parse().ok()?,
        }),
        _ => None,
    }
}

/// Lines of a child's stdout or stderr, read on a thread of their own so
/// that waiting for one can time out.
pub struct Lines {
    rx: Receiver<String>,
    /// Every line received so far.
    pub seen: Vec<String>,
}

impl Lines {
    /// Starts reading `stream`.
    pub fn read(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits up to `timeout` for a line satisfying `want`, returning it.
    /// Fails when the stream ends or time runs out first.
    pub fn wait_for(&mut self, timeout: Duration, want: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if want(&l) {
                        return Ok(l);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("no such line after {timeout:?}; got {:?}", self.tail())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("the stream ended; got {:?}", self.tail())
                }
            }
        }
    }

    /// Collects what is left until the stream ends (or `timeout`).
    pub fn drain(&mut self, timeout: Duration) -> &[String] {
        let deadline = Instant::now() + timeout;
        while let Ok(l) = self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(l);
        }
        &self.seen
    }

    /// The last lines seen, for error messages.
    pub fn tail(&self) -> Vec<&str> {
        let from = self.seen.len().saturating_sub(4);
        self.seen[from..].iter().map(String::as_str).collect()
    }
}

/// A child process killed (and reaped) when dropped, unless it was waited
/// for.
pub struct Proc {
    child: Child,
    /// Its stdout, when piped.
    pub stdout: Option<Lines>,
    /// Its stderr, when piped.
    pub stderr: Option<Lines>,
    done: bool,
}

impl Proc {
    /// Spawns `cmd`, reading whichever of stdout and stderr it pipes.
    pub fn spawn(cmd: &mut Command, what: &str) -> Result<Proc> {
        let mut child = cmd
            .spawn()
            .with_context(|| format!("{what}: cannot start {:?}", cmd.get_program()))?;
        let stdout = child.stdout.take().map(Lines::read);
        let stderr = child.stderr.take().map(Lines::read);
        Ok(Proc {
            child,
            stdout,
            stderr,
            done: false,
        })
    }

    /// Spawns the command line `args` (program first) with `env` added,
    /// stdin closed and stdout and stderr read as lines.
    pub fn start(args: &[String], env: &[(&str, &str)]) -> Result<Proc> {
        let mut cmd = Command::new(&args[0]);
        cmd.args(&args[1..])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Proc::spawn(&mut cmd, &args[0])
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to the process.
    pub fn signal(&self, sig: libc::c_int) {
        if !self.done {
            // SAFETY: kill has no memory preconditions; the pid is our
            // unreaped child, so it cannot name another process.
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        }
    }

    /// Waits up to `timeout` for the process to exit; kills it after that.
    /// Returns whether it exited successfully by itself.
    pub fn wait_or_kill(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    self.done = true;
                    return st.success();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.done = true;
        false
    }

    fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.child.stdin.as_mut()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A workload started with `--wait`, stopped before its measured part.
pub struct Waiting {
    proc: Proc,
}

impl Waiting {
    /// Starts `cmd` (which must include `--wait`) and waits for `ready`.
    pub fn start(mut cmd: Command) -> Result<Waiting> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut proc = Proc::spawn(&mut cmd, "workload")?;
        let out = proc.stdout.as_mut().expect("stdout is piped");
        out.wait_for(Duration::from_secs(30), |l| l == "ready")
            .with_context(|| format!("{cmd:?} did not get ready"))?;
        Ok(Waiting { proc })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Lets the workload run its measured part and returns what it measured.
    pub fn go(mut self, timeout: Duration) -> Result<Sample> {
        let stdin = self.proc.stdin().expect("stdin is piped");
        stdin
            .write_all(b"go\n")
            .and_then(|_| stdin.flush())
            .context("telling the workload to go")?;
        let out = self.proc.stdout.as_mut().expect("stdout is piped");
        let line = out
            .wait_for(timeout, |l| parse_sample(l).is_some())
            .context("waiting for the workload's measurement")?;
        if !self.proc.wait_or_kill(Duration::from_secs(10)) {
            bail!("the workload failed after measuring ({line})");
        }
        Ok(parse_sample(&line).expect("checked by wait_for"))
    }
}

/// How a one-shot command went: wall time, peak RSS, exit status.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// From spawn to exit.
    pub wall: Duration,
    /// Peak resident set size, in KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// User plus system CPU time (`ru_utime + ru_stime`), if measured.
    pub cpu: Option<Duration>,
    /// Whether it exited with status 0.
    pub success: bool,
}

/// Runs the command line `args` to completion under the `maxrss` helper
/// (`tests/bench/maxrss.c`), which reports its wall time and peak RSS:
/// measured from this (larger) process, `ru_maxrss` would carry our own
/// peak into the child's. Stdout and stderr go to the files given.
pub fn measure(
    helper: &Path,
    args: &[String],
    env: &[(&str, &str)],
    stdout: File,
    stderr: File,
) -> Result<Usage> {
    let out = super::out_dir().join(format!("maxrss.{}", std::process::id()));
    Command::new(helper)
        .arg(&out)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .with_context(|| format!("cannot start {}", helper.display()))?;
    let text = std::fs::read_to_string(&out)
        .with_context(|| format!("{} wrote no {}", helper.display(), out.display()))?;
    let _ = std::fs::remove_file(&out);
    parse_usage(&text)
        .with_context(|| format!("cannot parse {}'s output: {text:?}", helper.display()))
}

/// Parses the `maxrss` helper's `maxrss_kib`, `wall_ns` and `status` lines.
pub fn parse_usage(text: &str) -> Option<Usage> {
    let field = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))?
            .trim()
            .parse()
            .ok()
    };
    Some(Usage {
        wall: Duration::from_nanos(field("wall_ns")?),
        max_rss_kib: field("maxrss_kib")?,
        cpu: field("cpu_ns").map(Duration::from_nanos),
        success: field("status")? == 0,
    })
}

/// Waits until process `pid` stops using CPU: its user plus system time
/// unchanged for `quiet`, or `max` at most. Returns how long it waited.
pub fn wait_idle(pid: u32, quiet: Duration, max: Duration) -> Duration {
    let cpu = || -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised comm: state is field 3, utime 14.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    };
    let t = Instant::now();
    let (mut last, mut since) = (cpu(), Instant::now());
    while t.elapsed() < max {
        std::thread::sleep(Duration::from_millis(20));
        let now = cpu();
        if now.is_none() {
            break;
        }
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            break;
        }
    }
    t.elapsed()
}

/// Makes `cmd` run on CPU `cpu` only (its children too): set between the
/// fork and the exec.
pub fn pin_to_cpu(cmd: &mut Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: sched_setaffinity is async-signal-safe, and the set is a
    // plain value built before the fork.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The highest-numbered CPU this process may run on (0 if it cannot
/// tell).
pub fn last_cpu() -> usize {
    // SAFETY: the set is written by the kernel, and read within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return 0;
        }
        (0..libc::CPU_SETSIZE as usize)
            .rev()
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap_or(0)
    }
}

/// Renders a command for the report: program and arguments, quoted where
/// a shell would need it.
pub fn shell_words<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| {
            let w = w.as_ref();
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@".contains(c))
            {
                w.to_string()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Asks a bench's target program for the longest delay its ticker saw
/// since the last question (a line on its stdin; it answers `late N us`),
/// in µs.
pub fn late_us(stdin: &mut impl Write, stdout: &mut impl BufRead) -> Result<u64> {
    writeln!(stdin)?;
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    line.trim()
        .strip_prefix("late ")
        .and_then(|l| l.strip_suffix(" us"))
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("the program said {line:?} instead of its ticker's delay"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples() {
        let s = parse_sample("calls 100 elapsed_ns 2500 nivcsw 3").unwrap();
        assert_eq!(
            s,
            Sample {
                calls: 100,
                elapsed_ns: 2500,
                nivcsw: 3
            }
        );
        assert_eq!(s.per_call_ns(), 25.0);
        assert_eq!(parse_sample("ready"), None);
        assert_eq!(parse_sample("calls 1 elapsed_ns 1"), None);
        assert_eq!(parse_sample("calls x elapsed_ns 1 nivcsw 0"), None);
        assert_eq!(parse_sample("calls 1 elapsed_ns 1 nivcsw 0 more"), None);
    }

    #[test]
    fn quoting() {
        assert_eq!(
            shell_words(&["gdb", "-ex", "thread apply all bt", "it's"]),
            r#"gdb -ex 'thread apply all bt' 'it'\''s'"#
        );
    }

    #[test]
    fn lines_time_out_and_end() {
        let mut l = Lines::read(&b"a\nready\nb\n"[..]);
        assert_eq!(
            l.wait_for(Duration::from_secs(5), |s| s == "ready")
                .unwrap(),
            "ready"
        );
        assert!(l.wait_for(Duration::from_secs(5), |s| s == "nope").is_err());
        assert_eq!(l.seen, ["a", "ready", "b"]);
    }

    #[test]
    fn usage_lines() {
        assert_eq!(
            parse_usage("maxrss_kib 1612\nwall_ns 1241658\ncpu_ns 1000000\nstatus 0\n"),
            Some(Usage {
                wall: Duration::from_nanos(1_241_658),
                max_rss_kib: 1612,
                cpu: Some(Duration::from_millis(1)),
                success: true
            })
        );
        assert!(
            !parse_usage("maxrss_kib 1\nwall_ns 1\nstatus 3\n")
                .unwrap()
                .success
        );
        assert_eq!(parse_usage("maxrss_kib 1\nstatus 0\n"), None);
    }

    #[test]
    fn idle_processes_are_seen_idle() {
        let mut sleeper = Command::new("sleep").arg("10").spawn().unwrap();
        let waited = wait_idle(
            sleeper.id(),
            Duration::from_millis(100),
            Duration::from_secs(5),
        );
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }
}
