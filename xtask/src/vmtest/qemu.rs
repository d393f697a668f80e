//! Booting a guest: qemu with software emulation (TCG; KVM is not
//! available on these machines), the serial console captured to a log.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

/// How a guest run ended.
pub enum Outcome {
    /// qemu exited by itself (the guest powered off, or panicked with
    /// `panic=-1` and `-no-reboot`).
    Exited,
    /// Killed after the time limit.
    TimedOut,
}

/// Boots `vmlinuz` with `initrd` and `smp` CPUs, the serial console written
/// to `log`, killing qemu after `timeout`. Returns how it ended and how long
/// it took.
pub fn boot(
    vmlinuz: &Path,
    initrd: &Path,
    log: &Path,
    smp: u32,
    timeout: Duration,
) -> Result<(Outcome, Duration)> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let t = Instant::now();
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-m", "3G"])
        .args(["-smp", &smp.to_string()])
        .args(["-nographic", "-no-reboot", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 quiet panic=-1"])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start qemu-system-x86_64: run cargo xtask setup")?;
    loop {
        if child.try_wait()?.is_some() {
            return Ok((Outcome::Exited, t.elapsed()));
        }
        if t.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Ok((Outcome::TimedOut, t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
