//! `cargo xtask bench --alloc-only` (and a section of the full bench):
//! what librip's allocation sampler costs an allocation-heavy program.
//! `tests/bench/alloc_mix.c` (malloc/calloc/realloc/free with a realistic
//! size mix) runs untraced, with librip preloaded but not sampling, and
//! preloaded sampling at the default mean and at every call; rounds
//! alternate the four, and each reports its own CPU time (user + system),
//! which other work on the machine does not add to. Printed and written
//! to target/bench/alloc.md.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use super::out_dir;
use crate::util::{cargo, exec, root, step};

/// malloc/free operations per run (every-call sampling runs a tenth).
const OPS: u64 = 20_000_000;

/// Runs the rows and prints their section.
pub fn run_alloc_only() -> Result<()> {
    let s = section(7)?;
    let md = out_dir().join("alloc.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// One configuration: name, environment, whether librip is preloaded, and
/// the divisor of `OPS` it runs.
type Config = (
    &'static str,
    &'static [(&'static str, &'static str)],
    bool,
    u64,
);

/// The configurations.
const CONFIGS: [Config; 4] = [
    ("untraced", &[], false, 1),
    ("librip preloaded, not sampling", &[], true, 1),
    (
        "sampling, mean 512 KiB (`RIP_ALLOC_SAMPLE=512k`)",
        &[("RIP_ALLOC_SAMPLE", "512k")],
        true,
        1,
    ),
    (
        "sampling every allocation (`RIP_ALLOC_SAMPLE=1`)",
        &[("RIP_ALLOC_SAMPLE", "1")],
        true,
        10,
    ),
];

/// Measures `rounds` rounds; the section of docs/BENCHMARKS.md.
pub fn section(rounds: usize) -> Result<String> {
    step("bench: cargo build --release -p librip --lib --features sampler");
    let target = root().join("target/bench-sampler");
    exec(
        cargo()
            .args([
                "build",
                "--release",
                "-p",
                "librip",
                "--lib",
                "--features",
                "sampler",
            ])
            .arg("--target-dir")
            .arg(&target),
        "cargo build -p librip --features sampler",
    )?;
    let lib = target.join("release/liblibrip.so");
    let out = out_dir();
    std::fs::create_dir_all(&out)?;
    let exe = out.join("alloc_mix");
    exec(
        Command::new("cc")
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(root().join("tests/bench/alloc_mix.c")),
        "cc tests/bench/alloc_mix.c",
    )?;
    let rings = out.join("alloc-rings");
    let _ = std::fs::remove_dir_all(&rings);
    std::fs::create_dir_all(&rings)?;
    let mut per_op: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    for round in 0..rounds {
        step(&format!(
            "bench: allocation sampler, round {}/{rounds}",
            round + 1
        ));
        for (i, (_, env, preload, div)) in CONFIGS.iter().enumerate() {
            let ops = OPS / div;
            per_op[i].push(run(&exe, &lib, &rings, env, *preload, ops)? as f64 / ops as f64);
        }
    }
    let _ = std::fs::remove_dir_all(&rings);
    let med: Vec<f64> = per_op.iter_mut().map(|v| median(v)).collect();
    let mut s = String::new();
    writeln!(s, "## Allocation sampler\n")?;
    writeln!(
        s,
        "`cargo xtask bench --alloc-only`: `tests/bench/alloc_mix.c` ({} M operations, each \
         a malloc, calloc or realloc replacing one of 8,192 live blocks and the free of the \
         block it replaces; 60 % of 16-64 B, 30 % up to 512 B, 9 % up to 4 KiB, 1 % up to \
         64 KiB; {} M with every allocation sampled), CPU time per operation (user + system, \
         as the program measures it), median of {rounds} alternating rounds. Kernel {}.\n",
        OPS / 1_000_000,
        OPS / 10 / 1_000_000,
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim()
    )?;
    writeln!(
        s,
        "| run | CPU per operation | vs untraced |\n| --- | ---: | ---: |"
    )?;
    for (i, (name, ..)) in CONFIGS.iter().enumerate() {
        writeln!(
            s,
            "| {name} | {:.1} ns | {:+.1} % |",
            med[i],
            (med[i] / med[0] - 1.0) * 100.0
        )?;
    }
    writeln!(
        s,
        "\nThe commands: `target/bench/alloc_mix [OPS]`, and the same with \
         `LD_PRELOAD=target/bench-sampler/release/liblibrip.so` plus the variable shown \
         (built by `cargo build --release -p librip --lib --features sampler \
         --target-dir target/bench-sampler`)."
    )?;
    Ok(s)
}

/// One run: its CPU time in ns.
fn run(
    exe: &Path,
    lib: &Path,
    rings: &Path,
    env: &[(&str, &str)],
    preload: bool,
    ops: u64,
) -> Result<u64> {
    let mut cmd = Command::new(exe);
    cmd.arg(ops.to_string());
    if preload {
        cmd.env("LD_PRELOAD", lib);
    }
    let ring: PathBuf = rings.join("mix.%p.ring");
    cmd.env("RIP_ALLOC_RING", &ring).envs(env.iter().copied());
    let out = cmd
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "cpu_ns")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no cpu_ns in {text:?}"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
