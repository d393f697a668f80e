//! Builds rip-ebpf's BPF programs with aya-build (nightly, `-Z build-std=core`,
//! bpf-linker) into OUT_DIR, where `include_bytes_aligned!` embeds them.
//!
//! When a piece of the toolchain is missing the build stops with one line
//! that names it and says to run `cargo xtask setup`.

use std::{path::Path, process::Command};

/// The toolchain that builds the BPF object; `cargo xtask setup` installs
/// what it needs (rust-src, bpf-linker against its LLVM).
const TOOLCHAIN: &str = "nightly";

fn main() {
    if let Err(missing) = check_toolchain() {
        eprintln!("error: cannot build rip's eBPF programs: {missing}; run `cargo xtask setup`");
        std::process::exit(1);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rip-ebpf");
    let root = root.to_str().expect("workspace path is UTF-8");
    let pkg = aya_build::Package {
        name: "rip-ebpf",
        root_dir: root,
        ..Default::default()
    };
    if let Err(e) = aya_build::build_ebpf([pkg], aya_build::Toolchain::Custom(TOOLCHAIN)) {
        eprintln!("error: building rip's eBPF programs failed: {e:#}");
        std::process::exit(1);
    }
}

fn check_toolchain() -> Result<(), String> {
    let out = Command::new("rustup")
        .args(["run", TOOLCHAIN, "rustc", "--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustup not found ({e})"))?;
    if !out.status.success() {
        return Err(format!("the {TOOLCHAIN} toolchain is not installed"));
    }
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !Path::new(&sysroot)
        .join("lib/rustlib/src/rust/library/core")
        .is_dir()
    {
        return Err(format!(
            "the {TOOLCHAIN} toolchain has no rust-src component"
        ));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("bpf-linker").is_file()))
        .unwrap_or(false);
    if !on_path {
        return Err("bpf-linker is not on PATH".into());
    }
    Ok(())
}
