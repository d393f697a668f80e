//! `cargo xtask`: the project's commands.
//!
//! - `setup`: install what building and testing need and a fresh machine
//!   lacks (nightly rust-src, bpf-linker against the nightly's LLVM, tracefs).
//! - `test`: setup, then fmt, clippy and every test, privileged ones included
//!   (`--loaded`: the same with CPU-bound loops beside the tests).
//! - `demo`: the main job on a bundled workload.
//! - `bench`: the overhead comparison.
//! - `dist`: the static rip-probe and librip in one tarball.
//! - `vmtest`: rip-probe's checks in Debian's kernels under qemu.

mod bench;
mod demo;
mod dist;
mod setup;
mod test;
mod util;
mod vmtest;

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
    Test {
        /// Run the tests, vmtest and fuzzing with two CPU-bound loops
        /// beside them (started and stopped here), as on a busy machine:
        /// for changes that touch timing.
        #[arg(long)]
        loaded: bool,
    },
    /// Run rip-probe on a bundled workload with stuck threads, live and
    /// post-mortem.
    Demo,
    /// Measure a librip snap against USDT, LTTng, uprobes and gdb, rip-probe's
    /// cost to the traced process and its scale; write docs/BENCHMARKS.md.
    Bench {
        /// A shorter run (fewer calls and rounds, no gdb at 10,000 threads).
        #[arg(long)]
        quick: bool,
        /// Only the user stacks comparison (10,000 threads: rip-probe, gdb,
        /// eu-stack): its section is printed and written to
        /// target/bench/stacks.md; docs/BENCHMARKS.md is left as it is.
        #[arg(long, conflicts_with = "quick")]
        stacks_only: bool,
        /// Only the rows of many at once (1,000 uprobes attached and
        /// detached, with and without uprobe_multi; --cgroup over 100
        /// processes): printed and written to target/bench/bulk.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only"])]
        bulk_only: bool,
        /// With --bulk-only: only its --cgroup row.
        #[arg(long, requires = "bulk_only")]
        cgroup_only: bool,
        /// Only the goroutine rows (rip-probe on a Go program with 100,000
        /// goroutines, beside its own pprof dump: time, pause, memory):
        /// printed and written to target/bench/goroutines.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only"])]
        goroutines_only: bool,
        /// Only the heap rows (an allocation-heavy C program that leaks
        /// from one function: untraced, with librip preloaded, sampling at
        /// 512 KiB and at every call, traced by rip-probe leaks, under
        /// heaptrack, traced by BCC's memleak; slowdown, memory, whether
        /// each found the leak): printed and written to
        /// target/bench/alloc.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only", "goroutines_only"])]
        alloc_only: bool,
        /// Only the scale rows (rip-probe on the demo server's blocked
        /// threads, with and without stacks, at each of --sizes; the
        /// tokio workload's idle tasks with --tokio-tasks), without gdb:
        /// printed and written to target/bench/scale.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only", "goroutines_only", "alloc_only"])]
        scale_only: bool,
        /// With --scale-only: the pool sizes, comma-separated (each a
        /// demo server with that many blocked workers; 100000 runs with
        /// `--duration 0`, smaller ones with the usual 1 s window).
        #[arg(long, requires = "scale_only", value_delimiter = ',', default_values_t = [1_000usize, 10_000, 100_000])]
        sizes: Vec<usize>,
        /// With --scale-only: also the tokio workload with this many idle
        /// tasks (`--duration 0`), 0 for none.
        #[arg(long, requires = "scale_only", default_value_t = 0)]
        tokio_tasks: usize,
        /// With --scale-only: a rip-probe built from another commit (e.g.
        /// before a change). At each size it reports the same process as
        /// this build, and the bench fails unless both reports give every
        /// thread the same state, system call, kernel and user stacks and
        /// lock wait, and the same deadlocks.
        #[arg(long, requires = "scale_only", value_name = "RIP_PROBE")]
        baseline: Option<std::path::PathBuf>,
        /// Only the Python rows (rip-probe on a live Python service of 102
        /// threads, then 1,002 threads and 100,000 asyncio tasks, beside
        /// py-spy and pystack, none stopping it): printed and written to
        /// target/bench/python.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only", "goroutines_only", "alloc_only", "scale_only"])]
        python_only: bool,
        /// Only the overhead rows (what rip-probe --pid, its snapshots,
        /// locks and offcpu cost a getppid loop, a one-CPU ping-pong and a
        /// mutex hand-off, beside bpftrace and offcputime): printed and
        /// written to target/bench/overhead.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only", "goroutines_only", "alloc_only", "scale_only", "python_only"])]
        overhead_only: bool,
        /// Only serve's own cost: `rip-probe serve` over --serve-targets
        /// processes of tests/c/service.c for --serve-minutes, its CPU
        /// time and memory read every 30 s: printed and written to
        /// target/bench/serve.md.
        #[arg(long, conflicts_with_all = ["quick", "stacks_only", "bulk_only", "goroutines_only", "alloc_only", "scale_only", "python_only", "overhead_only"])]
        serve_only: bool,
        /// With --serve-only: the processes serve watches.
        #[arg(long, requires = "serve_only", default_value_t = 100)]
        serve_targets: usize,
        /// With --serve-only: how long it runs, in minutes.
        #[arg(long, requires = "serve_only", default_value_t = 10)]
        serve_minutes: u64,
    },
    /// Build a static rip-probe and librip (.a, .so, .h, .pc) into
    /// target/dist/rip-VERSION-x86_64-linux.tar.gz.
    Dist,
    /// `dist`, then the container image `rip` from the Containerfile (with
    /// podman, buildah or docker); fails, saying so, where none exists.
    Image,
    /// Run rip-probe's checks in Debian kernels under qemu (and on the
    /// host); print the kernel × check matrix.
    Vmtest {
        /// A kernel to test (repeat for several): 5.10, 6.1, 6.1-rt, 6.12,
        /// backports. Default: all.
        #[arg(long = "kernel", value_name = "NAME")]
        kernels: Vec<String>,
        /// Guests booted at the same time.
        #[arg(long, default_value_t = vmtest::DEFAULT_JOBS)]
        jobs: usize,
        /// CPUs per guest.
        #[arg(long, default_value_t = vmtest::DEFAULT_SMP)]
        smp: u32,
        /// Seconds a guest may run before it is killed and its row fails.
        #[arg(long, default_value_t = vmtest::DEFAULT_TIMEOUT_SECS)]
        timeout: u64,
        /// Skip the host row.
        #[arg(long)]
        no_host: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::run_setup().map(|_| eprintln!("setup: done")),
        Cmd::Test { loaded } => test::run_tests(loaded),
        Cmd::Demo => demo::run_demo(),
        Cmd::Bench {
            stacks_only: true, ..
        } => bench::run_stacks_only(),
        Cmd::Bench {
            bulk_only: true,
            cgroup_only,
            ..
        } => bench::run_bulk_only(cgroup_only),
        Cmd::Bench {
            goroutines_only: true,
            ..
        } => bench::run_goroutines_only(),
        Cmd::Bench {
            alloc_only: true, ..
        } => bench::run_alloc_only(),
        Cmd::Bench {
            scale_only: true,
            sizes,
            tokio_tasks,
            baseline,
            ..
        } => bench::run_scale_only(&sizes, tokio_tasks, baseline.as_deref()),
        Cmd::Bench {
            overhead_only: true,
            ..
        } => bench::run_overhead_only(),
        Cmd::Bench {
            python_only: true, ..
        } => bench::run_python_only(),
        Cmd::Bench {
            serve_only: true,
            serve_targets,
            serve_minutes,
            ..
        } => bench::run_serve_only(serve_targets, serve_minutes),
        Cmd::Bench { quick, .. } => bench::run_bench(quick),
        Cmd::Dist => dist::run_dist().map(|_| ()),
        Cmd::Image => dist::run_dist().and_then(|d| match dist::build_image(&d.stage, false)? {
            true => Ok(()),
            false => anyhow::bail!("no container builder: the image was not built"),
        }),
        Cmd::Vmtest {
            kernels,
            jobs,
            smp,
            timeout,
            no_host,
        } => vmtest::run_vmtest(&vmtest::Options {
            kernels,
            jobs,
            smp,
            timeout: std::time::Duration::from_secs(timeout),
            no_host,
        }),
    };
    if let Err(e) = res {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
