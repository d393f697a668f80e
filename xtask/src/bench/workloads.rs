//! Builds what the bench runs: rip-probe, the demo server and the Rust
//! loop (release), librip's static library, and the C workloads of
//! `tests/bench/` into `target/bench/`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use super::{peers::Peers, proc::shell_words};
use crate::util::{cargo, exec, root};

/// A built executable and the command that built it.
#[derive(Clone, Debug)]
pub struct Exe {
    /// Absolute path.
    pub path: PathBuf,
    /// The build command, as run from the workspace root.
    pub built_by: String,
}

impl Exe {
    /// The path relative to the workspace root, for the report.
    pub fn shown(&self) -> String {
        rel(&self.path)
    }
}

/// `path` relative to the workspace root when it is inside it.
pub fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Everything the bench runs.
pub struct Workloads {
    /// The loop without tracing (dynamic probes attach to its `f`).
    pub loop_plain: Exe,
    /// The loop with librip's `RIP_SNAP()` in `f`.
    pub loop_librip: Exe,
    /// The Rust loop with `snap!()` in `f`.
    pub loop_rust: Exe,
    /// The loop with a USDT marker in `f`.
    pub loop_usdt: Result<Exe, String>,
    /// The loop with an LTTng-UST tracepoint in `f`.
    pub loop_lttng: Result<Exe, String>,
    /// getppid loop and ping-pong.
    pub overhead: Exe,
    /// Runs a command and reports its peak RSS and wall time.
    pub maxrss: Exe,
    /// The release rip-probe.
    pub rip_probe: Exe,
    /// Attaches rip-probe's uprobe through its library.
    pub uprobe_lib: Exe,
    /// The release demo server (thousands of blocked threads).
    pub demo_server: Exe,
    /// `rip-dump-workload` (a ring of many live slots).
    pub dump_workload: Exe,
    /// `rip-tokio-workload` (tokio tasks idle at one await).
    pub tokio_workload: Exe,
}

const CARGO_ARGS: &[&str] = &[
    "build",
    "--release",
    "-p",
    "librip",
    "--lib",
    "-p",
    "rip-probe",
    "--bin",
    "rip-probe",
    "-p",
    "rip-tests",
    "--bin",
    "rip-demo-server",
    "--bin",
    "rip-dump-workload",
    "--bin",
    "rip-tokio-workload",
    "--bin",
    "rip-bench-loop",
    "--bin",
    "rip-bench-uprobe",
];

/// Builds everything; the USDT and LTTng loops only when their headers
/// are available.
pub fn build(peers: &Peers) -> Result<Workloads> {
    exec(cargo().args(CARGO_ARGS), "cargo build --release")?;
    let release = root().join("target/release");
    let cargo_cmd = format!("cargo {}", CARGO_ARGS.join(" "));
    let cargo_exe = |name: &str| Exe {
        path: release.join(name),
        built_by: cargo_cmd.clone(),
    };
    let out = root().join("target/bench");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let lib = release.join("liblibrip.a");
    let librip_flags = [
        "-DLOOP_LIBRIP",
        "-Ilibrip/include",
        &rel(&lib),
        "-pthread",
        "-ldl",
        "-lm",
        "-lgcc_s",
    ];
    let lttng_flags = ["-DLOOP_LTTNG", "-Itests/bench", "-llttng-ust", "-ldl"];
    let optional = |pkgs: &[&str], name: &str, flags: &[&str]| -> Result<Exe, String> {
        peers.need(pkgs)?;
        cc("loop.c", name, flags).map_err(|e| format!("{e:#}"))
    };
    Ok(Workloads {
        loop_plain: cc("loop.c", "loop-plain", &[])?,
        loop_librip: cc("loop.c", "loop-librip", &librip_flags)?,
        loop_rust: cargo_exe("rip-bench-loop"),
        loop_usdt: optional(&["systemtap-sdt-dev"], "loop-usdt", &["-DLOOP_USDT"]),
        loop_lttng: optional(&["liblttng-ust-dev"], "loop-lttng", &lttng_flags),
        overhead: cc("overhead.c", "overhead", &["-pthread"])?,
        maxrss: cc("maxrss.c", "maxrss", &[])?,
        rip_probe: cargo_exe("rip-probe"),
        uprobe_lib: cargo_exe("rip-bench-uprobe"),
        demo_server: cargo_exe("rip-demo-server"),
        dump_workload: cargo_exe("rip-dump-workload"),
        tokio_workload: cargo_exe("rip-tokio-workload"),
    })
}

/// Compiles `tests/bench/<src>` into `target/bench/<name>`, flags after
/// the source (libraries last).
fn cc(src: &str, name: &str, flags: &[&str]) -> Result<Exe> {
    let out = format!("target/bench/{name}");
    let mut words = vec!["cc", "-O2", "-g", "-Wall", "-Wextra", "-o", &out];
    let src = format!("tests/bench/{src}");
    words.push(&src);
    words.extend_from_slice(flags);
    let res = Command::new(words[0])
        .args(&words[1..])
        .current_dir(root())
        .output()
        .context("running cc")?;
    let cmd = shell_words(&words);
    if !res.status.success() {
        let err = String::from_utf8_lossy(&res.stderr);
        let first = err
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("no message");
        bail!("`{cmd}` failed: {}", first.trim());
    }
    Ok(Exe {
        path: root().join(out),
        built_by: cmd,
    })
}
