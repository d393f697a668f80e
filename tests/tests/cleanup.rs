//! Nothing is left behind: rip-probe SIGKILLed while attached (sched_switch,
//! task iterator and uprobes) leaves no BPF program, link or uprobe, and the
//! target keeps running.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rip_tests::{Workload, bpf_tests_enabled};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
/// Names of rip's programs as the kernel keeps them (bpftool shows these).
const OURS: [&str; 5] = [
    "switch_btf",
    "sched_switch",
    "switch_kstack",
    "task_iter",
    "fn_entry",
];

fn bpftool(what: &str) -> serde_json::Value {
    let out = Command::new("bpftool")
        .args([what, "show", "--json"])
        .output()
        .expect("bpftool runs (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool {what} show failed");
    serde_json::from_slice(&out.stdout).expect("bpftool JSON")
}

/// Ids of loaded programs carrying one of our names.
fn our_programs() -> Vec<u64> {
    bpftool("prog")
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| OURS.contains(&p["name"].as_str().unwrap_or_default()))
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

/// Links that point at one of `progs`.
fn links_of(progs: &[u64]) -> Vec<u64> {
    links_of_type(progs, |_| true)
}

/// Links that point at one of `progs`, of a type `kind` accepts.
fn links_of_type(progs: &[u64], kind: impl Fn(&serde_json::Value) -> bool) -> Vec<u64> {
    bpftool("link")
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| kind(&l["type"]) && l["prog_id"].as_u64().is_some_and(|p| progs.contains(&p)))
        .map(|l| l["id"].as_u64().unwrap())
        .collect()
}

/// Where tracefs is mounted, from /proc/self/mounts (`cargo xtask setup`
/// mounts it; rip-probe's uprobes do not need it, but a leak through it
/// would show there).
fn tracefs() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"tracefs")).then(|| f[1].into())
        })
        .expect("tracefs is mounted")
}

/// The uprobe events tracefs defines (aya attaches through the uprobe PMU,
/// so none should be ours; a leak through tracefs would show here).
fn uprobe_events() -> String {
    let p = tracefs().join("uprobe_events");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The links that attach one of `progs` to a perf event or uprobes:
/// perf_event links (uprobes one at a time) and uprobe_multi links (many
/// uprobes at once, Linux 6.6; a bpftool that does not know the type by
/// name prints its number, 12).
fn perf_links_of(progs: &[u64]) -> Vec<u64> {
    links_of_type(progs, |t| {
        t == "perf_event" || t == "uprobe_multi" || t == 12
    })
}

#[test]
fn sigkill_while_attached_leaves_nothing() {
    if !bpf_tests_enabled("sigkill_while_attached_leaves_nothing") {
        return;
    }
    // Other rip-probes may run on a shared machine: this one's programs
    // are told by its descriptors.
    let before = our_programs();
    let events_before = uprobe_events();

    let mut w = Workload::uninstrumented(2);
    let pid = w.pid().to_string();
    let mut probe = Command::new(CLI)
        .args(["--pid", &pid, "--duration", "60s", "--uprobe", "worker_*"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rip-probe");

    // Wait until all three programs are in the kernel and linked.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (_, links) = loop {
        let p = rip_tests::bpf_programs_held_by(probe.id());
        let l = links_of(&p);
        if p.len() >= 2 && !l.is_empty() {
            break (p, l);
        }
        assert!(
            Instant::now() < deadline,
            "rip-probe never attached: {p:?} {l:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The uprobes are in the kernel, linked to our programs (a perf_event
    // link each, or one uprobe_multi link for all), and sched_switch's
    // link (a raw tracepoint's, whether the program is the BTF-typed one
    // or a raw one): what must go away.
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let progs = rip_tests::bpf_programs_held_by(probe.id());
        let held = perf_links_of(&progs);
        let raw_tp = links_of_type(&progs, |t| t == "raw_tracepoint");
        if !held.is_empty() && !raw_tp.is_empty() {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "rip-probe's uprobes never showed as links: {held:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let rip_pid = probe.id();
    let progs = rip_tests::bpf_programs_held_by(rip_pid);
    let named = our_programs();
    assert!(
        progs.iter().all(|p| named.contains(p)),
        "rip-probe holds {progs:?}, rip's programs are {named:?}"
    );
    eprintln!(
        "attached: programs {progs:?} (others' before: {before:?}), links {links:?}, \
         event links {held:?}; sending SIGKILL"
    );
    probe.kill().expect("SIGKILL rip-probe");
    probe.wait().unwrap();

    // The kernel frees programs once their last fd closes (after an RCU
    // grace period): give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = rip_tests::bpf_programs_still_loaded(&progs);
        let l = links_of(&progs);
        if p.is_empty() && l.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: programs {p:?}, links {l:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(uprobe_events(), events_before, "no uprobe left in tracefs");
    // No perf event (as bpftool perf lists those held through fds) belongs
    // to rip-probe or runs one of the programs we saw, and no event link
    // is left.
    assert!(perf_links_of(&progs).is_empty());
    let left: Vec<_> = bpftool("perf")
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["pid"].as_u64() == Some(u64::from(rip_pid))
                || e["prog_id"].as_u64().is_some_and(|p| progs.contains(&p))
        })
        .cloned()
        .collect();
    assert!(left.is_empty(), "perf events left behind: {left:?}");
    // The target is unharmed: its uprobe breakpoints are gone and its
    // workers keep polling.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "target still running"
    );
    eprintln!("after SIGKILL: no rip program, link or uprobe remains; target alive");
}
