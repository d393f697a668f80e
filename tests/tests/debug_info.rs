//! Names and lines for a binary shipped without debug information, from
//! its separate debug file: found by build-id under
//! `/usr/lib/debug/.build-id/`, or fetched from a debuginfod server (elfutils'
//! `debuginfod`, run on loopback by the test) when `DEBUGINFOD_URLS` is set.
//! The binary is `tests/c/split_debug.c`, split as distributions split
//! theirs: `objcopy --only-keep-debug`, then `strip` (without a
//! `.gnu_debuglink`, so that the build-id is what finds the file).

use std::{
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use rip_tests::{TempDir, Workload, bpf_tests_enabled, build_c};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// A stripped copy of `split_debug.c` built with `variant`, its debug
/// file, and its build-id in hex.
struct Split {
    binary: PathBuf,
    debug: PathBuf,
    build_id: String,
}

impl Split {
    /// Where a debug package would install its debug file.
    fn installed(&self) -> PathBuf {
        PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &self.build_id[..2],
            &self.build_id[2..]
        ))
    }
}

fn tool(cmd: &mut Command) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(st.success(), "{cmd:?} failed");
}

fn split(dir: &Path, variant: u32) -> Split {
    let built = build_c(
        "split_debug",
        &[&format!("-DVARIANT={variant}"), "-Wl,--build-id=sha1"],
    );
    let debug = dir.join("split_debug.debug");
    let binary = dir.join("split_debug");
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&built)
            .arg(&debug),
    );
    tool(
        Command::new("strip")
            .arg("-s")
            .arg("-o")
            .arg(&binary)
            .arg(&built),
    );
    let out = Command::new("readelf")
        .arg("-n")
        .arg(&binary)
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&out.stdout);
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id")
        .to_string();
    // What is tested: the stripped binary has no DWARF and no symbols.
    let out = Command::new("readelf")
        .arg("-S")
        .arg(&binary)
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&out.stdout);
    assert!(
        !sections.contains(".debug_")
            && !sections.contains(".symtab")
            && !sections.contains(".gnu_debuglink"),
        "{sections}"
    );
    Split {
        binary,
        debug,
        build_id,
    }
}

/// The line of `split_debug.c` that holds `marker`.
fn source_line(marker: &str) -> u64 {
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/c/split_debug.c")).unwrap();
    src.lines()
        .position(|l| l.contains(marker))
        .expect("marker") as u64
        + 1
}

/// The frames (function, file, line) of the process's only thread, from
/// `rip-probe --pid PID --json`, with `env` set for rip-probe.
fn frames(pid: u32, env: &[(&str, &str)]) -> Vec<(String, String, Option<u64>)> {
    let out = Command::new(CLI)
        .args(["--pid", &pid.to_string(), "--duration", "0", "--json"])
        .env_remove("DEBUGINFOD_URLS")
        .envs(env.iter().copied())
        .output()
        .expect("run rip-probe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = rip_tests::inline_stacks(serde_json::from_slice(&out.stdout).expect("JSON"));
    let t = &v["threads"][0];
    t["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("??").to_string(),
                f["file"].as_str().unwrap_or_default().to_string(),
                f["line"].as_u64(),
            )
        })
        .collect()
}

/// Whether `frames` name `split_wait` at the line of its read.
fn has_line(frames: &[(String, String, Option<u64>)]) -> bool {
    let want = source_line("split_wait: the read");
    frames.iter().any(|(f, file, line)| {
        f == "split_wait" && file.ends_with("split_debug.c") && *line == Some(want)
    })
}

fn start(binary: &Path) -> Workload {
    Workload::start(Command::new(binary))
}

#[test]
fn a_stripped_binary_gets_lines_from_usr_lib_debug_by_build_id() {
    if !bpf_tests_enabled("a_stripped_binary_gets_lines_from_usr_lib_debug_by_build_id") {
        return;
    }
    let dir = TempDir::new("/tmp", "debug-info-build-id");
    let s = split(dir.path(), 1);
    let installed = s.installed();
    let _ = std::fs::remove_file(&installed);
    let w = start(&s.binary);

    let before = frames(w.pid(), &[]);
    assert!(!has_line(&before), "{before:?}");
    assert!(!before.iter().any(|f| f.0 == "split_wait"), "{before:?}");

    // As a -dbgsym package installs it.
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(&s.debug, &installed).unwrap();
    let after = frames(w.pid(), &[]);
    let _ = std::fs::remove_file(&installed);
    assert!(has_line(&after), "{after:?}");
    assert!(
        after
            .iter()
            .any(|f| f.0 == "split_outer" && f.1.ends_with("split_debug.c")),
        "{after:?}"
    );
}

/// elfutils' debuginfod serving `dir` on a loopback port; killed on drop.
struct Server(Child, u16);

impl Server {
    fn start(dir: &Path, db: &Path) -> Server {
        // A port the kernel says is free now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("debuginfod")
            .arg("-F")
            .arg(dir)
            .arg("-d")
            .arg(db)
            .args(["-p", &port.to_string(), "-t", "1", "-g", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("debuginfod runs (cargo xtask setup installs it)");
        Server(child, port)
    }

    /// Panics if the server exited.
    fn alive(&mut self) {
        if let Ok(Some(st)) = self.0.try_wait() {
            panic!("debuginfod exited: {st}");
        }
    }

    /// The HTTP status of `path`, `None` until the server listens.
    fn get(&self, path: &str) -> Option<u32> {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.1)).ok()?;
        write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut head = [0u8; 12];
        c.read_exact(&mut head).ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stripped_binary_gets_lines_from_a_debuginfod_server() {
    if !bpf_tests_enabled("a_stripped_binary_gets_lines_from_a_debuginfod_server") {
        return;
    }
    let dir = TempDir::new("/tmp", "debug-info-debuginfod");
    let s = split(dir.path(), 2);
    // Only the server has it.
    let _ = std::fs::remove_file(s.installed());
    let served = dir.join("served");
    std::fs::create_dir(&served).unwrap();
    std::fs::copy(&s.debug, served.join("split_debug.debug")).unwrap();
    let mut server = Server::start(&served, &dir.join("db.sqlite"));
    // Until the server has indexed the file: its own answer, asked again
    // while it scans (how long a scan takes is the machine's business).
    let path = format!("/buildid/{}/debuginfo", s.build_id);
    while server.get(&path) != Some(200) {
        server.alive();
        std::thread::sleep(Duration::from_millis(100));
    }
    let w = start(&s.binary);
    let url = format!("http://127.0.0.1:{}", server.1);
    let cache = dir.join("cache");

    let without = frames(w.pid(), &[]);
    assert!(!has_line(&without), "{without:?}");
    let with = frames(
        w.pid(),
        &[
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
        ],
    );
    assert!(has_line(&with), "{with:?}");
}
