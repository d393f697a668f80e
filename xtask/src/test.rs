//! `cargo xtask test`: the README's test command and the whole of CI.

use std::process::Command;

use anyhow::Result;

use crate::{
    setup,
    util::{cargo, exec, step},
};

/// Setup, formatting, lints (host and BPF target), then every test of the
/// workspace, privileged ones included.
pub fn run_tests() -> Result<()> {
    let t = std::time::Instant::now();
    setup::run_setup()?;

    step("cargo fmt --check");
    exec(
        cargo().args(["fmt", "--all", "--check"]),
        "cargo fmt --check",
    )?;

    step("cargo clippy -- -D warnings (host)");
    exec(
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
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

    eprintln!("xtask test: all green in {:.0}s", t.elapsed().as_secs_f64());
    Ok(())
}
