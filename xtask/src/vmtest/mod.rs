//! `cargo xtask vmtest`: rip-probe on the kernels people run. Builds the
//! static binaries a user would copy (`cargo xtask dist`), the guest suite
//! (`rip-vmcheck`) and static workloads, packs them into an initramfs, boots
//! each Debian kernel under qemu (TCG), and prints a kernel × check matrix
//! (also at `target/vmtest/matrix.md`), with a `host` row where the same
//! suite runs directly. Fails if any cell fails.

mod initramfs;
pub(crate) mod kernels;
mod matrix;
mod qemu;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::util::{apt_install, exec, is_root, output, root, step};
use matrix::Row;

/// What `vmtest` runs, from the command line.
pub struct Options {
    /// Kernel names; empty: all of them.
    pub kernels: Vec<String>,
    /// Guests booted at the same time.
    pub jobs: usize,
    /// CPUs per guest.
    pub smp: u32,
    /// Time limit per guest.
    pub timeout: Duration,
    /// Skip the host row.
    pub no_host: bool,
}

/// Guests at a time by default. Measured on 2 cores with the five guests:
/// 2 at a time with one CPU each took 22 s in all, one at a time 40 s with
/// one CPU and 35 s with two, 2 at a time with two CPUs each 35 s.
pub const DEFAULT_JOBS: usize = 2;
/// CPUs per guest by default.
pub const DEFAULT_SMP: u32 = 1;
/// Seconds a guest may run by default: a guest takes about 10 s under TCG
/// here, so this only catches hangs.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// The Debian packages vmtest needs, by the command each provides.
pub const APT_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
];

/// Runs `cargo xtask vmtest`.
pub fn run_vmtest(opts: &Options) -> Result<()> {
    let t0 = Instant::now();
    let chosen: Vec<&kernels::Kernel> = if opts.kernels.is_empty() {
        kernels::KERNELS.iter().collect()
    } else {
        opts.kernels
            .iter()
            .map(|n| kernels::by_name(n))
            .collect::<Result<_>>()?
    };
    step("vmtest: qemu, busybox-static, cpio");
    tools()?;
    let out = root().join("target/vmtest");
    std::fs::create_dir_all(&out)?;

    let dist = crate::dist::run_dist()?;
    step("vmtest: the guest suite (static rip-vmcheck)");
    let bins = crate::dist::build_static("vmtest-build", &[("rip-tests", "rip-vmcheck")])?;
    let vmcheck = bins.join("rip-vmcheck");
    step("vmtest: static workloads");
    let (stuck, uninstrumented) = workloads(&dist.stage, &out.join("bin"))?;
    let probe = dist.stage.join("bin/rip-probe");

    step("vmtest: initramfs");
    let initrd = out.join("initramfs.cpio.gz");
    initramfs::write(
        &initrd,
        &busybox()?,
        &[
            ("rip-probe", &probe),
            ("rip-vmcheck", &vmcheck),
            ("vm_stuck", &stuck),
            ("uninstrumented", &uninstrumented),
            (
                "many_functions",
                &uninstrumented.with_file_name("many_functions"),
            ),
            ("heap_leaks", &uninstrumented.with_file_name("heap_leaks")),
        ],
    )?;
    eprintln!(
        "    {} ({:.1} MB)",
        initrd.display(),
        std::fs::metadata(&initrd)?.len() as f64 / 1e6
    );

    step("vmtest: kernels (cached in ~/.cache/rip/vmtest)");
    let mut images = Vec::new();
    for k in &chosen {
        let img = kernels::fetch(k).with_context(|| format!("fetching kernel {}", k.name))?;
        eprintln!(
            "    {}: {} ({})",
            k.name,
            img.package,
            img.vmlinuz.display()
        );
        images.push((k.name, img));
    }

    let mut rows = Vec::new();
    if !opts.no_host {
        step("vmtest: host");
        rows.push(host_row(&vmcheck, &probe, &stuck, &uninstrumented, &out)?);
    }

    step(&format!(
        "vmtest: {} guest(s), {} at a time, -smp {} (limit {}s each)",
        images.len(),
        opts.jobs,
        opts.smp,
        opts.timeout.as_secs()
    ));
    let queue = Mutex::new(images.into_iter().enumerate().collect::<Vec<_>>());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                    let Some((i, (name, img))) = next else { break };
                    let row = guest_row(name, &img, &initrd, &out, opts);
                    eprintln!(
                        "    {name}: {:.0}s, {}",
                        row.seconds,
                        if row.ok() { "all PASS" } else { "FAILED" }
                    );
                    done.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((i, row));
                }
            });
        }
    });
    let mut guests = done.into_inner().unwrap_or_else(|e| e.into_inner());
    guests.sort_by_key(|(i, _)| *i);
    rows.extend(guests.into_iter().map(|(_, r)| r));

    let md = matrix::markdown(&rows);
    let md_path = out.join("matrix.md");
    std::fs::write(&md_path, &md)?;
    println!("\n{md}");
    eprintln!(
        "vmtest: matrix in {}, logs in {}, {:.0}s in all",
        md_path.display(),
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "vmtest failed on {}: see {} and target/vmtest/<kernel>.log",
            failed.join(", "),
            md_path.display()
        );
    }
    Ok(())
}

/// Installs what is missing (as root) or says how to.
fn tools() -> Result<()> {
    let missing = crate::util::missing_packages(APT_PACKAGES);
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing {}: run cargo xtask setup (or sudo apt-get install -y {})",
            missing.join(", "),
            missing.join(" ")
        );
    }
    apt_install(&missing)?;
    kernels::check_qemu()
}

/// The static busybox for the guests.
fn busybox() -> Result<PathBuf> {
    let path = output(Command::new("sh").args(["-c", "command -v busybox"]))
        .map(|p| PathBuf::from(p.trim()))
        .context("busybox not found: run cargo xtask setup")?;
    crate::dist::check_static(&path)
        .context("the guests need a static busybox: run apt-get install busybox-static")?;
    Ok(path)
}

/// Compiles the C workloads with `gcc -static` against the dist's librip.a
/// into `dir`: `vm_stuck` (librip, threads blocked at known snaps) and
/// `uninstrumented` (no librip, for --uprobe).
fn workloads(stage: &Path, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let c = root().join("tests/c");
    let stuck = dir.join("vm_stuck");
    exec(
        Command::new("cc")
            .args([
                "-static", "-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
            ])
            .args(["-pthread", "-DRIP_LINKED_STATICALLY", "-I"])
            .arg(stage.join("include"))
            .arg("-o")
            .arg(&stuck)
            .arg(c.join("vm_stuck.c"))
            .arg(stage.join("lib/librip.a"))
            .args(["-ldl", "-lm"]),
        "cc -static vm_stuck.c",
    )?;
    let uninstrumented = dir.join("uninstrumented");
    exec(
        Command::new("cc")
            .args(["-static", "-O2", "-g", "-pthread", "-o"])
            .arg(&uninstrumented)
            .arg(c.join("uninstrumented.c")),
        "cc -static uninstrumented.c",
    )?;
    // 1,000 functions for uprobes in bulk; rip-vmcheck finds it beside
    // `uninstrumented`.
    let many = dir.join("many_functions");
    exec(
        Command::new("cc")
            .args(["-static", "-O2", "-g", "-o"])
            .arg(&many)
            .arg(c.join("many_functions.c")),
        "cc -static many_functions.c",
    )?;
    // The heap's uprobes go on glibc's malloc family inside the
    // executable; -O2 without frame pointers, as Debian builds it (its
    // stacks come from the CFI).
    let heap = dir.join("heap_leaks");
    exec(
        Command::new("cc")
            .args(["-static", "-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&heap)
            .arg(c.join("heap_leaks.c")),
        "cc -static heap_leaks.c",
    )?;
    for exe in [&stuck, &uninstrumented, &many, &heap] {
        crate::dist::check_static(exe)?;
    }
    Ok((stuck, uninstrumented))
}

/// The suite run directly on this machine.
fn host_row(vmcheck: &Path, probe: &Path, stuck: &Path, uninst: &Path, out: &Path) -> Result<Row> {
    let mut row = Row {
        name: "host".into(),
        ..Row::default()
    };
    if !is_root() {
        row.error = Some("not root: rip-probe --pid needs root (CAP_BPF, CAP_PERFMON)".into());
        return Ok(row);
    }
    let t = Instant::now();
    let o = Command::new(vmcheck)
        .arg("--probe")
        .arg(probe)
        .arg("--stuck")
        .arg(stuck)
        .arg("--uninstrumented")
        .arg(uninst)
        .output()
        .context("cannot run rip-vmcheck")?;
    row.seconds = t.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&o.stdout);
    std::fs::write(out.join("host.log"), &*log)?;
    if !o.stderr.is_empty() {
        row.error = Some(format!(
            "rip-vmcheck: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    row.parse(&log);
    eprintln!(
        "    host: {:.0}s, {}",
        row.seconds,
        if row.ok() { "all PASS" } else { "FAILED" }
    );
    Ok(row)
}

/// One guest: boot, then parse its serial log.
fn guest_row(name: &str, img: &kernels::Image, initrd: &Path, out: &Path, opts: &Options) -> Row {
    let mut row = Row {
        name: name.into(),
        package: img.package.clone(),
        ..Row::default()
    };
    let log = out.join(format!("{name}.log"));
    match qemu::boot(&img.vmlinuz, initrd, &log, opts.smp, opts.timeout) {
        Ok((outcome, took)) => {
            row.seconds = took.as_secs_f64();
            if let qemu::Outcome::TimedOut = outcome {
                row.error = Some(format!(
                    "timed out after {}s (qemu killed)",
                    opts.timeout.as_secs()
                ));
            }
            let text = std::fs::read(&log)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            if !text.contains("RIPBOOT") && row.error.is_none() {
                let last = text
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                row.error = Some(format!("the guest did not reach /init: {}", last.trim()));
            }
            row.parse(&text);
        }
        Err(e) => row.error = Some(format!("{e:#}")),
    }
    row
}
