//! Processes the bench drives: workloads that speak the protocol of
//! `tests/bench/bench.h` (`ready`, a line on stdin, `calls N elapsed_ns T`),
//! tracers running beside them, and one-shot commands whose wall time and
//! peak RSS are measured.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// What a workload measured itself: `calls` calls (or operations) in
/// `elapsed_ns` of its own clock, startup and attach excluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Calls made.
    pub calls: u64,
    /// Time the calls took, in ns.
    pub elapsed_ns: u64,
}

impl Sample {
    /// Nanoseconds per call.
    pub fn per_call_ns(&self) -> f64 {
        self.elapsed_ns as f64 / self.calls.max(1) as f64
    }
}

/// Parses a workload's `calls N elapsed_ns T` line.
pub fn parse_sample(line: &str) -> Option<Sample> {
    let mut w = line.split_whitespace();
    match (w.next()?, w.next()?, w.next()?, w.next()?, w.next()) {
        ("calls", calls, "elapsed_ns", ns, None) => Some(Sample {
            calls: calls.parse().ok()?,
            elapsed_ns: ns.parse().ok()?,
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
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// From spawn to exit.
    pub wall: Duration,
    /// Peak resident set size, in KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// Whether it exited with status 0.
    pub success: bool,
}

/// Runs `cmd` to completion, timing it and reading its peak RSS from
/// `wait4`. Stdio is whatever `cmd` sets.
pub fn measure(cmd: &mut Command) -> Result<Usage> {
    let t = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid out pointers; pid is our child, reaped here (the
        // `Child` is not waited for afterwards).
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4");
        }
    }
    let wall = t.elapsed();
    drop(child);
    Ok(Usage {
        wall,
        max_rss_kib: u64::try_from(ru.ru_maxrss).unwrap_or(0),
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples() {
        assert_eq!(
            parse_sample("calls 100 elapsed_ns 2500"),
            Some(Sample {
                calls: 100,
                elapsed_ns: 2500
            })
        );
        assert_eq!(
            parse_sample("calls 100 elapsed_ns 2500")
                .unwrap()
                .per_call_ns(),
            25.0
        );
        assert_eq!(parse_sample("ready"), None);
        assert_eq!(parse_sample("calls x elapsed_ns 1"), None);
        assert_eq!(parse_sample("calls 1 elapsed_ns 1 more"), None);
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
    fn measures_a_command() {
        let u = measure(Command::new("sh").args(["-c", "exit 3"])).unwrap();
        assert!(!u.success);
        let u = measure(&mut Command::new("true")).unwrap();
        assert!(u.success && u.max_rss_kib > 0);
    }
}
