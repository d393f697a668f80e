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
