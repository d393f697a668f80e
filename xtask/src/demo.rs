//! `cargo xtask demo`: the main job on a bundled workload. Builds
//! rip-probe and the demo server, starts the server (a thread pool that
//! deadlocks, plus threads stuck on a pipe, a sleep and an accept, and some
//! spinning), runs `rip-probe --pid` on it, then kills it with SIGKILL and
//! reads its ring post-mortem with `rip-probe dump`.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use crate::util::{cargo, exec, root, step};

/// Runs the demo.
pub fn run_demo() -> Result<()> {
    crate::setup::run_setup()?;
    step("build rip-probe and the demo server (release)");
    exec(
        cargo().args([
            "build",
            "--release",
            "-p",
            "rip-probe",
            "--bin",
            "rip-probe",
            "-p",
            "rip-tests",
            "--bin",
            "rip-demo-server",
        ]),
        "cargo build --release",
    )?;
    let bin = root().join("target/release");
    let ring = PathBuf::from(format!("/dev/shm/rip-demo-{}.ring", std::process::id()));

    step("start the demo server");
    let mut server = Command::new(bin.join("rip-demo-server"))
        .args(["--ring"])
        .arg(&ring)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting rip-demo-server")?;
    let pid = server.id();
    let mut out = BufReader::new(server.stdout.take().expect("piped"));
    let mut roles = Vec::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l)? == 0 {
            bail!("the demo server exited before it was ready");
        }
        if l.trim() == "ready" {
            break;
        }
        roles.push(l.trim().to_string());
    }
    eprintln!("    pid {pid}, ring {}", ring.display());
    for r in &roles {
        eprintln!("    {r}");
    }
    // Let the stuck threads be stuck for a while.
    std::thread::sleep(Duration::from_secs(2));

    let probe = bin.join("rip-probe");
    let pid_s = pid.to_string();
    let show = |args: &[&str]| -> Result<()> {
        eprintln!();
        step(&format!("rip-probe {}", args.join(" ")));
        let status = Command::new(&probe).args(args).status()?;
        if !status.success() {
            bail!("rip-probe {} failed ({status})", args.join(" "));
        }
        Ok(())
    };
    let live = show(&["--pid", &pid_s, "--duration", "1s"]);

    step("SIGKILL the demo server; its ring survives on tmpfs");
    let _ = server.kill();
    let _ = server.wait();
    let dead = show(&["dump", ring.to_str().expect("UTF-8 path")]);
    let _ = std::fs::remove_file(&ring);
    live?;
    dead
}
