//! The site table: every snap names its exact file, line and label, from
//! the binary itself, in builds without debug information (Cargo's default
//! release profile, C at -O2 without -g), stripped, and with LTO — in text
//! and JSON, live (`dump --pid`, and once `--pid`) and after SIGKILL
//! (`dump FILE`).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use rip_tests::{
    TempDir, Workload, bpf_tests_enabled, build_librip_release, librip_static, marker_line,
    rip_probe_json, rip_probe_ok, run, target_dir, workspace_root,
};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// One snap site a workload's thread or task is left at.
struct Expect {
    /// `role <name>` thread, or task name (`task:<name>`).
    who: &'static str,
    /// The file as the report shows it.
    file: &'static str,
    line: u32,
    label: Option<&'static str>,
}

/// `cargo build --release` of tests/sites-app with Cargo's defaults (no
/// debug information), LTO or not, in a target directory of its own.
fn build_sites_app(lto: bool) -> PathBuf {
    let root = workspace_root();
    let target = root.join(if lto {
        "target/nested-sites-lto"
    } else {
        "target/nested-sites"
    });
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root.join("tests/sites-app"))
        .args(["build", "--release", "--quiet", "--target-dir"])
        .arg(&target)
        // Whatever the caller's environment says, the profile is Cargo's
        // default release one (plus LTO when asked).
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .env_remove("CARGO_PROFILE_RELEASE_STRIP")
        .env(
            "CARGO_PROFILE_RELEASE_LTO",
            if lto { "true" } else { "false" },
        );
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "building sites-app failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release/sites-app")
}

/// Compiles tests/c/sites.c at -O2 without -g (plus `extra`), linked with
/// librip's static library.
fn build_c_sites(name: &str, extra: &[&str]) -> PathBuf {
    let lib = build_librip_release();
    let dir = target_dir().join(format!("sites-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let root = workspace_root();
    let cc = run(Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("-I")
        .arg(root.join("librip/include"))
        .arg(root.join("tests/c/sites.c"))
        .args(librip_static(&lib)));
    assert!(
        cc.status.success(),
        "cc sites.c failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    out
}

/// A stripped copy of `bin` (`strip`: no .symtab, no debug sections).
fn stripped(bin: &Path) -> PathBuf {
    let out = bin.with_file_name(format!(
        "{}-stripped",
        bin.file_name().unwrap().to_string_lossy()
    ));
    let s = run(Command::new("strip").arg("-o").arg(&out).arg(bin));
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    out
}

/// The section names of an ELF file (`readelf -SW`).
fn sections(bin: &Path) -> String {
    let out = run(Command::new("readelf").arg("-SW").arg(bin));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn rust_sites() -> Vec<Expect> {
    let line = |m: &str| marker_line("sites-app/src/main.rs", &format!("// SITE: {m}"));
    vec![
        Expect {
            who: "alpha",
            file: "src/main.rs",
            line: line("alpha"),
            label: Some("waiting for the order book"),
        },
        Expect {
            who: "beta",
            file: "src/main.rs",
            line: line("beta"),
            label: None,
        },
        Expect {
            who: "task:on-channel",
            file: "src/main.rs",
            line: line("channel"),
            label: Some("waiting on the channel"),
        },
        Expect {
            who: "task:on-mutex",
            file: "src/main.rs",
            line: line("mutex"),
            label: Some("waiting on the mutex"),
        },
    ]
}

fn c_sites() -> Vec<Expect> {
    let line = |m: &str| marker_line("c/sites.c", &format!("SITE: {m} */"));
    vec![
        Expect {
            who: "c-alpha",
            file: "tests/c/sites.c",
            line: line("c-alpha"),
            label: Some("waiting for the order book"),
        },
        Expect {
            who: "c-beta",
            file: "tests/c/sites.c",
            line: line("c-beta"),
            label: None,
        },
    ]
}

/// The report's text line for `e` (by tid or task id) and its JSON
/// location frame.
fn check_report(w: &Workload, text: &str, v: &serde_json::Value, sites: &[Expect], what: &str) {
    for e in sites {
        let (id, frame) = match e.who.strip_prefix("task:") {
            Some(name) => {
                let t = v["tasks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["name"] == name)
                    .unwrap_or_else(|| panic!("{what}: no task {name}: {v}"));
                (t["id"].as_u64().unwrap(), t["location"]["frame"].clone())
            }
            None => {
                let tid = u64::from(w.tid(&format!("role {} ", e.who)));
                let t = v["threads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["tid"] == tid)
                    .unwrap_or_else(|| panic!("{what}: no thread {tid}: {v}"));
                (tid, t["location"]["frame"].clone())
            }
        };
        let file = frame["file"].as_str().unwrap_or_default();
        assert!(
            file.ends_with(e.file) && frame["line"] == e.line,
            "{what}: {} at {file}:{}, want {}:{}: {frame}",
            e.who,
            frame["line"],
            e.file,
            e.line
        );
        assert_eq!(frame["site"], true, "{what}: {frame}");
        match e.label {
            Some(l) => assert_eq!(frame["label"], l, "{what}: {frame}"),
            None => assert!(frame.get("label").is_none(), "{what}: {frame}"),
        }
        // Text: the group line of this thread or task names the site and
        // the label.
        let want = format!("{}:{} ", e.file, e.line);
        // JSON: each site is a group of its own (the two closures of one
        // demangled name included).
        let groups = if e.who.starts_with("task:") {
            "task_groups"
        } else {
            "groups"
        };
        let here: Vec<&serde_json::Value> = v[groups]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["location"].as_str().is_some_and(|l| l.contains(&want)))
            .collect();
        assert_eq!(here.len(), 1, "{what}: one group at {want}: {}", v[groups]);
        assert!(
            here[0]["ids"].as_array().unwrap().iter().any(|i| i == id),
            "{what}: {} in the group at {want}: {}",
            e.who,
            here[0]
        );
        let line = text
            .lines()
            .find(|l| l.contains(&want))
            .unwrap_or_else(|| panic!("{what}: no `{want}` (id {id}) in\n{text}"));
        match e.label {
            Some(l) => assert!(line.ends_with(&format!(" — \"{l}\"")), "{what}: {line}"),
            None => assert!(!line.contains(" — \""), "{what}: {line}"),
        }
    }
}

/// Runs `bin RING`, checks `dump --pid` (and `--pid` when `kernel`), kills
/// it with SIGKILL and checks `dump RING`.
fn check(bin: &Path, sites: &[Expect], kernel: bool, what: &str) {
    let dir = TempDir::new("/dev/shm", "sites");
    let ring = dir.join("sites.ring");
    let ring_s = ring.to_str().unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg(&ring);
    let mut w = Workload::start(cmd);
    let pid = w.pid().to_string();
    let text = rip_probe_ok(CLI, &["dump", "--pid", &pid]);
    let v = rip_probe_json(CLI, &["dump", "--pid", &pid, "--json"]);
    check_report(&w, &text, &v, sites, &format!("{what}, dump --pid"));
    if kernel && bpf_tests_enabled("sites: rip-probe --pid") {
        let args = ["--pid", &pid, "--duration", "200ms"];
        let text = rip_probe_ok(CLI, &args);
        let v = rip_probe_json(CLI, &[&args[..], &["--json"]].concat());
        check_report(&w, &text, &v, sites, &format!("{what}, --pid"));
    }
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let text = rip_probe_ok(CLI, &["dump", ring_s]);
    let v = rip_probe_json(CLI, &["dump", ring_s, "--json"]);
    assert_eq!(v["process"]["alive"], false);
    check_report(&w, &text, &v, sites, &format!("{what}, dump FILE"));
}

/// Cargo's default release profile has no debug information; the same
/// binary stripped has no symbols either. Every site is still exact, and
/// the two closures with the same name are two sites.
#[test]
fn rust_release_without_debug_info_and_stripped() {
    let bin = build_sites_app(false);
    let s = sections(&bin);
    assert!(!s.contains(".debug_info"), "{s}");
    assert!(s.contains(" rip_sites "), "{s}");
    check(&bin, &rust_sites(), true, "Rust release");
    let bare = stripped(&bin);
    let s = sections(&bare);
    assert!(!s.contains(".symtab") && s.contains(" rip_sites "), "{s}");
    check(&bare, &rust_sites(), false, "Rust release, stripped");
}

/// Rust with `lto = true`: the records follow the code LTO moves.
#[test]
fn rust_release_with_lto() {
    let bin = build_sites_app(true);
    check(&bin, &rust_sites(), false, "Rust LTO");
}

/// C at -O2 without -g, stripped, and with -flto.
#[test]
fn c_without_debug_info_stripped_and_lto() {
    let bin = build_c_sites("sites-O2", &[]);
    // librip's static library has debug information; the program's own
    // code has none.
    let info = run(Command::new("readelf").arg("--debug-dump=info").arg(&bin));
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(!info.contains("sites.c"), "sites.c has debug information");
    check(&bin, &c_sites(), false, "C -O2");
    check(&stripped(&bin), &c_sites(), false, "C -O2, stripped");
    let lto = build_c_sites("sites-lto", &["-flto"]);
    check(&lto, &c_sites(), false, "C -O2 -flto");
    check(&stripped(&lto), &c_sites(), false, "C -O2 -flto, stripped");
}

/// A frame that nothing names (a stripped binary's code, no site) shows
/// `module+0xOFF`, and one with a symbol but no line `function+0xOFF`:
/// distinct places stay distinct in text.
#[test]
fn unnamed_frames_keep_their_offsets() {
    use rip_probe::model::Frame;
    let f = Frame {
        addr: 0x1234,
        function: Some("worker".into()),
        function_offset: Some(0x1f),
        ..Frame::default()
    };
    assert_eq!(f.describe(), "worker+0x1f");
    let f = Frame {
        addr: 0x1234,
        module: Some("/usr/bin/app".into()),
        module_offset: Some(0x4bfde3),
        ..Frame::default()
    };
    assert_eq!(f.describe(), "/usr/bin/app+0x4bfde3");
}
