//! `cargo xtask`: the project's commands.
//!
//! - `setup`: install what building and testing need and a fresh machine
//!   lacks (nightly rust-src, bpf-linker against the nightly's LLVM, tracefs).
//! - `test`: setup, then fmt, clippy and every test, privileged ones included.
//! - `demo`: the main job on a bundled workload.
//! - `bench`: the overhead comparison.

mod bench;
mod demo;
mod setup;
mod test;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "rip's developer commands")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what a fresh machine lacks: rust-src, bpf-linker, tracefs.
    Setup,
    /// Setup, then `cargo fmt --check`, clippy with -D warnings, all tests.
    Test,
    /// Run rip-probe on a bundled workload with stuck threads, live and
    /// post-mortem.
    Demo,
    /// Measure a librip snap against USDT, LTTng, uprobes and gdb, rip-probe's
    /// cost to the traced process and its scale; write docs/BENCHMARKS.md.
    Bench {
        /// A shorter run (fewer calls and rounds, no gdb at 10,000 threads).
        #[arg(long)]
        quick: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::run_setup().map(|_| eprintln!("setup: done")),
        Cmd::Test => test::run_tests(),
        Cmd::Demo => demo::run_demo(),
        Cmd::Bench { quick } => bench::run_bench(quick),
    };
    if let Err(e) = res {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
