//! `cargo xtask`: the project's commands.
//!
//! - `setup`: install what building and testing need and a fresh machine
//!   lacks (nightly rust-src, bpf-linker against the nightly's LLVM, tracefs).
//! - `test`: setup, then fmt, clippy and every test, privileged ones included.
//! - `demo`: the main job on a bundled workload.
//! - `bench`: the overhead comparison.

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
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::run_setup().map(|_| eprintln!("setup: done")),
        Cmd::Test => test::run_tests(),
        Cmd::Demo => demo::run_demo(),
    };
    if let Err(e) = res {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
