//! The command line: argument parsing, dispatch to the commands (`--pid`:
//! live, kernel state joined with ring locations; `dump`: rings only;
//! `locks`: contention over a window) and the one-line error report. Kept
//! in the library so it is tested; `main.rs` only calls [`main`].

use std::io::Write;

use clap::{Parser, Subcommand};

use crate::{
    commands::{
        self, calls::CallsArgs, dump::DumpArgs, list::ListArgs, locks::LocksArgs,
        offcpu::OffCpuArgs, pid::LiveArgs,
    },
    error::{Error, Result},
};

/// Where is every thread of a process, and why is it not moving.
#[derive(Debug, Parser)]
#[command(name = "rip-probe", version, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    live: LiveArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print where every thread was last seen, from ring files (no BPF).
    Dump(DumpArgs),
    /// Count lock (futex) contention over a window: waits, wakes, wait
    /// times, top waiters and where the holders released each lock.
    Locks(LocksArgs),
    /// List the processes that map a librip ring: pid, cgroup, ring, threads and tasks.
    List(ListArgs),
    /// Count every call of some functions and time each (uprobes), with a
    /// latency histogram and the outliers.
    Calls(CallsArgs),
    /// Sum the threads' time off the CPU by stack over a window (blocked
    /// and preempted), as text, folded stacks, an SVG flame graph or JSON.
    Offcpu(OffCpuArgs),
}

/// Runs the command line `args`, writing the report to `out`.
pub fn run(args: impl IntoIterator<Item = String>, out: &mut dyn Write) -> Result<()> {
    crate::discover::check_not_set_id()?;
    let cli = Cli::try_parse_from(args).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            Error::Help(e.to_string())
        }
        _ => Error::Usage(first_line(&e.to_string())),
    })?;
    match cli.command {
        Some(Command::Dump(d)) => commands::dump::run(&d, out),
        Some(Command::Locks(l)) => commands::locks::run(&l, out),
        Some(Command::List(l)) => commands::list::run(&l, out),
        Some(Command::Calls(c)) => commands::calls::run(&c, out),
        Some(Command::Offcpu(o)) => commands::offcpu::run(&o, out),
        None => commands::live(&cli.live, out),
    }
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or(s).trim_start_matches("error: ");
    format!("{l} (see rip-probe --help)")
}

/// The CLI entry point: runs, prints errors as one line, returns the exit
/// status (0 ok, 1 error, 2 usage).
pub fn main() -> i32 {
    let stdout = std::io::stdout();
    // Reports of 100,000 threads are hundreds of megabytes of JSON: large
    // writes keep the syscalls few.
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    match run(std::env::args(), &mut out) {
        Ok(()) => 0,
        Err(Error::Help(text)) => {
            let _ = write!(out, "{text}");
            0
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("rip-probe: error: {}", e.one_line());
            if matches!(e, Error::Usage(_)) { 2 } else { 1 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_are_one_line() {
        let mut out = Vec::new();
        let e = run(["rip-probe".to_string()], &mut out).unwrap_err();
        assert!(matches!(e, Error::Usage(_)));
        assert!(!e.to_string().contains('\n'));
        let e = run(["rip-probe", "--bogus"].map(String::from), &mut out).unwrap_err();
        assert!(e.to_string().contains("--bogus"), "{e}");
        assert!(!e.to_string().contains('\n'));
        let e = run(
            ["rip-probe", "--pid", "1", "--duration", "soon"].map(String::from),
            &mut out,
        )
        .unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
