//! The command line: argument parsing, dispatch to the commands (`--pid`:
//! live, kernel state joined with ring locations; `dump`: rings only) and
//! the one-line error report. Kept in the library so it is tested;
//! `main.rs` only calls [`main`].

use std::{io::Write, time::Duration};

use clap::{Parser, Subcommand};

use crate::{
    commands::{self, dump::DumpArgs, pid::LiveArgs},
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
}

/// Parses `750ms`, `2s`, `1.5s`, `3m`, `1h`, `250us`, `10ns`; a bare number
/// is seconds.
pub(crate) fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 500ms, 2s, 1m)"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{s}` (use ns, us, ms, s, m, h)"
            ));
        }
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Runs the command line `args`, writing the report to `out`.
pub fn run(args: impl IntoIterator<Item = String>, out: &mut dyn Write) -> Result<()> {
    let cli = Cli::try_parse_from(args).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            Error::Help(e.to_string())
        }
        _ => Error::Usage(first_line(&e.to_string())),
    })?;
    match cli.command {
        Some(Command::Dump(d)) => commands::dump::run(&d, out),
        None => commands::pid::run(&cli.live, out),
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
    let mut out = std::io::BufWriter::new(stdout.lock());
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
    fn durations() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1y").is_err());
    }

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
