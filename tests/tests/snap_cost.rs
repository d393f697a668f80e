//! The hot path's budget, counted: under callgrind, instructions per snap
//! (a loop of N snaps minus the same loop without them) are at most 10 for
//! Rust's `snap!()` and C's `RIP_SNAP()`. The disassembly of the loops and
//! of `rip_snap` holds no call, syscall, lock or fence. The original
//! header's snap and the non-inline `rip_snap` are counted for comparison.

use std::{path::Path, process::Command};

use rip_tests::{
    TempDir, build_librip_release, callgrind_instructions, read_ring, run, workspace_root,
};

const N: u64 = 100_000;
const BUDGET: f64 = 10.0;

/// Instructions executed inside `rip_loop_<name>` for `n` iterations.
fn collected(bin: &Path, name: &str, n: u64) -> u64 {
    callgrind_instructions(bin, &format!("rip_loop_{name}"), &[name, &n.to_string()])
}

/// One function's disassembly, one instruction mnemonic per line.
fn disassembly(bin: &Path, func: &str) -> Vec<String> {
    let out = run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", &format!("--disassemble={func}")])
        .arg(bin));
    let text = String::from_utf8_lossy(&out.stdout);
    let insns: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once(":\t").map(|(_, i)| i.trim().to_owned()))
        .collect();
    assert!(!insns.is_empty(), "{func} not found in {}", bin.display());
    insns
}

fn assert_plain(bin: &Path, func: &str, allow_call: bool) {
    for i in disassembly(bin, func) {
        let op = i.split_whitespace().next().unwrap_or("");
        // xchg with memory is an implicit lock (`xchg %ax,%ax` is a nop).
        let bad = op.starts_with("lock")
            || op.ends_with("fence")
            || op == "syscall"
            || (op.starts_with("xchg") && i.contains('('))
            || (!allow_call && op.starts_with("call"));
        assert!(!bad, "{func} has `{i}` on the snap path");
    }
}

#[test]
fn a_snap_costs_at_most_ten_instructions() {
    let bin = build_librip_release().join("snap_loops");
    // Rounded to hundredths: a loop's few instructions of setup outside
    // the loop (another register saved) are not a per-snap cost.
    let per_snap = |name: &str, base: &str| -> f64 {
        let d = (collected(&bin, name, N) as f64 - collected(&bin, base, N) as f64) / N as f64;
        (d * 100.0).round() / 100.0
    };
    let rust = per_snap("rust_snap", "rust_empty");
    let c_inline = per_snap("c_inline", "c_empty");
    let c_static = per_snap("c_inline_static", "c_empty");
    let c_rip_snap = per_snap("c_rip_snap", "c_empty");
    let c_call = per_snap("c_call", "c_empty");
    let original = per_snap("original", "c_empty");
    eprintln!("instructions per snap (callgrind, {N} snaps minus the empty loop):");
    eprintln!("  Rust snap!()                 {rust:.2}");
    eprintln!("  C RIP_SNAP() (inline)        {c_inline:.2}");
    eprintln!("  C RIP_SNAP(), linked statically {c_static:.2}");
    eprintln!("  C rip_snap() (inline)        {c_rip_snap:.2}");
    eprintln!("  C (rip_snap)() (call)        {c_call:.2}");
    eprintln!("  original header, inline      {original:.2}");
    assert!(rust <= BUDGET, "Rust snap: {rust} instructions");
    assert!(c_inline <= BUDGET, "C inline snap: {c_inline} instructions");
    assert!(
        c_rip_snap <= BUDGET,
        "C rip_snap(): {c_rip_snap} instructions"
    );
    assert!(
        c_static <= BUDGET,
        "C inline snap (static): {c_static} instructions"
    );

    assert_plain(&bin, "rip_loop_rust_snap", false);
    assert_plain(&bin, "rip_loop_c_inline", false);
    assert_plain(&bin, "rip_loop_c_inline_static", false);
    assert_plain(&bin, "rip_loop_c_rip_snap", false);
    assert_plain(&bin, "rip_snap", false);
    // The loop calls rip_snap, which itself has no call.
    assert_plain(&bin, "rip_loop_c_call", true);
}

/// In an optimized build, `snap!()`'s address names the line of its call
/// site (the macro's debug info is collapsed into the caller).
#[test]
fn optimized_snaps_symbolize_to_the_call_site() {
    let bin = build_librip_release().join("snap_loops");
    let dir = TempDir::new("/dev/shm", "symbolize");
    let ring_path = dir.join("loops.ring");
    let out = run(Command::new(&bin).args(["rust_snap", "40"]).arg(&ring_path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let source = std::fs::read_to_string(workspace_root().join("librip/benches/loops.rs")).unwrap();
    let after = source.find("fn rip_loop_rust_snap").unwrap();
    // The partial line before `fn` counts as the function's line, and the
    // position counts from it.
    let line = source[..after].lines().count()
        + source[after..]
            .lines()
            .position(|l| l.trim() == "snap!();")
            .unwrap();
    let ring = read_ring(&ring_path);
    let slot = ring.slots().next().unwrap();
    assert_eq!(slot.snaps, 40);
    let m = ring.module_of(slot.entries[0].addr).unwrap();
    let out = run(Command::new("addr2line")
        .arg("-e")
        .arg(&m.path)
        .arg(format!("{:#x}", slot.entries[0].addr - m.load_bias)));
    let loc = String::from_utf8_lossy(&out.stdout);
    assert!(
        loc.trim().ends_with(&format!("loops.rs:{line}")),
        "symbolized to {loc}, expected loops.rs:{line}"
    );
}
