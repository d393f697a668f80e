//! Programs written for the original header-only librip: its own test.c
//! builds unchanged against librip.h and links with -lrip (static and
//! shared); `rip_snap()` is the inline snap and records its own line at
//! every optimization level, in tail position and under LTO; rings
//! written by the original header are read by `rip-probe dump`.

use std::{path::Path, process::Command};

use rip_tests::{
    TempDir, build_librip_release, read_ring, rip_probe, rip_probe_ok, run, source_line,
    workspace_root,
};

const PROBE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
/// The line of `rip_snap();` in tests/c/original/test.c.
const TEST_C_SNAP_LINE: &str = "original/test.c:23";

fn cc(args: &[&str], out: &Path) {
    let o = run(Command::new("cc").args(args).arg("-o").arg(out));
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn test_c() -> String {
    workspace_root()
        .join("tests/c/original/test.c")
        .display()
        .to_string()
}

/// Runs `prog` in `dir` (test.c writes its ring to ./foo).
fn run_in(dir: &Path, prog: &Path) {
    let o = run(Command::new(prog).current_dir(dir));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_original_test_program_builds_unchanged_and_dumps() {
    let lib = build_librip_release();
    let dir = TempDir::new("/dev/shm", "orig-api");
    // Installed under the names a C program links with: -lrip.
    for (sub, name, file) in [
        ("static", "librip.a", "liblibrip.a"),
        ("shared", "librip.so", "liblibrip.so"),
    ] {
        std::fs::create_dir(dir.join(sub)).unwrap();
        std::os::unix::fs::symlink(lib.join(file), dir.join(sub).join(name)).unwrap();
    }
    let include = workspace_root()
        .join("librip/include")
        .display()
        .to_string();
    let st = dir.join("static").display().to_string();
    let sh = dir.join("shared").display().to_string();
    let programs = [
        (
            dir.join("t_static"),
            vec!["-L", &st, "-lrip", "-ldl", "-lm", "-lgcc_s", "-pthread"],
        ),
        (dir.join("t_shared"), vec!["-L", &sh, "-lrip"]),
    ];
    for (prog, link) in &programs {
        // The source stays where it is: only -I points at our header.
        let mut args = vec![
            "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-I", &include, "-iquote", &include,
        ];
        let src = test_c();
        args.push(&src);
        args.extend(link.iter().copied());
        let rpath = format!("-Wl,-rpath,{sh}");
        args.push(&rpath);
        cc(&args, prog);
        let run_dir = TempDir::new("/dev/shm", "orig-run");
        run_in(run_dir.path(), prog);
        let ring = run_dir.join("foo");
        let out = rip_probe_ok(PROBE, &["dump", ring.to_str().unwrap()]);
        assert!(out.contains("lol") && out.contains("exited"), "{out}");
        assert!(out.contains(TEST_C_SNAP_LINE), "{out}");
        let hist = rip_probe_ok(PROBE, &["dump", ring.to_str().unwrap(), "--threads"]);
        let snaps = hist
            .lines()
            .filter(|l| l.contains(TEST_C_SNAP_LINE))
            .count();
        assert_eq!(snaps, 32, "the last 32 of 255 snaps: {hist}");
    }
}

#[test]
fn original_rings_are_dumped_newest_first_and_symbolized_with_exe() {
    let dir = TempDir::new("/dev/shm", "orig-ring");
    let header = workspace_root()
        .join("tests/c/original-header")
        .display()
        .to_string();
    let src = test_c();
    // -I first: test.c's "librip.h" must be the copy of the original header.
    let nopie = dir.join("o_nopie");
    cc(&["-O2", "-g", "-no-pie", "-iquote", &header, &src], &nopie);
    let pie = dir.join("o_pie");
    cc(
        &["-O2", "-g", "-fPIE", "-pie", "-iquote", &header, &src],
        &pie,
    );
    run_in(dir.path(), &nopie);
    let ring = dir.join("foo");
    assert_eq!(
        std::fs::metadata(&ring).unwrap().len(),
        640,
        "an original ring"
    );
    let r = ring.to_str().unwrap();

    let out = rip_probe_ok(PROBE, &["dump", r, "--exe", nopie.to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        out.contains("slot 1 \"lol\" exited, last 31 snaps, newest first"),
        "{out}"
    );
    let first = lines
        .iter()
        .position(|l| l.contains("{254}"))
        .expect("newest first");
    assert!(lines[first + 1].contains("{253}"), "{out}");
    assert!(lines[first].contains(TEST_C_SNAP_LINE), "{out}");

    let out = rip_probe_ok(PROBE, &["dump", r, "--exe", pie.to_str().unwrap()]);
    assert!(
        out.contains("position-independent (PIE)") && out.contains("{254}"),
        "{out}"
    );
    let json = rip_probe_ok(PROBE, &["dump", r, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["slots"][0]["name"], "lol");
    assert_eq!(v["slots"][0]["entries"][0]["counter"], 254);
    // A ring that is neither: a one-line error.
    std::fs::write(dir.join("junk"), [1u8; 100]).unwrap();
    let (code, _, err) = rip_probe(PROBE, &["dump", dir.join("junk").to_str().unwrap()]);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
}

/// `rip_snap()` at -O0, -O2, -O3, in tail position, inlined into a caller
/// and under LTO: each entry names the line of its own `rip_snap()`, and
/// the value it returns is the address it recorded.
#[test]
fn rip_snap_records_its_own_line_whatever_the_optimizer_does() {
    let lib = build_librip_release();
    let dir = TempDir::new("/dev/shm", "snap-lines");
    let src = workspace_root().join("tests/c/snap_lines.c");
    let text = std::fs::read_to_string(&src).unwrap();
    let line_of = |m: &str| text.lines().position(|l| l.contains(m)).unwrap() as u32 + 1;
    let want = [
        line_of("SNAP: main"),
        line_of("SNAP: tail"),
        line_of("SNAP: inlined"),
    ];
    let include = workspace_root()
        .join("librip/include")
        .display()
        .to_string();
    let a = lib.join("liblibrip.a").display().to_string();
    for (tag, flags) in [
        ("O0", vec!["-O0"]),
        ("O2", vec!["-O2"]),
        ("O3", vec!["-O3"]),
        ("lto", vec!["-O2", "-flto"]),
    ] {
        let prog = dir.join(&format!("lines-{tag}"));
        let mut args: Vec<&str> = flags.clone();
        args.extend([
            "-g",
            "-Wall",
            "-Werror",
            "-I",
            &include,
            src.to_str().unwrap(),
            &a,
        ]);
        args.extend(["-ldl", "-lm", "-lgcc_s", "-pthread"]);
        cc(&args, &prog);
        let ring = dir.join(&format!("{tag}.ring"));
        let o = run(Command::new(&prog).arg(&ring));
        assert!(
            o.status.success(),
            "{tag}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        let r = read_ring(&ring);
        let slot = r.slots().find(|s| s.name == "lines").unwrap();
        let got: Vec<u32> = slot
            .entries
            .iter()
            .map(|e| source_line(&r, e.addr).1)
            .collect();
        assert_eq!(got, want, "{tag}: lines of the snaps");
        let returned = stdout
            .lines()
            .find_map(|l| l.strip_prefix("returned "))
            .unwrap();
        let returned = u64::from_str_radix(returned.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(
            returned, slot.entries[0].addr,
            "{tag}: rip_snap() returns what it recorded"
        );
    }
}
