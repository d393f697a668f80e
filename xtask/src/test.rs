//! `cargo xtask test`: the README's test command and the whole of CI.

use std::process::Command;

use anyhow::Result;

use crate::{
    setup,
    util::{cargo, exec, step},
};

/// How long the reader's fuzz target runs in every test run.
const FUZZ_SECONDS: u32 = 25;

/// Fuzzes the ring reader for a bounded time. New inputs go to a scratch
/// corpus under target/, so the committed one only changes by hand.
fn fuzz_reader() -> Result<()> {
    let root = crate::util::root();
    let scratch = root.join("target/fuzz-corpus");
    std::fs::create_dir_all(&scratch)?;
    exec(
        Command::new("rustup")
            .current_dir(root.join("fuzz"))
            .args(["run", setup::NIGHTLY, "cargo", "fuzz", "run", "reader"])
            .arg(&scratch)
            .arg("corpus/reader")
            .arg("--")
            .arg(format!("-max_total_time={FUZZ_SECONDS}")),
        "cargo fuzz run reader",
    )
}

/// Setup, formatting, lints (host and BPF target), every test of the
/// workspace, privileged ones included, then the guest kernels (vmtest).
pub fn run_tests() -> Result<()> {
    let t = std::time::Instant::now();
    setup::run_setup()?;

    step("cargo fmt --check");
    exec(
        cargo().args(["fmt", "--all", "--check"]),
        "cargo fmt --check",
    )?;

    step("cargo clippy -- -D warnings (host, all features)");
    exec(
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]),
        "cargo clippy",
    )?;

    step("cargo clippy -- -D warnings (rip-ebpf for bpfel-unknown-none)");
    exec(
        Command::new("rustup")
            .current_dir(crate::util::root())
            .args([
                "run",
                setup::NIGHTLY,
                "cargo",
                "clippy",
                "-p",
                "rip-ebpf",
                "--bins",
            ])
            .args([
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
            ])
            .args(["--target-dir", "target/bpf-clippy", "--", "-D", "warnings"])
            .env(
                "CARGO_ENCODED_RUSTFLAGS",
                "--cfg=bpf_target_arch=\"x86_64\"",
            ),
        "cargo clippy (bpf)",
    )?;

    step("cargo test --workspace");
    exec(
        cargo().args(["test", "--workspace", "--", "--nocapture"]),
        "cargo test",
    )?;

    step("cargo xtask vmtest (rip-probe in every guest kernel, and on the host)");
    crate::vmtest::run_vmtest(&crate::vmtest::Options {
        kernels: Vec::new(),
        jobs: crate::vmtest::DEFAULT_JOBS,
        smp: crate::vmtest::DEFAULT_SMP,
        timeout: std::time::Duration::from_secs(crate::vmtest::DEFAULT_TIMEOUT_SECS),
        no_host: false,
    })?;

    step(&format!(
        "cargo fuzz run reader ({FUZZ_SECONDS} s, the committed corpus plus a scratch one)"
    ));
    fuzz_reader()?;

    eprintln!("xtask test: all green in {:.0}s", t.elapsed().as_secs_f64());
    Ok(())
}
