//! rip's eBPF programs. Built for `bpfel-unknown-none` by rip-probe's
//! build.rs; on the host this file compiles to a binary that only says so.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]
// The BPF target offers no compare-and-swap through `core::sync::atomic`
// (it assumes none); the kernel's verifier has one from 5.12, which the
// intrinsic reaches (see `programs::claim`).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod call_programs;
#[cfg(target_arch = "bpf")]
mod floor_programs;
#[cfg(target_arch = "bpf")]
mod futex;
#[cfg(target_arch = "bpf")]
mod iter_programs;
#[cfg(target_arch = "bpf")]
mod leak_programs;
#[cfg(target_arch = "bpf")]
mod offcpu_programs;
#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!(
        "rip-ebpf holds BPF programs: rip-probe's build.rs builds it for bpfel-unknown-none; \
         run `cargo build -p rip-probe` instead"
    );
    std::process::exit(2);
}
