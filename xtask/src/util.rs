//! Small helpers for running commands and printing steps.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of xtask's manifest directory).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// Prints a step header.
pub fn step(msg: &str) {
    eprintln!("==> {msg}");
}

/// Runs `cmd` with inherited stdio; fails with `what` when it fails.
pub fn exec(cmd: &mut Command, what: &str) -> Result<()> {
    let t = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("{what}: cannot start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    eprintln!("    {what}: ok in {:.1}s", t.elapsed().as_secs_f64());
    Ok(())
}

/// Runs `cmd` and returns its stdout when it succeeds, `None` otherwise
/// (including when it cannot start).
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether we run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `cargo` as invoked by the user (respects `$CARGO`).
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// The Debian packages of `wanted` (command, package) whose command is not
/// on PATH.
pub fn missing_packages<'a>(wanted: &[(&str, &'a str)]) -> Vec<&'a str> {
    wanted
        .iter()
        .filter(|(bin, _)| {
            output(Command::new("sh").args(["-c", &format!("command -v {bin}")])).is_none()
        })
        .map(|(_, pkg)| *pkg)
        .collect()
}

/// `apt-get install`s `packages` (as root), refreshing the package lists
/// and trying again when the first attempt fails (a fresh machine may
/// have stale lists).
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let install = || {
        exec(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get install",
        )
    };
    install()
        .or_else(|_| {
            exec(
                Command::new("apt-get").args(["update", "-q"]),
                "apt-get update",
            )?;
            install()
        })
        .with_context(|| {
            format!(
                "cannot install {}: is the Debian mirror reachable?",
                packages.join(" ")
            )
        })
}
