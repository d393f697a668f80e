//! Names for JIT code from the perf map a runtime writes: a Java program
//! (`tests/java/JitWorkers.java`) whose 200 threads wait inside a
//! compiled method, before and after `jcmd PID Compiler.perfmap` writes
//! `/tmp/perf-PID.map`.

use std::{path::PathBuf, process::Command};

use rip_tests::{Workload, bpf_tests_enabled, rip_probe, target_dir};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const WORKERS: usize = 200;
const METHOD: &str = "JitWorkers.hold(";

/// Compiles `tests/java/JitWorkers.java` into a directory of this test
/// process; returns the class path.
fn build_java() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("java/JitWorkers.java");
    let dir = target_dir().join(format!("java-build/{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg(&src)
        .status()
        .expect("javac runs (cargo xtask setup installs openjdk-17-jdk-headless)");
    assert!(st.success(), "javac {} failed", src.display());
    dir
}

/// The report's worker threads, with the functions of their stacks.
fn worker_stacks(pid: u32) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let (code, out, err) = rip_probe(
        CLI,
        &["--pid", &pid.to_string(), "--duration", "0", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let v = rip_tests::inline_stacks(serde_json::from_str(&out).expect("JSON"));
    let workers = v["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
        .map(|t| {
            let frames = t["frames"]
                .as_array()
                .map(|fs| {
                    fs.iter()
                        .map(|f| f["function"].as_str().unwrap_or("??").to_string())
                        .collect()
                })
                .unwrap_or_default();
            (t["name"].as_str().unwrap_or_default().to_string(), frames)
        })
        .collect();
    let warnings = v["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w.as_str().unwrap_or_default().to_string())
        .collect();
    (workers, warnings)
}

#[test]
fn java_threads_are_named_in_compiled_frames_through_the_perf_map() {
    if !bpf_tests_enabled("java_threads_are_named_in_compiled_frames_through_the_perf_map") {
        return;
    }
    let classes = build_java();
    let mut cmd = Command::new("java");
    cmd.args([
        "-XX:TieredStopAtLevel=1",
        "-Xbatch",
        "-XX:+PreserveFramePointer",
        "-cp",
    ])
    .arg(&classes)
    .arg("JitWorkers");
    let java = Workload::start(cmd);
    let pid = java.pid();
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    // A file left by an earlier process of the same pid is not this one's.
    let _ = std::fs::remove_file(&map);

    // Without a perf map: the compiled frames have no names, and the
    // report says how to get them.
    let (workers, warnings) = worker_stacks(pid);
    assert_eq!(workers.len(), WORKERS);
    for (name, frames) in &workers {
        assert!(
            !frames.iter().any(|f| f.contains(METHOD)),
            "{name} named without a map: {frames:?}"
        );
    }
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("no /tmp/perf-{pid}.map")) && w.contains("jcmd")),
        "{warnings:?}"
    );

    // The runtime writes its map: every worker's stack names the method.
    let st = Command::new("jcmd")
        .arg(pid.to_string())
        .arg("Compiler.perfmap")
        .output()
        .expect("jcmd runs");
    assert!(
        st.status.success() && map.exists(),
        "jcmd: {}",
        String::from_utf8_lossy(&st.stdout)
    );
    let (workers, warnings) = worker_stacks(pid);
    assert_eq!(workers.len(), WORKERS);
    for (name, frames) in &workers {
        assert!(
            frames
                .iter()
                .any(|f| f.starts_with("int JitWorkers.hold(java.lang.Object, int)")),
            "{name}: {frames:?}"
        );
    }
    assert!(
        !warnings.iter().any(|w| w.contains("perf-")),
        "{warnings:?}"
    );

    // Another user's file at that path: not read, and said why (not that
    // there is no map).
    std::os::unix::fs::chown(&map, Some(65534), None).unwrap();
    let (workers, warnings) = worker_stacks(pid);
    assert_eq!(workers.len(), WORKERS);
    for (name, frames) in &workers {
        assert!(
            !frames.iter().any(|f| f.contains(METHOD)),
            "{name} named from another user's file: {frames:?}"
        );
    }
    assert!(
        warnings.iter().any(|w| w.contains("owned by uid 65534")),
        "{warnings:?}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("writes no")),
        "{warnings:?}"
    );
    drop(java);
    let _ = std::fs::remove_file(&map);
}
