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
    step("build rip-probe (release)");
    exec(
        cargo().args([
            "build",
            "--release",
            "-p",
            "rip-probe",
            "--bin",
            "rip-probe",
        ]),
        "cargo build --release",
    )?;
    // The server is built as most programs ship: Cargo's default release
    // profile, without debug information (the workspace's release profile
    // has line tables). Its snaps are still named exactly, from the site
    // table librip writes into the binary. A target directory of its own
    // keeps the two profiles from rebuilding each other's artifacts.
    step("build the demo server (release, no debug information)");
    let demo_target = root().join("target/demo");
    exec(
        cargo()
            .args([
                "build",
                "--release",
                "-p",
                "rip-tests",
                "--bin",
                "rip-demo-server",
                "--config",
                "profile.release.debug=false",
                // What Cargo does by itself without debug information
                // (here the rip-ebpf override stops it): std's debug
                // information is stripped too.
                "--config",
                "profile.release.strip=\"debuginfo\"",
                "--target-dir",
            ])
            .arg(&demo_target),
        "cargo build --release (demo server)",
    )?;
    let bin = root().join("target/release");
    let server_bin = demo_target.join("release/rip-demo-server");
    let ring = PathBuf::from(format!("/dev/shm/rip-demo-{}.ring", std::process::id()));

    step("start the demo server");
    let mut server = Command::new(&server_bin)
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
    let svg = demo_target.join("offcpu-flamegraph.svg");
    let offcpu = show(&[
        "offcpu",
        "--pid",
        &pid_s,
        "--duration",
        "3s",
        "--svg",
        svg.to_str().expect("UTF-8 path"),
    ]);

    step("SIGKILL the demo server; its ring survives on tmpfs");
    let _ = server.kill();
    let _ = server.wait();
    let dead = show(&["dump", ring.to_str().expect("UTF-8 path")]);
    let _ = std::fs::remove_file(&ring);
    live?;
    dead?;
    offcpu?;
    eprintln!();
    step(&format!(
        "off-CPU flame graph of the demo server (3 s): {} — open it in a browser",
        svg.display()
    ));
    Ok(())
}
