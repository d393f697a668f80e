//! `cargo xtask test`: the README's test command and the whole of CI.
//! `--loaded` runs the same checks with CPU-bound loops beside them, as on
//! a machine busy with other work.

use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::Result;

use crate::{
    setup,
    util::{cargo, exec, step},
};

/// Fuzz targets, how long each runs in every test run (about 30 s in
/// all, most of it on the reader's bytes), and whether it is built as
/// rip-probe ships (release, overflow checks off) rather than with debug
/// assertions. The ELF symbol tables are read by blazesym, whose offset
/// arithmetic may wrap on a hostile file by design (the wrapped offset is
/// refused by its range check, or by the kernel at attach): what must not
/// happen there is what the shipped binary would suffer, a panic, a hang
/// or memory without bound.
const FUZZ_TARGETS: [(&str, u32, bool); 11] = [
    ("reader", 9, false),
    ("alloc_table", 3, false),
    ("cfi", 3, false),
    ("ring_file", 6, false),
    ("ring_poll", 3, false),
    ("maps", 5, false),
    ("sites", 5, false),
    ("elf_symbols", 6, true),
    ("perf_map", 4, false),
    ("gopclntab", 5, false),
    ("python_decode", 4, false),
];

/// Fuzzes each target for a bounded time, from its committed corpus. New
/// inputs go to a scratch corpus under target/, so the committed one only
/// changes by hand.
fn fuzz_reader() -> Result<()> {
    let root = crate::util::root();
    for (target, seconds, as_shipped) in FUZZ_TARGETS {
        let scratch = root.join(format!("target/fuzz-corpus/{target}"));
        std::fs::create_dir_all(&scratch)?;
        exec(
            Command::new("rustup")
                .current_dir(root.join("fuzz"))
                .args(["run", setup::NIGHTLY, "cargo", "fuzz", "run"])
                .args(as_shipped.then_some("--release"))
                .arg(target)
                .arg(&scratch)
                .arg(format!("corpus/{target}"))
                .arg("--")
                .arg(format!("-max_total_time={seconds}")),
            &format!("cargo fuzz run {target}"),
        )?;
    }
    Ok(())
}

/// How many CPU-bound loops `--loaded` runs beside the tests.
pub const LOADS: usize = 2;

/// CPU-bound loops, as threads of this process: they end when it does,
/// whether the run passed, failed or was interrupted, and when dropped.
struct Load {
    stop: Arc<AtomicBool>,
    loops: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `n` loops that never block.
    fn start(n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let loops = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..100_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    }
                })
            })
            .collect();
        Load { stop, loops }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for l in self.loops.drain(..) {
            let _ = l.join();
        }
    }
}

/// Setup, formatting, lints (host and BPF target), every test of the
/// workspace, privileged ones included, then the guest kernels (vmtest)
/// and the fuzzers. With `loaded`, [`LOADS`] CPU-bound loops run from the
/// tests on to the end: the same checks must hold on a busy machine.
pub fn run_tests(loaded: bool) -> Result<()> {
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

    let _load = loaded.then(|| {
        step(&format!(
            "{LOADS} CPU-bound loops beside the tests, vmtest and fuzzing (--loaded)"
        ));
        Load::start(LOADS)
    });

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

    // vmtest built the dist tree the image is made of.
    step("container image from the Containerfile (where a builder exists)");
    crate::dist::build_image(&crate::dist::stage_dir(), true)?;

    let names: Vec<&str> = FUZZ_TARGETS.iter().map(|t| t.0).collect();
    let seconds: u32 = FUZZ_TARGETS.iter().map(|t| t.1).sum();
    step(&format!(
        "cargo fuzz run {} ({seconds} s in all, the committed corpora plus scratch ones)",
        names.join(", ")
    ));
    fuzz_reader()?;

    eprintln!(
        "xtask test{}: all green in {:.0}s",
        if loaded { " --loaded" } else { "" },
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
