//! `cargo xtask dist`: the files a user copies, in one tarball —
//! a static `rip-probe` (runs on any x86-64 Linux, the BPF object is
//! embedded), and librip for C programs (`librip.a`, `librip.so`,
//! `librip.h`, `librip.pc`) — at `target/dist/rip-VER-x86_64-linux.tar.gz`
//! with a `.sha256` beside it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};

use crate::util::{cargo, exec, output, root, step};

/// The target the static binaries are built for: glibc's `libc.a` links
/// them statically (`+crt-static`); non-PIE so that `ldd` and the loader
/// see a plain static executable.
const TARGET: &str = "x86_64-unknown-linux-gnu";
const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static -C relocation-model=static";

/// What `dist` produced.
pub struct Dist {
    /// The unpacked tree (`bin/`, `lib/`, `include/`).
    pub stage: PathBuf,
}

/// The files of the tarball, relative to its top directory.
const FILES: &[&str] = &[
    "bin/rip-probe",
    "include/librip.h",
    "lib/librip.a",
    "lib/librip.so",
    "lib/pkgconfig/librip.pc",
];

/// Builds `bins` (`(package, binary)`) statically in `target/<dir>`
/// (a target directory of its own: other flags would rebuild everything in
/// `target/`, and other packages' features would rebuild the shared
/// dependencies); returns the directory holding them.
pub fn build_static(dir: &str, bins: &[(&str, &str)]) -> Result<PathBuf> {
    let target_dir = root().join("target").join(dir);
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        .env("RUSTFLAGS", STATIC_RUSTFLAGS);
    for (pkg, bin) in bins {
        cmd.args(["-p", pkg, "--bin", bin]);
    }
    exec(&mut cmd, "cargo build (static)")?;
    let out = target_dir.join(TARGET).join("release");
    for (_, bin) in bins {
        check_static(&out.join(bin))?;
    }
    Ok(out)
}

/// Fails unless `exe` is a static executable: no program interpreter and no
/// needed shared library.
pub fn check_static(exe: &Path) -> Result<()> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let data = std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    let elf: ElfFile64 = ElfFile64::parse(&*data)
        .with_context(|| format!("{} is not a 64-bit ELF file", exe.display()))?;
    let interp = elf
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(elf.endian()) == object::elf::PT_INTERP);
    ensure!(
        !interp,
        "{} has a program interpreter: it is not static",
        exe.display()
    );
    let dynamic = elf
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(elf.endian()) == object::elf::PT_DYNAMIC);
    ensure!(
        !dynamic,
        "{} has a dynamic section: it needs shared libraries",
        exe.display()
    );
    Ok(())
}

/// Builds librip's static and shared libraries (normal flags: a static
/// C runtime would drop the cdylib) in `target/dist-build/lib`.
fn build_librip() -> Result<PathBuf> {
    exec(
        cargo()
            .args([
                "build",
                "--release",
                "-p",
                "librip",
                "--lib",
                "--target-dir",
            ])
            .arg(root().join("target/dist-build/lib")),
        "cargo build -p librip",
    )?;
    Ok(root().join("target/dist-build/lib/release"))
}

/// The pkg-config file; `prefix` is the tarball's top directory wherever
/// it is unpacked (pkg-config's `pcfiledir`).
fn pc_file(version: &str) -> String {
    format!(
        "# librip: the recorder of rip (https://example.invalid/rip).\n\
         # Linking librip.a statically? Also define RIP_LINKED_STATICALLY for the\n\
         # faster inline RIP_SNAP(), and use `pkg-config --static`.\n\
         prefix=${{pcfiledir}}/../..\n\
         libdir=${{prefix}}/lib\n\
         includedir=${{prefix}}/include\n\
         \n\
         Name: librip\n\
         Description: Where is every thread: per-thread snap rings in shared memory\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -lrip\n\
         Libs.private: -ldl -lm -pthread\n"
    )
}

/// Runs `cargo xtask dist`.
pub fn run_dist() -> Result<Dist> {
    let version = env!("CARGO_PKG_VERSION");
    step("dist: static rip-probe");
    let bins = build_static("dist-build", &[("rip-probe", "rip-probe")])?;
    step("dist: librip (static and shared)");
    let lib = build_librip()?;

    let name = format!("rip-{version}-x86_64-linux");
    let dist = root().join("target/dist");
    let stage = dist.join(&name);
    let _ = std::fs::remove_dir_all(&stage);
    for d in ["bin", "include", "lib/pkgconfig"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    let copy = |from: &Path, to: &str| {
        std::fs::copy(from, stage.join(to))
            .with_context(|| format!("copying {} to {to}", from.display()))
    };
    copy(&bins.join("rip-probe"), "bin/rip-probe")?;
    copy(&root().join("librip/include/librip.h"), "include/librip.h")?;
    copy(&lib.join("liblibrip.a"), "lib/librip.a")?;
    copy(&lib.join("liblibrip.so"), "lib/librip.so")?;
    std::fs::write(stage.join("lib/pkgconfig/librip.pc"), pc_file(version))?;

    step("dist: tarball");
    let tarball = dist.join(format!("{name}.tar.gz"));
    // Sorted, owned by root, dated at the epoch: the same inputs give the
    // same bytes.
    exec(
        Command::new("tar")
            .current_dir(&dist)
            .args([
                "--sort=name",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "-czf",
            ])
            .arg(&tarball)
            .arg(&name),
        "tar czf",
    )?;
    check_listing(&tarball, &name)?;
    let sum = output(
        Command::new("sha256sum")
            .current_dir(&dist)
            .arg(tarball.file_name().expect("file name")),
    )
    .context("sha256sum failed: is coreutils installed?")?;
    let sha = dist.join(format!("{name}.tar.gz.sha256"));
    std::fs::write(&sha, &sum)?;
    eprintln!("    {}", tarball.display());
    eprintln!("    {}", sum.trim());
    Ok(Dist { stage })
}

/// Fails unless the tarball holds exactly [`FILES`] (plus directories).
fn check_listing(tarball: &Path, top: &str) -> Result<()> {
    let list = output(Command::new("tar").arg("-tzf").arg(tarball))
        .with_context(|| format!("cannot list {}", tarball.display()))?;
    let files = listed_files(&list, top);
    let want: Vec<String> = FILES.iter().map(|f| f.to_string()).collect();
    if files != want {
        bail!("{} holds {files:?}, want {want:?}", tarball.display());
    }
    Ok(())
}

/// The files (not directories) of a `tar -t` listing, relative to `top`, sorted.
fn listed_files(list: &str, top: &str) -> Vec<String> {
    let mut files: Vec<String> = list
        .lines()
        .filter(|l| !l.ends_with('/'))
        .filter_map(|l| l.strip_prefix(top)?.strip_prefix('/'))
        .map(String::from)
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_keeps_files_only() {
        let list = "rip-1/\nrip-1/bin/\nrip-1/bin/rip-probe\nrip-1/lib/librip.a\nother/x\n";
        assert_eq!(
            listed_files(list, "rip-1"),
            ["bin/rip-probe", "lib/librip.a"]
        );
    }

    #[test]
    fn static_check_tells_dynamic_from_static() {
        // The xtask binary itself is dynamic (the normal host build).
        let me = std::env::current_exe().unwrap();
        let err = check_static(&me).unwrap_err().to_string();
        assert!(
            err.contains("not static") || err.contains("shared"),
            "{err}"
        );
        // busybox-static (installed for vmtest) is static, when present.
        let bb = Path::new("/bin/busybox");
        if bb.exists() && output(Command::new("ldd").arg(bb)).is_none() {
            check_static(bb).unwrap();
        }
    }

    #[test]
    fn pc_file_names_the_library() {
        let pc = pc_file("1.2.3");
        assert!(pc.contains("Version: 1.2.3"));
        assert!(pc.contains("Libs: -L${libdir} -lrip"));
    }
}
