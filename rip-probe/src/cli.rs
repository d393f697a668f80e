//! The command line: argument parsing and the two jobs, `--pid` (live,
//! kernel state joined with ring locations) and `dump` (rings only). Kept
//! in the library so it is tested; `main.rs` only calls [`main`].

use std::{io::Write, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    collect::{procfs, ring::RingView},
    correlate::{self, DumpOptions},
    error::{Error, Result},
    model::{ProcessInfo, Report},
    render,
    session::{Session, SessionOptions, monotonic_ns},
    symbolize::{self, Symbolizer, UserSpace},
    tasks::{self, TaskClock},
};

/// Where is every thread of a process, and why is it not moving.
#[derive(Debug, Parser)]
#[command(name = "rip-probe", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
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

/// `rip-probe --pid N`.
#[derive(Debug, Args)]
struct LiveArgs {
    /// The process to look at.
    #[arg(long, short)]
    pid: Option<u32>,
    /// How long to watch context switches before reporting.
    #[arg(long, short, default_value = "1s", value_parser = parse_duration)]
    duration: Duration,
    /// Only threads blocked at least this long (e.g. 500ms, 2s).
    #[arg(long, value_parser = parse_duration)]
    min_blocked: Option<Duration>,
    /// Only tasks idle at least this long (since their last poll ended, or
    /// their creation if never polled); polling tasks are not idle.
    #[arg(long, value_parser = parse_duration)]
    min_idle: Option<Duration>,
    /// Report again every --duration until interrupted or the process exits.
    #[arg(long)]
    watch: bool,
    /// Print the report as JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// For programs without librip: attach uprobes to functions matching
    /// this glob (`LIB:GLOB` for a shared library) and report each
    /// thread's last function entered.
    #[arg(long, value_name = "PATTERN")]
    uprobe: Option<String>,
    /// Read this ring file instead of the process's own.
    #[arg(long, conflicts_with = "no_ring")]
    ring: Option<PathBuf>,
    /// Ignore the process's ring.
    #[arg(long)]
    no_ring: bool,
}

/// `rip-probe dump`.
#[derive(Debug, Args)]
struct DumpArgs {
    /// A ring file (e.g. /dev/shm/rip-0/server.4711.ring).
    #[arg(required_unless_present = "pid", conflicts_with = "pid")]
    file: Option<PathBuf>,
    /// Find the ring of this live process through /proc/PID/maps.
    #[arg(long, short)]
    pid: Option<u32>,
    /// Per-thread history, oldest to newest, instead of the grouped view.
    #[arg(long)]
    threads: bool,
    /// Only these thread (or task) ids.
    #[arg(long)]
    tid: Vec<u64>,
    /// Only threads (and tasks) whose name matches this glob.
    #[arg(long, value_name = "GLOB")]
    name: Option<String>,
    /// Include slots marked exited.
    #[arg(long)]
    exited: bool,
    /// Only tasks idle at least this long (since their last poll ended, or
    /// their creation if never polled). Post-mortem, idle times run up to
    /// the last time the ring recorded, and are lower bounds.
    #[arg(long, value_parser = parse_duration)]
    min_idle: Option<Duration>,
    /// Print JSON (schema: docs/JSON.md).
    #[arg(long)]
    json: bool,
    /// For a ring of the original header-only librip: the program that
    /// wrote it, to symbolize its addresses (like `read_rip -e`; non-PIE
    /// programs only, as the original ring records no load address).
    #[arg(long, short, value_name = "BINARY")]
    exe: Option<PathBuf>,
}

/// Parses `750ms`, `2s`, `1.5s`, `3m`, `1h`, `250us`, `10ns`; a bare number
/// is seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
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
        Some(Command::Dump(d)) => dump(&d, out),
        None => live(&cli.live, out),
    }
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or(s).trim_start_matches("error: ");
    format!("{l} (see rip-probe --help)")
}

fn live(a: &LiveArgs, out: &mut dyn Write) -> Result<()> {
    let pid = a.pid.ok_or_else(|| {
        Error::Usage("say which process: rip-probe --pid PID (or rip-probe dump FILE)".into())
    })?;
    let mut opts = SessionOptions::new(pid);
    opts.uprobe = a.uprobe.clone();
    opts.ring = a.ring.clone();
    opts.no_ring = a.no_ring;
    let mut session = Session::attach(&opts)?;
    loop {
        session.observe(a.duration, &mut ())?;
        if !a.watch {
            session.stop_observing()?;
        }
        let mut report = session.snapshot()?;
        filter_live(&mut report, a.min_blocked, a.min_idle);
        crate::timing::phase("render", || emit(&report, a.json, out, render::live))?;
        if !a.watch || session.lost().is_some() {
            return Ok(());
        }
        writeln!(out).map_err(|e| Error::io("stdout", e))?;
    }
}

fn write_err(e: std::io::Error) -> Error {
    Error::io("stdout", e)
}

fn emit(
    report: &Report,
    json: bool,
    out: &mut dyn Write,
    text: fn(&Report, &mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if json {
        render::json(report, &mut *out).map_err(write_err)?;
    } else {
        text(report, &mut *out).map_err(write_err)?;
    }
    out.flush().map_err(write_err)
}

/// `--min-blocked` and `--min-idle`, then regroup.
fn filter_live(r: &mut Report, min_blocked: Option<Duration>, min_idle: Option<Duration>) {
    if let Some(min) = min_blocked {
        let min = min.as_nanos() as u64;
        r.threads.retain(|t| t.blocked.is_some_and(|b| b.ns >= min));
    }
    filter_idle(r, min_idle);
    r.groups = correlate::group_threads(&r.threads);
}

fn filter_idle(r: &mut Report, min_idle: Option<Duration>) {
    if let Some(min) = min_idle {
        tasks::retain_idle(&mut r.tasks, min.as_nanos() as u64);
    }
    r.task_groups = tasks::group_tasks(&r.tasks);
}

fn dump(a: &DumpArgs, out: &mut dyn Write) -> Result<()> {
    // A path found in a process's maps is not followed through a symlink.
    let (path, found) = match (&a.file, a.pid) {
        (Some(f), _) => (f.clone(), false),
        (None, Some(pid)) => (ring_of(pid)?, true),
        (None, None) => {
            return Err(Error::Usage(
                "say which ring: rip-probe dump FILE, or rip-probe dump --pid PID".into(),
            ));
        }
    };
    let open = if found {
        RingView::open_found
    } else {
        RingView::open
    };
    let ring = match crate::timing::phase("read ring", || open(&path)) {
        Err(Error::Ring(librip::reader::ReadError::OriginalFormat)) => {
            return crate::original::dump(&path, a.exe.as_deref(), a.json, out);
        }
        r => r?,
    };
    if a.exe.is_some() {
        return Err(Error::Usage(
            "--exe is for rings of the original librip; this ring names its own binaries".into(),
        ));
    }
    let alive = same_process_alive(&ring);
    // The ring's modules are joined with the live process's maps only if
    // whoever wrote the file could read those maps anyway.
    let trusted = alive && procfs::may_ptrace(ring.owner, ring.pid);
    let process = ProcessInfo {
        pid: ring.pid,
        exe: ring.exe.clone(),
        comm: None,
        alive,
        lost: None,
    };
    // A ring whose every slot exited (a finished program, like the
    // original librip's test.c) would show nothing: show what it left.
    let all_exited = ring.slots.iter().all(|s| s.exited);
    let opts = DumpOptions {
        history: a.threads,
        exited: a.exited || all_exited,
        clock: if alive {
            TaskClock::Now(monotonic_ns())
        } else {
            TaskClock::PostMortem
        },
    };
    let mut report = crate::timing::phase("correlate", || correlate::dump(&ring, process, opts));
    let name = match &a.name {
        Some(g) => {
            Some(glob::Pattern::new(g).map_err(|e| Error::Usage(format!("--name {g}: {e}")))?)
        }
        None => None,
    };
    let keep = |id: u64, n: &str| {
        (a.tid.is_empty() || a.tid.contains(&id)) && name.as_ref().is_none_or(|g| g.matches(n))
    };
    report.threads.retain(|t| keep(t.tid, &t.name));
    report.tasks.retain(|t| keep(t.id, &t.name));

    // Live: blazesym reads the process's own maps; post-mortem: the ring's
    // module table (file offsets and build-ids).
    let space = if trusted {
        UserSpace::LiveWithModules(ring.pid, &ring.modules)
    } else {
        UserSpace::Modules(&ring.modules)
    };
    if alive && !trusted {
        report.warnings.push(format!(
            "the ring's owner (uid {}) may not trace pid {}: its addresses are symbolized from the ring's module table only",
            ring.owner, ring.pid
        ));
    }
    crate::timing::phase("symbolize", || {
        symbolize::fill(&mut report, &space, &mut Symbolizer::new())
    });
    crate::timing::phase("group", || {
        report.groups = correlate::group_threads(&report.threads);
        filter_idle(&mut report, a.min_idle);
    });
    let view: fn(&Report, &mut dyn Write) -> std::io::Result<()> = if a.threads {
        render::history
    } else {
        render::grouped
    };
    crate::timing::phase("render", || emit(&report, a.json, out, view))
}

/// The ring of live process `pid`: the first mapped ring that names it.
fn ring_of(pid: u32) -> Result<PathBuf> {
    if !procfs::exists(format!("/proc/{pid}")) {
        return Err(Error::NoSuchProcess(pid));
    }
    let rings = RingView::find(pid)?;
    rings.into_iter().next().ok_or(Error::NoRing(pid))
}

/// Whether the process that wrote `ring` is still running (same pid and
/// start time, so not a reuse of its pid).
fn same_process_alive(ring: &RingView) -> bool {
    // A killed process lingers as a zombie until reaped: its maps are gone.
    procfs::stat(ring.pid, 0).is_some_and(|st| {
        st.start_time == ring.process_start_time && !matches!(st.state, 'Z' | 'X')
    })
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
            eprintln!("rip-probe: error: {e}");
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
