//! Compiles the C half of librip (the thread-local cursor, the sink and the
//! non-inline `rip_snap`) and the C loops the snap benchmark measures.

use std::{env, path::PathBuf};

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=include/librip.h");
    println!("cargo:rerun-if-changed=benches/c");
    // For dependents' build scripts (DEP_RIP_INCLUDE).
    println!("cargo:include={}", dir.join("include").display());

    let mut c = cc::Build::new();
    c.file(dir.join("csrc/rip.c"))
        .file(dir.join("csrc/alloc.c"))
        .file(dir.join("csrc/unwind.c"))
        .file(dir.join("csrc/cfi.c"));
    // The malloc family itself only with the feature: a Rust program that
    // links librip (rip-probe reads rings through it) keeps its allocator.
    let sampler = env::var_os("CARGO_FEATURE_SAMPLER").is_some();
    c.include(dir.join("include"))
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("rip_c");
    if sampler {
        // Without a frame pointer (which cc adds to builds with debug
        // info): a call that is not sampled is then a bare tail call to
        // the real function, with no frame set up and torn down around it
        // on every malloc and free of the program.
        cc::Build::new()
            .file(dir.join("csrc/alloc_interpose.c"))
            .include(dir.join("include"))
            .opt_level(2)
            .force_frame_pointer(false)
            .flag("-fomit-frame-pointer")
            .warnings(true)
            .extra_warnings(true)
            .warnings_into_errors(true)
            .compile("rip_c_interpose");
    }

    // The cdylib's version script lists only Rust symbols; these C ones are
    // part of the ABI too (a second version script is merged with it).
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        dir.join("csrc/exports.map").display()
    );
    if sampler {
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            dir.join("csrc/exports_sampler.map").display()
        );
    }

    // Built but not linked into the library: only the bench names it.
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    // Compiled as a distribution's cc compiles executables (-fPIE), so the
    // original-style snap sees its extern thread-locals as its users did.
    cc::Build::new()
        .file(dir.join("benches/c/snap_loops.c"))
        .file(dir.join("benches/c/snap_loops_static.c"))
        .file(dir.join("benches/c/original_storage.c"))
        .include(dir.join("include"))
        .opt_level(2)
        .pic(false)
        .flag("-fPIE")
        .cargo_metadata(false)
        .compile("rip_bench_loops");
    println!("cargo:rustc-link-search=native={}", out.display());
}
