//! Who rip-probe works for: never a set-user-ID or set-group-ID copy
//! (whoever starts it would get root's reach); with capabilities, the user
//! who runs it, observing only the processes that user may ptrace and
//! reading only the files that user may read.

use std::{os::unix::fs::PermissionsExt, process::Command};

use rip_tests::{TempDir, Workload, assert_one_line_error, bpf_tests_enabled};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// `setpriv` arguments that run a program as nobody with `caps`
/// (comma-separated, e.g. `+bpf,+perfmon`) effective through ambient
/// capabilities, as `setcap` on the binary would give them.
fn as_nobody_with(caps: &str) -> Vec<String> {
    [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps={caps}"),
        &format!("--ambient-caps={caps}"),
    ]
    .map(String::from)
    .to_vec()
}

/// A set-user-ID root copy, and a set-group-ID root copy, started by
/// nobody: refused with one line before anything is read.
#[test]
fn set_id_copies_are_refused() {
    let dir = TempDir::new("/tmp", "setid");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let me = std::process::id().to_string();
    for (name, mode) in [("setuid", 0o4755), ("setgid", 0o2755)] {
        let copy = dir.join(name);
        // Copied by cp: a descriptor open for writing in this process
        // would be inherited by another test's fork and make the copy
        // "busy" to execute.
        assert!(
            rip_tests::run(Command::new("cp").arg(CLI).arg(&copy))
                .status
                .success()
        );
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).unwrap();
        let copy = copy.to_str().unwrap().to_string();
        for args in [
            vec!["--pid", me.as_str(), "--duration", "1s"],
            vec!["dump", "--pid", me.as_str()],
        ] {
            let mut all = vec![
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                copy.as_str(),
            ];
            all.extend(args);
            assert_one_line_error("setpriv", &all, "runs set-user-ID or set-group-ID");
        }
    }
}

/// nobody, given CAP_BPF and CAP_PERFMON, and even CAP_SYS_PTRACE and
/// CAP_DAC_READ_SEARCH, may not observe root's process (its report, its
/// ring, its off-CPU stacks) nor read root's ring file.
#[test]
fn capabilities_do_not_reach_other_users_processes() {
    if !bpf_tests_enabled("capabilities_do_not_reach_other_users_processes") {
        return;
    }
    let root = Workload::uninstrumented(1);
    let pid = root.pid().to_string();
    let setpriv = |args: &[&str], expect: &str| {
        let mut all = as_nobody_with("+bpf,+perfmon,+sys_ptrace,+dac_read_search");
        all.push(CLI.into());
        all.extend(args.iter().map(|s| s.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert_one_line_error("setpriv", &all, expect);
    };
    let refusal = format!("process {pid} runs as user 0, and rip-probe runs for user 65534");
    setpriv(&["--pid", &pid, "--duration", "1s"], &refusal);
    setpriv(&["dump", "--pid", &pid], &refusal);
    setpriv(&["offcpu", "--pid", &pid, "--duration", "1s"], &refusal);
    setpriv(
        &[
            "calls",
            "--pid",
            &pid,
            "--uprobe",
            "worker_step",
            "--duration",
            "1s",
        ],
        &refusal,
    );

    // A ring file only root may read.
    let dir = TempDir::new("/tmp", "caps-ring");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ring = dir.join("ring");
    std::fs::write(&ring, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&ring, std::fs::Permissions::from_mode(0o600)).unwrap();
    setpriv(&["dump", ring.to_str().unwrap()], "permission denied");

    // The same user's own process is observed (CAP_DAC_READ_SEARCH for
    // tracefs, whose files are root's).
    let mut own = Command::new("setpriv");
    own.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rip_tests::build_c("uninstrumented", &[]))
        .arg("1");
    let own = Workload::start(own);
    let mut all = as_nobody_with("+bpf,+perfmon,+dac_read_search");
    all.extend(
        [
            CLI,
            "offcpu",
            "--pid",
            &own.pid().to_string(),
            "--duration",
            "1s",
            "--json",
        ]
        .map(String::from),
    );
    let out = rip_tests::run(Command::new("setpriv").args(&all));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The capabilities the README names for the tracing commands (`--pid`,
/// `--cgroup`, `offcpu`, `locks`): BPF, perf events, and reading tracefs,
/// which is root's.
const TRACING: &str = "+bpf,+perfmon,+dac_read_search";
/// What `--uprobe` and `calls` need beside them: the kernel refuses uprobe
/// events without CAP_SYS_ADMIN.
const UPROBES: &str = "+bpf,+perfmon,+dac_read_search,+sys_admin";

/// Runs the CLI as nobody with exactly `caps` (`-all`: none) and returns
/// its JSON output, failing with its stderr when it fails.
fn json_as_nobody(caps: &str, args: &[&str]) -> serde_json::Value {
    let mut all = as_nobody_with(caps);
    all.push(CLI.into());
    all.extend(args.iter().map(|s| s.to_string()));
    let out = rip_tests::run(Command::new("setpriv").args(&all));
    assert!(
        out.status.success(),
        "[{caps}] rip-probe {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "[{caps}] rip-probe {}: not JSON ({e}): {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The CLI run as nobody with exactly `caps` fails in one line naming
/// what to grant.
fn refused_as_nobody(caps: &str, args: &[&str], expect: &str) {
    let mut all = as_nobody_with(caps);
    all.push(CLI.into());
    all.extend(args.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_one_line_error("setpriv", &all, expect);
}

/// Every command, run by nobody on nobody's own processes with exactly
/// the capabilities the README's table gives it, works: `dump`, `list`
/// with none; `--pid` and `offcpu` with CAP_BPF and CAP_PERFMON;
/// `--cgroup`, `locks` with CAP_DAC_READ_SEARCH as well; `--uprobe` and `calls` with those
/// where the kernel has uprobe_multi links, and CAP_SYS_ADMIN as well one
/// uprobe at a time. One capability fewer gets the one-line error that
/// names what to grant.
#[test]
fn every_command_works_as_nobody_with_the_documented_capabilities() {
    if !bpf_tests_enabled("every_command_works_as_nobody_with_the_documented_capabilities") {
        return;
    }
    // nobody's ring, in a directory nobody may write.
    let dir = TempDir::new("/dev/shm", "caps-own");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let ring = dir.join("server.ring");
    let mut server = Command::new("setpriv");
    server
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_rip-demo-server"))
        .args(["--workers", "1", "--spinners", "0", "--ring"])
        .arg(&ring);
    let server = Workload::start(server);
    let mut plain = Command::new("setpriv");
    plain
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rip_tests::build_c("uninstrumented", &[]))
        .arg("1");
    let plain = Workload::start(plain);
    let (pid, plain_pid) = (server.pid().to_string(), plain.pid().to_string());
    let pid_num = u64::from(server.pid());

    // No capabilities: the ring, read as its owner.
    let v = json_as_nobody("-all", &["dump", "--pid", &pid, "--json"]);
    assert_eq!(v["process"]["pid"].as_u64(), Some(pid_num), "{v}");
    let v = json_as_nobody("-all", &["dump", ring.to_str().unwrap(), "--json"]);
    assert_eq!(v["process"]["pid"].as_u64(), Some(pid_num), "{v}");
    let v = json_as_nobody("-all", &["list", "--json"]);
    assert!(v.to_string().contains(ring.to_str().unwrap()), "{v}");

    // The tracing commands.
    let v = json_as_nobody(TRACING, &["--pid", &pid, "--duration", "300ms", "--json"]);
    assert_eq!(v["process"]["pid"].as_u64(), Some(pid_num), "{v}");
    assert!(
        v["threads"].as_array().is_some_and(|t| !t.is_empty()),
        "{v}"
    );
    json_as_nobody(
        TRACING,
        &["offcpu", "--pid", &pid, "--duration", "300ms", "--json"],
    );
    json_as_nobody(
        TRACING,
        &["locks", "--pid", &pid, "--duration", "300ms", "--json"],
    );
    let cg = Cgroup::new("rip-caps-test");
    std::fs::write(cg.0.join("cgroup.procs"), &pid).unwrap();
    let v = json_as_nobody(
        TRACING,
        &[
            "--cgroup",
            cg.0.to_str().unwrap(),
            "--duration",
            "300ms",
            "--json",
        ],
    );
    assert_eq!(
        v["processes"][0]["process"]["pid"].as_u64(),
        Some(pid_num),
        "{v}"
    );

    // The uprobe commands.
    let v = json_as_nobody(
        UPROBES,
        &[
            "--pid",
            &plain_pid,
            "--uprobe",
            "worker_wait",
            "--duration",
            "300ms",
            "--json",
        ],
    );
    assert_eq!(
        v["process"]["pid"].as_u64(),
        Some(u64::from(plain.pid())),
        "{v}"
    );
    let v = json_as_nobody(
        UPROBES,
        &[
            "calls",
            "--pid",
            &plain_pid,
            "--uprobe",
            "worker_step",
            "--duration",
            "300ms",
            "--json",
        ],
    );
    assert!(v.to_string().contains("worker_step"), "{v}");

    // One capability fewer: what to grant, in one line.
    let window = ["--duration", "300ms"];
    let pid_args = ["--pid", pid.as_str(), window[0], window[1]];
    refused_as_nobody(
        "+perfmon,+dac_read_search",
        &pid_args,
        "grant CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH",
    );
    // sched_switch is a raw tracepoint: `--pid` and `offcpu` read nothing
    // of tracefs, and need no CAP_DAC_READ_SEARCH.
    for args in [
        &pid_args[..],
        &["offcpu", "--pid", &pid, window[0], window[1]],
    ] {
        let mut args = args.to_vec();
        args.push("--json");
        let v = json_as_nobody("+bpf,+perfmon", &args);
        assert_eq!(v["process"]["pid"].as_u64(), pid.parse().ok(), "{v}");
    }
    // tracefs is root's on this machine (the kernel's default modes)
    // unless someone opened it up; then CAP_DAC_READ_SEARCH is not needed
    // and there is no refusal to check.
    let tracefs_mode = std::fs::metadata("/sys/kernel/tracing")
        .map(|m| m.permissions().mode())
        .unwrap_or(0o700);
    if tracefs_mode & 0o005 == 0 {
        refused_as_nobody(
            "+bpf,+perfmon",
            &["locks", "--pid", &pid, window[0], window[1]],
            "grant CAP_DAC_READ_SEARCH",
        );
    } else {
        eprintln!("tracefs is open to others (mode {tracefs_mode:o}): its refusal is not checked");
    }
    for args in [
        &[
            "--pid",
            plain_pid.as_str(),
            "--uprobe",
            "worker_wait",
            window[0],
            window[1],
        ][..],
        &[
            "calls",
            "--pid",
            &plain_pid,
            "--uprobe",
            "worker_step",
            window[0],
            window[1],
        ],
    ] {
        // On a kernel with uprobe_multi links (6.6), the three suffice.
        if uprobe_multi_kernel() {
            let mut all = as_nobody_with(TRACING);
            all.push(CLI.into());
            all.extend(args.iter().map(|s| s.to_string()));
            let out = rip_tests::run(Command::new("setpriv").args(&all));
            assert!(
                out.status.success(),
                "[{TRACING}] rip-probe {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // One uprobe at a time (older kernels) is a perf event each, which
        // the kernel refuses without CAP_SYS_ADMIN.
        let mut one_by_one = vec!["RIP_PROBE_UPROBE_MULTI=0", CLI];
        one_by_one.extend_from_slice(args);
        refused_as_nobody_via_env(TRACING, &one_by_one, "need CAP_SYS_ADMIN");
    }
}

/// Whether this kernel has uprobe_multi links (Linux 6.6).
fn uprobe_multi_kernel() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 6)
}

/// [`refused_as_nobody`] for `env VAR=VALUE PROGRAM ARGS…` (`args`
/// starts with the variable): the ambient capabilities pass through
/// `env` to rip-probe.
fn refused_as_nobody_via_env(caps: &str, args: &[&str], expect: &str) {
    let mut all = as_nobody_with(caps);
    all.push("/usr/bin/env".into());
    all.extend(args.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_one_line_error("setpriv", &all, expect);
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
        let dir = std::path::Path::new(&root).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Cgroup(dir)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its process is killed first (the workloads are declared before
        // it, so dropped after: kill them here): a cgroup is removed once
        // empty, which the kernel reports in cgroup.events.
        if let Ok(procs) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for _ in 0..500 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

/// The README's `setcap` lines work as written: a copy of rip-probe given
/// `cap_bpf,cap_perfmon,cap_dac_read_search+ep`, started by nobody with no
/// capabilities of its own, reports nobody's process, and is told to add
/// CAP_SYS_ADMIN for `calls`; given `cap_sys_admin` as well, `calls` works.
#[test]
fn the_readmes_setcap_lines_work_as_written() {
    if !bpf_tests_enabled("the_readmes_setcap_lines_work_as_written") {
        return;
    }
    let dir = TempDir::new("/tmp", "setcap");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("rip-probe");
    // Copied by cp: see set_id_copies_are_refused.
    assert!(
        rip_tests::run(Command::new("cp").arg(CLI).arg(&copy))
            .status
            .success()
    );
    let copy = copy.to_str().unwrap().to_string();
    let setcap = |caps: &str| {
        let out = rip_tests::run(Command::new("setcap").arg(caps).arg(&copy));
        assert!(
            out.status.success(),
            "setcap {caps}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut plain = Command::new("setpriv");
    plain
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(rip_tests::build_c("uninstrumented", &[]))
        .arg("1");
    let plain = Workload::start(plain);
    let pid = plain.pid().to_string();
    // nobody, with nothing inherited: the file's capabilities alone.
    let nobody = |args: &[&str]| {
        let mut all = vec![
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            copy.as_str(),
        ];
        all.extend_from_slice(args);
        all.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let calls = [
        "calls",
        "--pid",
        &pid,
        "--uprobe",
        "worker_step",
        "--duration",
        "300ms",
        "--json",
    ];

    setcap("cap_bpf,cap_perfmon,cap_dac_read_search+ep");
    let out = rip_tests::run(Command::new("setpriv").args(nobody(&[
        "--pid",
        &pid,
        "--duration",
        "300ms",
        "--json",
    ])));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["process"]["pid"].as_u64(),
        Some(u64::from(plain.pid())),
        "{v}"
    );
    // With uprobe_multi links (6.6) the three suffice for uprobes too; one
    // uprobe at a time (older kernels, or RIP_PROBE_UPROBE_MULTI=0) needs
    // CAP_SYS_ADMIN as well.
    if uprobe_multi_kernel() {
        let out = rip_tests::run(Command::new("setpriv").args(nobody(&calls)));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let args = nobody(&calls);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (exe, rest) = args.split_at(args.iter().position(|a| a.ends_with("/rip-probe")).unwrap());
    let mut via_env: Vec<&str> = exe.to_vec();
    via_env.extend(["/usr/bin/env", "RIP_PROBE_UPROBE_MULTI=0"]);
    via_env.extend_from_slice(rest);
    assert_one_line_error("setpriv", &via_env, "need CAP_SYS_ADMIN");

    setcap("cap_bpf,cap_perfmon,cap_dac_read_search,cap_sys_admin+ep");
    let out = rip_tests::run(Command::new("setpriv").args(nobody(&calls)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("worker_step"));
}
