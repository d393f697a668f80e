//! The command line: argument parsing, dispatch to the commands (`--pid`:
//! live, kernel state joined with ring locations; `dump`: rings only;
//! `locks`: contention over a window) and the one-line error report. Kept
//! in the library so it is tested; `main.rs` only calls [`main`].

mod messages;

use std::{io::Write, path::PathBuf};

use clap::{CommandFactory, Parser, Subcommand};

use crate::{
    commands::{
        self,
        calls::CallsArgs,
        dump::DumpArgs,
        leaks::LeaksArgs,
        list::ListArgs,
        locks::LocksArgs,
        offcpu::OffCpuArgs,
        output::{OutputFile, Sink},
        pid::LiveArgs,
        record::RecordArgs,
        serve::ServeArgs,
    },
    error::{Error, Result},
};

/// The exit statuses, shown under `--help` (and in the README).
const EXIT_STATUS: &str = "Exit status: 0 when the report was written (also when its reader, \
e.g. `| head`, stopped reading), 1 when it could not be made, 2 for a command-line mistake.";

/// Where is every thread of a process, and why is it not moving.
#[derive(Debug, Parser)]
#[command(
    name = "rip-probe",
    // Whatever the binary is called: messages, completions and the man
    // page speak of `rip-probe`.
    bin_name = "rip-probe",
    version,
    args_conflicts_with_subcommands = true,
    after_help = EXIT_STATUS
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    live: LiveArgs,
    /// Write the output to FILE instead of stdout: whole or not at all
    /// (into a temporary file beside it, renamed over it), never through a
    /// link or into a device or FIFO; checked before observing.
    #[arg(long, short = 'o', value_name = "FILE", global = true)]
    output: Option<PathBuf>,
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
    /// Find what a process acquired over a window and still holds:
    /// descriptors, mappings and SysV shm, grouped by acquiring stack.
    Leaks(LeaksArgs),
    /// Record every thread's running, runnable and blocked spans (with
    /// system calls and snaps) over a window as a Perfetto trace (-o FILE),
    /// for ui.perfetto.dev.
    Record(RecordArgs),
    /// Run as an agent: every --interval, a snapshot of each target
    /// (--pid, --comm, --cgroup, or every process with a librip ring),
    /// served as OpenMetrics on --listen; incidents written to --reports,
    /// stacks sent to --otlp.
    Serve(ServeArgs),
    /// Print a completion script for SHELL (bash, zsh, fish), e.g.
    /// `rip-probe completions bash > /usr/share/bash-completion/completions/rip-probe`.
    Completions {
        /// The shell the script is for.
        shell: Shell,
    },
    /// Print the manual page (roff), e.g. `rip-probe man | man -l -`.
    Man,
}

/// The shells `rip-probe completions` writes scripts for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Runs the command line `args`, writing the report to `out`.
pub fn run(args: impl IntoIterator<Item = String>, out: &mut dyn Write) -> Result<()> {
    crate::discover::check_not_set_id()?;
    let args: Vec<String> = args.into_iter().collect();
    let cli = Cli::try_parse_from(&args).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            Error::Help(e.to_string())
        }
        _ => Error::Args(pointed_at_own_help(
            &with_transposition_tip(e, &args).to_string(),
            &args,
        )),
    })?;
    // Checked before anything is observed: a bad path costs no window.
    let mut out = match &cli.output {
        Some(path) => Sink::File(OutputFile::check("--output", path)?),
        None => Sink::Stdout(out),
    };
    let out = &mut out;
    match cli.command {
        Some(Command::Dump(d)) => commands::dump::run(&d, out),
        Some(Command::Locks(l)) => commands::locks::run(&l, out),
        Some(Command::List(l)) => commands::list::run(&l, out),
        Some(Command::Calls(c)) => commands::calls::run(&c, out),
        Some(Command::Offcpu(o)) => commands::offcpu::run(&o, out),
        Some(Command::Leaks(l)) => commands::leaks::run(&l, out),
        Some(Command::Record(r)) => commands::record::run(&r, out),
        Some(Command::Serve(s)) => commands::serve::run(&s, out),
        Some(Command::Completions { shell }) => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            out.emit(|w| {
                clap_complete::generate(shell, &mut Cli::command(), "rip-probe", w);
                Ok(())
            })
        }
        Some(Command::Man) => out.emit(|w| clap_mangen::Man::new(Cli::command()).render(w)),
        None => commands::live(&cli.live, out),
    }
}

/// clap's error, with the tip "a similar argument exists" also for a
/// mistyped option clap finds too far from any (its Jaro threshold misses
/// swapped letters in short names: `--pdi` for `--pid`): an option of the
/// command one edit (a swap, a letter) away.
fn with_transposition_tip(mut e: clap::Error, args: &[String]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::UnknownArgument
        || e.get(ContextKind::SuggestedArg).is_some()
    {
        return e;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(typed) = typed.strip_prefix("--").map(str::to_owned) else {
        return e;
    };
    let top = Cli::command();
    let cmd = subcommand(&top, args).unwrap_or(&top);
    let near = cmd
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .find(|long| strsim::osa_distance(long, &typed) == 1);
    if let Some(long) = near {
        e.insert(
            ContextKind::SuggestedArg,
            ContextValue::String(format!("--{long}")),
        );
    }
    e
}

/// clap's message, with its closing "try '--help'" naming the command
/// whose help it means (`rip-probe dump --help`).
fn pointed_at_own_help(msg: &str, args: &[String]) -> String {
    let top = Cli::command();
    let command = match subcommand(&top, args) {
        Some(sub) => format!("rip-probe {}", sub.get_name()),
        None => "rip-probe".into(),
    };
    msg.replace("try '--help'", &format!("try '{command} --help'"))
}

/// The subcommand `args` name, if any: it comes first
/// (`args_conflicts_with_subcommands`).
fn subcommand<'a>(top: &'a clap::Command, args: &[String]) -> Option<&'a clap::Command> {
    args.get(1).and_then(|a| top.find_subcommand(a))
}

/// Raises the soft limit on open files to the hard one, as bpftrace
/// does: uprobes attached one at a time (kernels before 6.6) hold a perf
/// event and a link each, so a thousand functions pass the usual 1,024.
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        // Best effort: the attach says EMFILE itself if it still runs out.
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// The CLI entry point: runs, prints runtime errors as one line and
/// command-line mistakes as clap does, returns the exit status (0 ok, 1
/// error, 2 usage). A reader that stops reading (`| head -1`) ends the
/// output quietly, as it ends other Unix tools' (their default SIGPIPE).
pub fn main() -> i32 {
    raise_open_files_limit();
    // The first Ctrl-C (or SIGTERM) ends the window and the report is
    // printed, as perf's and bpftrace's are; a second ends rip-probe.
    crate::util::interrupt::catch_interrupts();
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
        Err(e) if e.is_broken_pipe() => 0,
        Err(Error::Args(text)) => {
            let _ = out.flush();
            eprint!("{text}");
            2
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("rip-probe: error: {}", messages::one_line(&e));
            messages::exit_status(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message a command line gets (clap's, or the runtime error's).
    fn mistake(args: &str) -> String {
        let args = std::iter::once("rip-probe")
            .chain(args.split_whitespace())
            .map(String::from);
        match run(args, &mut Vec::new()).unwrap_err() {
            Error::Args(text) => text,
            e => panic!("not a usage error: {e}"),
        }
    }

    #[test]
    fn missing_arguments_are_named_with_the_subcommands_usage() {
        for (args, missing, usage) in [
            ("dump", "<FILE>", "Usage: rip-probe dump <FILE>"),
            (
                "calls --pid 1",
                "--uprobe <PATTERN>",
                "Usage: rip-probe calls --pid",
            ),
            (
                "offcpu",
                "--pid <PID>",
                "Usage: rip-probe offcpu --pid <PID>",
            ),
        ] {
            let m = mistake(args);
            assert!(m.contains(missing), "{args}: {m}");
            assert!(m.contains(usage), "{args}: {m}");
        }
        // A missing value: clap shows no usage line, the help is still the
        // subcommand's.
        let m = mistake("locks --pid");
        assert!(m.contains("a value is required for '--pid <PID>'"), "{m}");
        assert!(m.contains("try 'rip-probe locks --help'"), "{m}");
        // --duration is optional (without it, until Ctrl-C): only the
        // functions are missing.
        let m = mistake("calls --pid 1");
        assert!(m.contains("\n  --uprobe <PATTERN>\n"), "{m}");
        assert!(!m.contains("--duration <DURATION>"), "{m}");
        assert!(m.contains("try 'rip-probe calls --help'"), "{m}");
        assert!(!m.contains("try '--help'"), "{m}");
    }

    #[test]
    fn typos_get_the_near_spelling_and_the_subcommands_help() {
        for (args, near, help) in [
            (
                "dupm",
                "similar subcommand exists: 'dump'",
                "rip-probe --help",
            ),
            (
                "--pdi 1",
                "similar argument exists: '--pid'",
                "rip-probe --help",
            ),
            (
                "--jsno",
                "similar argument exists: '--json'",
                "rip-probe --help",
            ),
            (
                "dump --jsno f",
                "similar argument exists: '--json'",
                "rip-probe dump --help",
            ),
            (
                "calls --pdi 1",
                "similar argument exists: '--pid'",
                "rip-probe calls --help",
            ),
            (
                "offcpu --duraton 1s",
                "similar argument exists: '--duration'",
                "rip-probe offcpu --help",
            ),
            (
                "locks --pdi 1",
                "similar argument exists: '--pid'",
                "rip-probe locks --help",
            ),
            (
                "list --jsn",
                "similar argument exists: '--json'",
                "rip-probe list --help",
            ),
        ] {
            let m = mistake(args);
            assert!(m.contains(&format!("tip: a {near}")), "{args}: {m}");
            assert!(m.contains(&format!("try '{help}'")), "{args}: {m}");
        }
    }

    /// The bash script loads in bash and registers rip-probe's completion;
    /// zsh's and fish's name every subcommand.
    #[test]
    fn completions_load_in_bash() {
        let mut bash = Vec::new();
        run(
            ["rip-probe", "completions", "bash"].map(String::from),
            &mut bash,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("rip-completions-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rip-probe.bash");
        std::fs::write(&file, &bash).unwrap();
        let o = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source {}; complete -p rip-probe", file.display()))
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            said.contains("-F _rip__probe") && said.trim_end().ends_with("rip-probe"),
            "{said}"
        );
        for shell in ["zsh", "fish"] {
            let mut script = Vec::new();
            run(
                ["rip-probe", "completions", shell].map(String::from),
                &mut script,
            )
            .unwrap();
            let script = String::from_utf8(script).unwrap();
            for sub in ["dump", "locks", "list", "calls", "offcpu", "man"] {
                assert!(script.contains(sub), "{shell} lacks {sub}");
            }
        }
        let m = mistake("completions tcsh");
        assert!(
            m.contains("invalid value 'tcsh'") && m.contains("bash, zsh, fish"),
            "{m}"
        );
    }

    /// The man page is roff generated from the CLI: its name, synopsis,
    /// options, subcommands and exit statuses.
    #[test]
    fn man_page_is_generated_from_the_cli() {
        let mut page = Vec::new();
        run(["rip-probe", "man"].map(String::from), &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        assert!(
            page.starts_with(".ie") || page.contains(".TH rip-probe"),
            "{page}"
        );
        for part in [
            ".SH NAME",
            ".SH SYNOPSIS",
            "\\-\\-pid",
            "rip\\-probe\\-offcpu",
            "Exit status: 0",
        ] {
            assert!(page.contains(part), "no {part} in {page}");
        }
    }

    #[test]
    fn help_documents_the_exit_statuses() {
        let Err(Error::Help(h)) = run(["rip-probe", "--help"].map(String::from), &mut Vec::new())
        else {
            panic!("--help is not help");
        };
        assert!(h.contains("Exit status: 0"), "{h}");
        assert!(h.contains("2 for a command-line mistake"), "{h}");
    }
}
