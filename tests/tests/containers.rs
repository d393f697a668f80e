//! Processes in containers, built with `unshare` (no container runtime):
//! a pid and a mount namespace, a private tmpfs on /dev/shm, and the
//! program bind-mounted at a path the host does not have. rip-probe on
//! the host reports them under the host's thread ids, with the
//! namespace's beside them: `--pid` (ring found and read through the
//! process's own view of files, snaps at their exact lines, syscalls,
//! kernel stacks), `dump --pid`, `--uprobe`; and a ring written in a pid
//! namespace but shared with the host, dumped live and after SIGKILL.
//! rip-probe run inside a container's pid and mount namespaces (`nsenter`,
//! as a debug container sharing them) reports the namespace's ids.

use std::{path::Path, process::Command, time::Duration};

use rip_tests::{
    Background, TempDir, Workload, assert_uprobe_in_worker_wait, bpf_tests_enabled, build_c,
    json_thread, marker_line, rip_probe_json, rip_probe_ok,
};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const SERVER: &str = env!("CARGO_BIN_EXE_rip-demo-server");
const DUMPER: &str = env!("CARGO_BIN_EXE_rip-dump-workload");
const SOURCE: &str = "src/bin/rip-demo-server.rs";

/// Runs in the new namespaces: a private /dev/shm (unless `SHARED_SHM=1`), and the program at
/// `$1/app/prog` (under a tmpfs mounted on the empty host directory `$1`,
/// so the path exists only inside), then execs it with the other args.
const CONTAINER: &str = r#"
set -e
[ "$SHARED_SHM" = 1 ] || mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs "$1"
mkdir "$1/app"
touch "$1/app/prog"
mount --bind "$2" "$1/app/prog"
root="$1"
shift 2
exec "$root/app/prog" "$@"
"#;

/// A program started in its own pid and mount namespaces (it is pid 1
/// there); killed, with everything in its namespace, on drop.
struct Contained {
    w: Workload,
    /// The host's pid of the program.
    pid: u32,
    /// Where it sees its binary (absent on the host).
    seen_as: String,
    _dir: TempDir,
}

impl Contained {
    fn start(binary: &str, args: &[&str]) -> Contained {
        Self::start_with(binary, args, false)
    }

    /// [`Contained::start`], with the host's /dev/shm if `shared_shm`.
    fn start_with(binary: &str, args: &[&str], shared_shm: bool) -> Contained {
        let dir = TempDir::new("/tmp", "container-root");
        let mut cmd = Command::new("unshare");
        cmd.env("SHARED_SHM", if shared_shm { "1" } else { "0" });
        cmd.args(["--pid", "--mount", "--fork", "--kill-child", "--mount-proc"])
            .args(["sh", "-c", CONTAINER, "sh"])
            .arg(dir.path())
            .arg(binary)
            .args(args);
        let w = Workload::start(cmd);
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", w.pid()))
            .expect("unshare's children");
        let pid = children
            .split_whitespace()
            .next()
            .expect("the program")
            .parse()
            .unwrap();
        let seen_as = format!("{}/app/prog", dir.path().display());
        assert!(
            !Path::new(&seen_as).exists(),
            "{seen_as} exists on the host"
        );
        Contained {
            w,
            pid,
            seen_as,
            _dir: dir,
        }
    }

    /// The host's tid of the thread the namespace calls `ns_tid`.
    fn host_tid(&self, ns_tid: u32) -> u32 {
        host_tid(self.pid, ns_tid)
    }
}

/// The ids of host process `pid`'s threads in its own pid namespace (the
/// last of each `NSpid` line), ascending.
fn ns_tids(pid: u32) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.ok()?.path().join("status")).ok()?;
            let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            line.split_whitespace().last()?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Runs the rip-probe CLI inside `c`'s pid and mount namespaces, as a
/// debug container sharing them does (`kubectl debug --target`, `docker
/// run --pid=container:X`), where `c`'s program is pid 1; which must
/// succeed: its stdout.
fn inside(c: &Contained, args: &[&str]) -> String {
    let pid = c.pid.to_string();
    let mut all = vec!["--target", pid.as_str(), "--pid", "--mount", "--", CLI];
    all.extend(args);
    rip_probe_ok("nsenter", &all)
}

/// [`inside`], for `--json`.
fn inside_json(c: &Contained, args: &[&str]) -> serde_json::Value {
    let out = inside(c, args);
    rip_tests::inline_stacks(
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rip-probe {args:?}: {e}: {out}")),
    )
}

/// The host's tid of thread `ns_tid` (as its pid namespace numbers it) of
/// host process `pid`, from the `NSpid` lines.
fn host_tid(pid: u32, ns_tid: u32) -> u32 {
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = e.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
        let ids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(ids.len(), 2, "one namespace below the host's: {ids:?}");
        if ids[1] == ns_tid {
            return tid;
        }
    }
    panic!("no thread {ns_tid} in the namespace of {pid}");
}

#[test]
fn a_contained_process_is_reported_under_host_tids_with_its_ring_and_lines() {
    if !bpf_tests_enabled("a_contained_process_is_reported_under_host_tids_with_its_ring_and_lines")
    {
        return;
    }
    let c = Contained::start(SERVER, &["--workers", "2", "--spinners", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    let pid = c.pid.to_string();
    let v = rip_probe_json(CLI, &["--pid", &pid, "--duration", "300ms", "--json"]);
    assert_eq!(v["process"]["pid"], c.pid);
    assert_eq!(v["process"]["ns_pid"], 1, "pid 1 of its namespace");
    assert_eq!(v["process"]["exe"], c.seen_as.as_str());
    // The ring: the path the process sees, on its private /dev/shm.
    let ring = &v["rings"][0];
    assert_eq!(ring["path"], "/dev/shm/rip-0/prog.1.ring", "{ring}");
    assert_eq!(ring["pid"], 1);
    let note = ring["namespace"].as_str().unwrap();
    assert!(
        note.contains("mount namespace") && note.contains(&format!("/proc/{pid}/")),
        "{note}"
    );
    for (role, syscall, marker) in [
        ("pool-0", "futex", "// SNAP: Pool::take"),
        ("pipe-reader", "read", "// SNAP: wait_for_message"),
        ("sleeper", "clock_nanosleep", "// SNAP: nap"),
        ("acceptor", "accept4", "// SNAP: serve"),
        ("locker-a", "futex", "// SNAP: transfer"),
    ] {
        let ns_tid = c.w.tid(&format!("role {role}"));
        let tid = c.host_tid(ns_tid);
        assert_ne!(tid, ns_tid, "{role}: host and namespace ids differ");
        let t = json_thread(&v, tid);
        assert_eq!(t["ns_tid"], ns_tid, "{role}: {t}");
        assert_eq!(t["name"], role, "{t}");
        assert_eq!(t["name_source"], "ring", "{t}");
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], syscall, "{t}");
        assert!(!t["kernel_stack"].as_array().unwrap().is_empty(), "{t}");
        let loc = &t["location"];
        assert_eq!(loc["source"], "ring", "{role}: {t}");
        assert_eq!(
            loc["frame"]["line"].as_u64(),
            Some(u64::from(marker_line(SOURCE, marker))),
            "{role}: {t}"
        );
        assert!(
            loc["frame"]["file"].as_str().unwrap().ends_with(SOURCE),
            "{t}"
        );
    }
    // Lock owners are recorded as the namespace numbers them: named here
    // by the host's ids.
    let a = c.host_tid(c.w.tid("role locker-a"));
    let b = c.host_tid(c.w.tid("role locker-b"));
    assert_eq!(json_thread(&v, a)["waits_for"]["owner_tid"], b, "{v}");
    assert_eq!(json_thread(&v, b)["waits_for"]["owner_tid"], a, "{v}");

    // The text view: host tid first, the namespace's beside it.
    let text = rip_probe_ok(CLI, &["--pid", &pid, "--duration", "200ms"]);
    let sleeper = c.w.tid("role sleeper");
    let row = format!("{} (ns {sleeper})", c.host_tid(sleeper));
    assert!(
        text.lines()
            .any(|l| l.contains(&row) && l.contains("sleeper") && l.contains("clock_nanosleep(")),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid {pid} (pid 1 in its namespace)")),
        "{text}"
    );

    // dump --pid: the same ring, the same host tids.
    let d = rip_probe_json(CLI, &["dump", "--pid", &pid, "--json"]);
    assert_eq!(d["process"]["alive"], true);
    assert_eq!(d["rings"][0]["path"], "/dev/shm/rip-0/prog.1.ring");
    let ns_tid = c.w.tid("role pipe-reader");
    let t = json_thread(&d, c.host_tid(ns_tid));
    assert_eq!(t["ns_tid"], ns_tid);
    assert_eq!(
        t["location"]["frame"]["line"].as_u64(),
        Some(u64::from(marker_line(SOURCE, "// SNAP: wait_for_message")))
    );
}

#[test]
fn inside_the_targets_pid_namespace_ids_are_the_namespaces() {
    if !bpf_tests_enabled("inside_the_targets_pid_namespace_ids_are_the_namespaces") {
        return;
    }
    let c = Contained::start(SERVER, &["--workers", "2", "--spinners", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    let v = inside_json(&c, &["--pid", "1", "--duration", "300ms", "--json"]);
    // Its pid there, and no other namespace to name beside it.
    assert_eq!(v["process"]["pid"], 1, "{}", v["process"]);
    assert!(v["process"]["ns_pid"].is_null(), "{}", v["process"]);
    assert_eq!(v["process"]["exe"], c.seen_as.as_str());
    assert_eq!(v["rings"][0]["path"], "/dev/shm/rip-0/prog.1.ring");
    // Every thread, by the ids the host's NSpid lines give for the
    // namespace.
    let mut tids: Vec<u64> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tid"].as_u64().unwrap())
        .collect();
    tids.sort_unstable();
    assert_eq!(tids, ns_tids(c.pid), "{v}");
    for (role, syscall, marker) in [
        ("pool-0", "futex", "// SNAP: Pool::take"),
        ("pipe-reader", "read", "// SNAP: wait_for_message"),
        ("sleeper", "clock_nanosleep", "// SNAP: nap"),
        ("acceptor", "accept4", "// SNAP: serve"),
        ("locker-a", "futex", "// SNAP: transfer"),
    ] {
        // The workload prints its threads' ids as its namespace numbers
        // them; the host's (from NSpid) differ, and are nowhere.
        let tid = c.w.tid(&format!("role {role}"));
        assert_ne!(
            c.host_tid(tid),
            tid,
            "{role}: host and namespace ids differ"
        );
        let t = json_thread(&v, tid);
        assert!(t["ns_tid"].is_null(), "{role}: {t}");
        assert_eq!(t["name"], role, "{t}");
        assert_eq!(t["name_source"], "ring", "{t}");
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], syscall, "{t}");
        assert!(!t["kernel_stack"].as_array().unwrap().is_empty(), "{t}");
        let loc = &t["location"];
        assert_eq!(loc["source"], "ring", "{role}: {t}");
        assert_eq!(
            loc["frame"]["line"].as_u64(),
            Some(u64::from(marker_line(SOURCE, marker))),
            "{role}: {t}"
        );
    }
    let (a, b) = (c.w.tid("role locker-a"), c.w.tid("role locker-b"));
    assert_eq!(json_thread(&v, a)["waits_for"]["owner_tid"], b, "{v}");
    assert_eq!(v["deadlocks"][0].as_array().unwrap().len(), 2, "{v}");

    // The text view: the namespace's ids, alone.
    let text = inside(&c, &["--pid", "1", "--duration", "200ms"]);
    let sleeper = c.w.tid("role sleeper");
    assert!(
        text.lines().any(|l| l.contains(&format!(" {sleeper} "))
            && l.contains("sleeper")
            && l.contains("clock_nanosleep(")),
        "{text}"
    );
    assert!(text.starts_with("pid 1 (prog)"), "{text}");
    assert!(!text.contains("(ns "), "{text}");

    // --uprobe: the last function entered, keyed by the namespace's ids.
    let bin = build_c("uninstrumented", &[]);
    let u = Contained::start(bin.to_str().unwrap(), &["2"]);
    let cmd = "--pid 1 --duration 700ms --uprobe worker_* --json";
    let v = inside_json(&u, &cmd.split(' ').collect::<Vec<_>>());
    let workers = u.w.tids("worker ");
    assert_eq!(workers.len(), 2);
    for tid in workers {
        assert_ne!(u.host_tid(tid), tid);
        let t = json_thread(&v, tid);
        assert_eq!(t["syscall"]["name"], "poll", "{t}");
        assert_uprobe_in_worker_wait(t);
    }
}

#[test]
fn inside_a_pid_namespace_a_thread_created_while_watching_has_its_id_there() {
    if !bpf_tests_enabled("inside_a_pid_namespace_a_thread_created_while_watching_has_its_id_there")
    {
        return;
    }
    let dir = TempDir::new("/tmp", "late-thread");
    let file = dir.join("late.tid");
    let bin = build_c("late_thread", &[]);
    // The thread starts when told, once rip-probe has attached, in a 2.5 s
    // window.
    let mut c = Contained::start(bin.to_str().unwrap(), &["-", file.to_str().unwrap()]);
    let mut run = Background::spawn(Command::new("nsenter").args([
        "--target",
        &c.pid.to_string(),
        "--pid",
        "--mount",
        "--",
        CLI,
        "--pid",
        "1",
        "--duration",
        "2500ms",
        "--json",
    ]));
    run.wait_phase("load and attach");
    {
        use std::io::Write;
        let stdin = c.w.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
    let out = run.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let late: u32 = std::fs::read_to_string(&file)
        .expect("the late thread wrote its id")
        .trim()
        .parse()
        .unwrap();
    assert_ne!(c.host_tid(late), late, "host and namespace ids differ");
    let t = json_thread(&v, late);
    assert_eq!(t["name"], "late", "{t}");
    assert_eq!(t["syscall"]["name"], "clock_nanosleep", "{t}");
    // sched_switch saw it leave the CPU under its global id: that record
    // is joined too, so the time it has slept is exact.
    assert_eq!(t["blocked"]["exact"], true, "{t}");
    let tids: Vec<u64> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(tids, [1, u64::from(late)], "{v}");
}

#[test]
fn locks_and_calls_inside_a_pid_namespace_name_its_threads() {
    if !bpf_tests_enabled("locks_and_calls_inside_a_pid_namespace_name_its_threads") {
        return;
    }
    let bin = build_c("lock_contention", &["-fno-omit-frame-pointer"]);
    let c = Contained::start(bin.to_str().unwrap(), &["4", "5"]);
    let workers = c.w.tids("worker");
    assert_eq!(workers.len(), 4, "{:?}", c.w.lines);
    let v = inside_json(&c, &["locks", "--pid", "1", "--duration", "1s", "--json"]);
    assert_eq!(v["process"]["pid"], 1);
    let lock = &v["locks"][0];
    assert_eq!(lock["symbol"], "g_contended", "{lock}");
    let waiters = lock["top_waiters"].as_array().unwrap();
    assert!(waiters.len() >= 2, "{lock}");
    for w in waiters {
        let tid = w["tid"].as_u64().unwrap() as u32;
        assert!(
            workers.contains(&tid),
            "{tid} is not a worker's id there: {lock}"
        );
        assert_eq!(w["name"], "prog", "named from the namespace's /proc: {w}");
    }
    let waker = lock["wakers"][0]["tid"].as_u64().unwrap() as u32;
    assert!(workers.contains(&waker), "{lock}");
    drop(c);

    // calls: outliers by the namespace's tid of the calling thread.
    let bin = build_c("calls", &["-fomit-frame-pointer"]);
    let mut c = Contained::start(bin.to_str().unwrap(), &[]);
    let pid = c.pid.to_string();
    let args = [
        "--target",
        &pid,
        "--pid",
        "--mount",
        "--",
        CLI,
        "calls",
        "--pid",
        "1",
        "--uprobe",
        "sleep_*",
        "--duration",
        "2s",
        "--slower-than",
        "10ms",
        "--json",
    ];
    let mut run = Background::spawn(Command::new("nsenter").args(args));
    run.wait_phase("attach uprobes");
    use std::io::Write;
    let stdin = c.w.child.stdin.as_mut().unwrap();
    stdin.write_all(b"long 3\nshort 2\n").unwrap();
    stdin.flush().unwrap();
    let out = run.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let r: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let outliers = r["outliers"].as_array().unwrap();
    // The three long sleeps (a short one a busy machine delays past the
    // threshold is rightly one too).
    let long = outliers
        .iter()
        .filter(|o| o["function"] == "sleep_long")
        .count();
    assert_eq!(long, 3, "{r}");
    for o in outliers {
        assert_eq!(o["tid"], 1, "the main thread, pid 1 there: {o}");
    }
}

#[test]
fn uprobes_attach_to_a_binary_the_host_has_no_path_for() {
    if !bpf_tests_enabled("uprobes_attach_to_a_binary_the_host_has_no_path_for") {
        return;
    }
    let bin = build_c("uninstrumented", &[]);
    let c = Contained::start(bin.to_str().unwrap(), &["2"]);
    let pid = c.pid.to_string();
    let cmd = format!("--pid {pid} --duration 700ms --uprobe worker_* --json");
    let args: Vec<&str> = cmd.split(' ').collect();
    let v = rip_probe_json(CLI, &args);
    let workers = c.w.tids("worker ");
    assert_eq!(workers.len(), 2);
    for ns_tid in workers {
        let t = json_thread(&v, c.host_tid(ns_tid));
        assert_eq!(t["syscall"]["name"], "poll", "{t}");
        assert_uprobe_in_worker_wait(t);
    }
}

#[test]
fn a_ring_written_in_a_pid_namespace_is_dumped_live_and_after_sigkill() {
    let dir = TempDir::new("/dev/shm", "ns-ring");
    let ring = dir.join("w.ring");
    // Only a pid namespace: the ring is on the host's /dev/shm.
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child"])
        .arg(DUMPER)
        .arg("sites")
        .arg(&ring);
    let mut w = Workload::start(cmd);
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", w.pid())).unwrap();
    let pid: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let path = ring.to_str().unwrap();

    // Live: the writer is found by its namespace and start time (its pid
    // there is 1), and slots are joined with the host's threads.
    let v = rip_probe_json(CLI, &["dump", path, "--json"]);
    assert_eq!(v["process"]["alive"], true, "{}", v["process"]);
    assert_eq!(v["process"]["pid"], pid);
    assert_eq!(v["process"]["ns_pid"], 1);
    let ns_tid = w.tid("role db-stuck");
    let t = json_thread(&v, host_tid(pid, ns_tid));
    assert_eq!(t["ns_tid"], ns_tid);
    assert_eq!(t["name"], "db-stuck");
    let text = rip_probe_ok(CLI, &["dump", path, "--threads"]);
    assert!(
        text.contains(&format!(
            "tid {} (ns {ns_tid}) \"db-stuck\" live",
            host_tid(pid, ns_tid)
        )),
        "{text}"
    );
    assert!(!text.contains("process not running"), "{text}");

    // After SIGKILL: gone, and said to be; ids are the namespace's.
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let _ = w.child.wait();
    let v = rip_probe_json(CLI, &["dump", path, "--json"]);
    assert_eq!(v["process"]["alive"], false, "{}", v["process"]);
    assert_eq!(v["process"]["pid"], 1);
    let t = json_thread(&v, ns_tid);
    assert_eq!(t["ns_tid"], ns_tid);
    assert_eq!(t["name"], "db-stuck");
    let text = rip_probe_ok(CLI, &["dump", path]);
    assert!(text.contains("process not running"), "{text}");
    assert!(
        text.contains("its writer is gone, so thread ids are that namespace's"),
        "{text}"
    );
}

#[test]
fn a_dead_containers_binaries_are_read_from_its_root_file_system() {
    let dir = TempDir::new("/dev/shm", "ns-root-ring");
    let ring = dir.join("w.ring");
    let path = ring.to_str().unwrap();
    let mut c = Contained::start_with(DUMPER, &["sites", path], true);
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(c.pid as i32, libc::SIGKILL) }, 0);
    let _ = c.w.child.wait();
    let line = marker_line("src/bin/rip-dump-workload.rs", "// SNAP: query_db");
    let db = c.w.tid("role db-stuck");

    // Its binary's path is the container's: absent here, and said so.
    let v = rip_probe_json(CLI, &["dump", path, "--json"]);
    let w = v["warnings"].to_string();
    assert!(w.contains("--root DIR"), "{w}");
    assert!(
        json_thread(&v, db)["location"]["frame"]["line"].is_null(),
        "{v}"
    );

    // Its root file system on the host (as a container runtime keeps it).
    let rootfs = TempDir::new("/tmp", "rootfs");
    let inside = rootfs.join(c.seen_as.trim_start_matches('/'));
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::copy(DUMPER, &inside).unwrap();
    let root = rootfs.path().to_str().unwrap();
    let v = rip_probe_json(CLI, &["dump", path, "--root", root, "--json"]);
    let loc = &json_thread(&v, db)["location"]["frame"];
    assert_eq!(loc["line"].as_u64(), Some(u64::from(line)), "{v}");
    assert!(
        loc["function"].as_str().unwrap().ends_with("query_db"),
        "{loc}"
    );

    // A different binary there is refused by its build-id.
    std::fs::remove_file(&inside).unwrap();
    std::fs::copy(SERVER, &inside).unwrap();
    let v = rip_probe_json(CLI, &["dump", path, "--root", root, "--json"]);
    assert!(
        v["warnings"].to_string().contains("build-id mismatch"),
        "{}",
        v["warnings"]
    );
    assert!(
        json_thread(&v, db)["location"]["frame"]["line"].is_null(),
        "{v}"
    );
}

/// A cgroup (v2) of its own, removed on drop (after its processes).
struct Cgroup(std::path::PathBuf);

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let root = mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f[2] == "cgroup2")
            .map(|f| f[1].to_string())
            .expect("a cgroup2 mount");
        let dir = Path::new(&root).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Cgroup(dir)
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes are killed first (the workloads are dropped
        // before): a cgroup is removed once empty.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

#[test]
fn a_cgroup_is_reported_process_by_process_and_listed() {
    if !bpf_tests_enabled("a_cgroup_is_reported_process_by_process_and_listed") {
        return;
    }
    let cg = Cgroup::new("rip-cgroup-test");
    let dir = TempDir::new("/dev/shm", "cgroup");
    let start = |name: &str| {
        let mut cmd = Command::new(SERVER);
        cmd.args(["--workers", "1", "--spinners", "0", "--ring"])
            .arg(dir.join(name));
        Workload::start(cmd)
    };
    let (a, b) = (start("a.ring"), start("b.ring"));
    cg.add(a.pid());
    cg.add(b.pid());
    let name = cg.0.file_name().unwrap().to_str().unwrap();

    // Relative to the cgroup v2 root, as /proc/PID/cgroup shows it.
    let v = rip_probe_json(CLI, &["--cgroup", name, "--duration", "300ms", "--json"]);
    // One object: the schema's version, the cgroup, a report per process.
    assert_eq!(v["schema"], rip_probe::model::SCHEMA_VERSION, "{v}");
    assert_eq!(v["cgroup"], cg.0.to_str().unwrap(), "{v}");
    let reports = v["processes"].as_array().expect("one report per process");
    let pids: Vec<_> = reports
        .iter()
        .map(|r| r["process"]["pid"].clone())
        .collect();
    assert_eq!(pids, [a.pid(), b.pid()], "grouped by process, in pid order");
    for (r, w, ring) in [(&reports[0], &a, "a.ring"), (&reports[1], &b, "b.ring")] {
        assert_eq!(r["rings"][0]["path"], dir.join(ring).to_str().unwrap());
        let t = json_thread(r, w.tid("role pipe-reader"));
        assert_eq!(t["syscall"]["name"], "read", "{t}");
        assert_eq!(
            t["location"]["frame"]["line"].as_u64(),
            Some(u64::from(marker_line(SOURCE, "// SNAP: wait_for_message")))
        );
    }
    // Absolute, in text: a header, the groups across the processes,
    // then each process's report.
    let text = rip_probe_ok(
        CLI,
        &["--cgroup", cg.0.to_str().unwrap(), "--duration", "200ms"],
    );
    assert!(
        text.starts_with(&format!("2 processes (--cgroup {}): ", cg.0.display())),
        "{text}"
    );
    assert!(text.contains("\nACROSS PROCESSES\n"), "{text}");
    for w in [&a, &b] {
        assert!(
            text.contains(&format!("\npid {} (rip-demo-server)", w.pid())),
            "{text}"
        );
    }

    // list: both, with their cgroup, ring and thread count.
    let list = rip_probe_ok(CLI, &["list"]);
    for (w, ring) in [(&a, "a.ring"), (&b, "b.ring")] {
        let row = list
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&w.pid().to_string()))
            .unwrap_or_else(|| panic!("{} not listed:\n{list}", w.pid()));
        let f: Vec<&str> = row.split_whitespace().collect();
        let threads = std::fs::read_dir(format!("/proc/{}/task", w.pid()))
            .unwrap()
            .count();
        assert_eq!(f[1], "-", "{row}");
        assert_eq!(f[2], threads.to_string(), "{row}");
        assert_eq!(f[3], "0", "no tasks: {row}");
        assert_eq!(f[4], format!("/{name}"), "{row}");
        assert_eq!(f[5], dir.join(ring).to_str().unwrap(), "{row}");
    }
    drop((a, b));
}

/// What cannot work says so in one line naming what is missing: a user
/// namespace (no capabilities over the host), a pid namespace whose /proc
/// is another namespace's, a /proc mounted with hidepid=2.
#[test]
fn what_cannot_work_is_one_line_naming_what_is_missing() {
    let c = Contained::start(SERVER, &["--workers", "1", "--spinners", "0"]);
    let pid = c.pid.to_string();
    let one_line = |args: &[&str], wants: &[&str]| {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        for w in wants {
            assert!(err.contains(w), "{args:?}: no `{w}` in: {err}");
        }
    };
    for cmd in [&["--pid", pid.as_str()][..], &["dump", "--pid", &pid]] {
        let mut args = vec!["unshare", "--user", "--map-root-user", CLI];
        args.extend(cmd);
        one_line(
            &args,
            &[
                "runs in user namespace user:[",
                "CAP_SYS_ADMIN in the host's user namespace",
            ],
        );
    }
    // A pid namespace of its own with the parent's /proc: pids there are
    // not rip-probe's. (With its own /proc it works: tests above.)
    one_line(
        &["unshare", "--pid", "--fork", CLI, "--pid", &pid],
        &[
            "runs in pid namespace pid:[",
            "/proc belongs to another pid namespace",
            "--mount-proc",
        ],
    );
    let hidden = format!(
        "mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid 65534 --regid 65534 \
         --clear-groups {CLI} \"$@\""
    );
    for cmd in [&["--pid", pid.as_str()][..], &["dump", "--pid", &pid]] {
        let mut args = vec!["unshare", "--mount", "sh", "-c", &hidden, "sh"];
        args.extend(cmd);
        one_line(
            &args,
            &[
                &format!("process {pid} exists but /proc hides it"),
                "hidepid",
            ],
        );
    }
}

/// Child processes killed on drop.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// 40 small processes in one `--cgroup` run: every one reported, within
/// 300 MB at the peak (the kernel's BTF and kallsyms parsed once for all,
/// each target's symbols loaded for its report and freed after it). The
/// peak is the kernel's count for the child (wait4's ru_maxrss).
#[test]
fn forty_processes_in_a_cgroup_within_300_mb() {
    if !bpf_tests_enabled("forty_processes_in_a_cgroup_within_300_mb") {
        return;
    }
    let cg = Cgroup::new("rip-cgroup-forty");
    let sleeps = Children(
        (0..40)
            .map(|_| Command::new("sleep").arg("1000").spawn().unwrap())
            .collect(),
    );
    for s in &sleeps.0 {
        cg.add(s.id());
    }
    let dir = TempDir::new("/tmp", "cgroup-forty");
    let json = dir.join("out.json");
    let err = dir.join("err");
    // Reaped by wait4 below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(CLI)
        .args([
            "--cgroup",
            cg.0.to_str().unwrap(),
            "--duration",
            "1s",
            "--json",
        ])
        .stdout(std::fs::File::create(&json).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pid of our child, valid out pointers.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut pids: Vec<u64> = v["processes"]
        .as_array()
        .expect("one report per process")
        .iter()
        .map(|r| r["process"]["pid"].as_u64().unwrap())
        .collect();
    pids.sort_unstable();
    let mut want: Vec<u64> = sleeps.0.iter().map(|c| u64::from(c.id())).collect();
    want.sort_unstable();
    assert_eq!(pids, want);
    let peak_kb = usage.ru_maxrss;
    assert!(peak_kb < 300 * 1024, "peak {} MB", peak_kb / 1024);
    eprintln!("40 processes: peak {} MB", peak_kb / 1024);
}

/// More processes in one `--cgroup` than the kernel runs BPF programs on
/// one tracepoint (64, each process holding its own): observed in groups,
/// one window each, and every one reported (before: `E2BIG` attaching
/// sched_switch, and no report).
#[test]
fn seventy_processes_in_a_cgroup_past_the_kernels_64_programs() {
    if !bpf_tests_enabled("seventy_processes_in_a_cgroup_past_the_kernels_64_programs") {
        return;
    }
    let cg = Cgroup::new("rip-cgroup-seventy");
    let sleeps = Children(
        (0..70)
            .map(|_| Command::new("sleep").arg("1000").spawn().unwrap())
            .collect(),
    );
    for s in &sleeps.0 {
        cg.add(s.id());
    }
    let v = rip_probe_json(
        CLI,
        &[
            "--cgroup",
            cg.0.to_str().unwrap(),
            "--duration",
            "100ms",
            "--json",
        ],
    );
    let mut pids: Vec<u64> = v["processes"]
        .as_array()
        .expect("one report per process")
        .iter()
        .map(|r| r["process"]["pid"].as_u64().unwrap())
        .collect();
    pids.sort_unstable();
    let mut want: Vec<u64> = sleeps.0.iter().map(|c| u64::from(c.id())).collect();
    want.sort_unstable();
    assert_eq!(pids, want);
    // Each sleep is read by its own session as alone: sleeping in its
    // clock_nanosleep.
    for r in v["processes"].as_array().unwrap() {
        let t = &r["threads"][0];
        assert_eq!(t["state"], "sleeping", "{t}");
        assert_eq!(t["syscall"]["name"], "clock_nanosleep", "{t}");
    }
}
