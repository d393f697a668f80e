//! The pprof labels of every goroutine of a live Go program, read by
//! rip-probe from outside: `tests/go/labels.go` sets them with `pprof.Do`
//! (up to Go 1.23 the runtime keeps them in a map, from 1.24 in a slice),
//! built with each installed toolchain, with its symbols and stripped. The
//! report must give each goroutine exactly its labels (a goroutine started
//! under labels has its creator's), none to those without, and group the
//! goroutines by them.

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rip_tests::{
    Workload, bpf_tests_enabled, go_build, go_toolchains as toolchains, go_version as version,
    rip_probe_json, rip_probe_ok,
};
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// A goroutine's (or a group's) labels as `key=value` words, sorted by
/// key. A goroutine always has the array; a group without labels has
/// none.
fn labels(g: &Value) -> Vec<String> {
    if g.get("origin").is_some() && g.get("labels").is_none() {
        return Vec::new();
    }
    g["labels"]
        .as_array()
        .unwrap_or_else(|| panic!("no labels array: {g}"))
        .iter()
        .map(|l| {
            format!(
                "{}={}",
                l["key"].as_str().unwrap(),
                l["value"].as_str().unwrap()
            )
        })
        .collect()
}

/// The program's goroutines parked in one of its functions, by that
/// function: each one's labels (its stack's innermost `main.` frame
/// names the function; a stripped binary's frames are named from its
/// pclntab).
fn census(r: &Value) -> BTreeMap<String, Vec<Vec<String>>> {
    let mut out: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for t in r["tasks"].as_array().unwrap() {
        if t["origin"] != "go" || t["go"]["wait_reason"] != "chan receive" {
            continue;
        }
        let Some(f) = t["go"]["stack"].as_array().and_then(|s| {
            s.iter()
                .filter_map(|f| f["function"].as_str())
                .find(|f| f.starts_with("main."))
        }) else {
            continue;
        };
        assert!(t["go"]["labels_note"].is_null(), "labels read: {t}");
        out.entry(f.to_string()).or_default().push(labels(&t["go"]));
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What labels.go sets, by function.
fn expected() -> BTreeMap<String, Vec<Vec<String>>> {
    let mut many: Vec<String> = (0..20).map(|i| format!("k{i:02}=v{i:02}")).collect();
    // Cut at 512 bytes, and said to be.
    many.push(format!("long={}…", "x".repeat(512)));
    many.sort();
    BTreeMap::from([
        (
            "main.resize".to_string(),
            (0..3)
                .map(|i| vec!["job=resize".to_string(), format!("worker={i}")])
                .collect(),
        ),
        ("main.index".into(), vec![words(&["job=index"]); 4]),
        ("main.inherited".into(), vec![words(&["job=index"])]),
        ("main.plain".into(), vec![vec![]; 2]),
        ("main.many".into(), vec![many]),
    ])
}

/// Reports on `pid` until every goroutine of the program is parked with
/// its labels (they were started, not yet parked, when it said `ready`).
/// Fails with the last census if none matches within two minutes,
/// however loaded the machine.
fn parked(pid: u32, v: &str) -> Value {
    let pid = pid.to_string();
    let want = expected();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = rip_probe_json(EXE, &["--pid", &pid, "--duration", "0", "--json"]);
        let got = census(&r);
        if got == want {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{v}: labels never matched:\n got {got:#?}\nwant {want:#?}\nwarnings: {}",
            r["warnings"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check(go: &Path, flags: &[&str], tag: &str) {
    let v = version(go);
    let exe = go_build(go, "labels", flags, &format!("{v}-{tag}"));
    let w = Workload::start(Command::new(&exe));
    let r = parked(w.pid(), &format!("{v} {tag}"));
    // Grouped by labels: the three resize workers apart, the four index
    // goroutines in one group with their labels.
    let groups: Vec<&Value> = r["task_groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["origin"] == "go")
        .collect();
    let with = |l: &[&str]| -> Vec<u64> {
        groups
            .iter()
            .filter(|g| labels(g) == words(l))
            .map(|g| g["count"].as_u64().unwrap())
            .collect()
    };
    for i in 0..3 {
        assert_eq!(
            with(&["job=resize", &format!("worker={i}")]),
            [1],
            "{v} {tag}: one group per resize worker"
        );
    }
    let mut index = with(&["job=index"]);
    index.sort();
    assert_eq!(index, [1, 4], "{v} {tag}: index (4) and inherited (1)");
    // The text says them too.
    let text = rip_probe_ok(EXE, &["--pid", &w.pid().to_string(), "--duration", "0"]);
    assert!(
        text.contains("      labels: job=resize, worker=2\n"),
        "{v} {tag}: {text}"
    );
    assert!(
        text.contains("      labels: job=index\n"),
        "{v} {tag}: {text}"
    );
}

/// With symbols, on every installed toolchain (Debian's 1.19 and the
/// middle 1.23 keep labels in a map; the newest in a slice).
#[test]
fn every_goroutine_has_its_pprof_labels() {
    if !bpf_tests_enabled("every_goroutine_has_its_pprof_labels") {
        return;
    }
    for go in toolchains() {
        check(&go, &[], "default");
    }
}

/// Stripped (`-ldflags='-s -w'`): `g.labels` from each version's table.
#[test]
fn pprof_labels_of_stripped_builds() {
    if !bpf_tests_enabled("pprof_labels_of_stripped_builds") {
        return;
    }
    for go in toolchains() {
        check(&go, &["-ldflags=-s -w"], "stripped");
    }
}
