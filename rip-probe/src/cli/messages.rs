//! The one-line messages the CLI prints for errors, made from the typed
//! errors in this one place: what failed and on what (the error's own
//! words), the flag it came from, and what to do about it. Also which
//! errors are command-line mistakes (exit status 2).

use crate::{
    collect::{cgroup, kernel},
    discover,
    error::Error,
};

/// How to give rip-probe the capabilities BPF needs.
const SETCAP: &str = "`setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep <rip-probe>`";

/// The message for `e` and its causes on one line, `: `-separated, with
/// the flag involved and what to do.
pub(crate) fn one_line(e: &Error) -> String {
    let mut parts = vec![head(e)];
    // librip's reader puts the cause in its own words.
    if !matches!(e, Error::Ring(_)) {
        parts.extend(crate::util::chain(e).skip(1).map(|c| c.to_string()));
    }
    parts.join(": ").replace('\n', " ")
}

/// The exit status for `e`: 2 for a command line that asks for something
/// that cannot be done (a pattern, a cgroup, an option), else 1.
pub(crate) fn exit_status(e: &Error) -> i32 {
    match e {
        Error::Usage(_) | Error::Args(_) | Error::Cgroup(_) => 2,
        Error::Kernel(k) if from_uprobe(k) => 2,
        // As a shell reports a process a signal ended: 128 + its number.
        Error::Kernel(kernel::Error::Interrupted { signal, .. }) => match *signal {
            "SIGTERM" => 128 + libc::SIGTERM,
            _ => 128 + libc::SIGINT,
        },
        _ => 1,
    }
}

/// Whether `e` is about what `--uprobe` asked for.
fn from_uprobe(e: &kernel::Error) -> bool {
    use kernel::Error as K;
    matches!(
        e,
        K::NoSuchLibrary { .. }
            | K::Unreachable { .. }
            | K::BadPattern { .. }
            | K::Symbols { .. }
            | K::NoMatch { .. }
            | K::TooManyMatches { .. }
            | K::TooManyOneByOne { .. }
            | K::TooManyToTime { .. }
            | K::NotMappedExecutable { .. }
    )
}

/// `e`'s own message with the flag and the advice.
fn head(e: &Error) -> String {
    match e {
        Error::Discover(d) => discover(d),
        Error::Kernel(k) => kernel(k),
        Error::Cgroup(c) => cgroup(c),
        e => e.to_string(),
    }
}

fn discover(e: &discover::Error) -> String {
    use discover::Error as D;
    let what = e.to_string();
    match e {
        D::NoSuchProcess(pid) => format!("{what}: check the pid with `ps -p {pid}`"),
        D::Hidden(_) => format!(
            "{what}: run as root, or mount /proc with hidepid=0 (or gid=GROUP for a group you \
             are in)"
        ),
        D::KernelThread { pid, comm, lacks } => {
            let lacks = match lacks {
                discover::Lacks::UprobeFunctions => {
                    "it has no functions for --uprobe to probe".into()
                }
                lacks => lacks.to_string(),
            };
            format!(
                "process {pid} ({comm}) is a kernel thread: it has no user space, so {lacks}; \
                 `rip-probe --pid {pid}` shows its kernel state and stack"
            )
        }
        D::NoRing(pid) => format!(
            "{what}: it must link librip and create a ring (rip_create_ring / \
             librip::Ring::create); `rip-probe --pid {pid}` still shows kernel state"
        ),
        D::UserNamespace(_) => format!(
            "{what}: loading BPF and reading other processes' /proc/PID/map_files and \
             /proc/PID/root need CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN in the host's user \
             namespace; run it on the host or in a privileged container (docker run --privileged)"
        ),
        D::ProcOfAnotherPidNamespace(_) => format!(
            "{what}: mount a /proc for it (unshare --pid --fork --mount-proc, or `mount -t proc \
             proc /proc` in a mount namespace of its own), or run it in the host's pid namespace"
        ),
        D::NotInOurPidNamespace { .. } => format!(
            "{what}: give the pid as `ps` shows it in this namespace, or run rip-probe in the \
             target's pid namespace (kubectl debug --target=CONTAINER, docker run \
             --pid=container:X) or the host's"
        ),
        D::SetId { .. } => format!(
            "{what}: remove the bit (chmod u-s,g-s) and grant capabilities instead ({SETCAP}), \
             or run it as root"
        ),
        D::NotYours { .. } => format!(
            "{what}: with capabilities it observes only what that user may ptrace; run it as \
             root (sudo) to observe this process"
        ),
        D::Zombie { .. }
        | D::ProcUnreadable { .. }
        | D::ReadProc { .. }
        | D::OpenPidfd { .. }
        | D::Ring(_) => what,
    }
}

fn kernel(e: &kernel::Error) -> String {
    use kernel::Error as K;
    let what = e.to_string();
    match e {
        K::NotPrivileged => {
            format!(
                "{what}: run as root, or grant CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH \
                 ({SETCAP}; for one run, as root: `setpriv --reuid=USER --regid=GROUP --init-groups \
                 --inh-caps=+bpf,+perfmon,+dac_read_search \
                 --ambient-caps=+bpf,+perfmon,+dac_read_search rip-probe …`)"
            )
        }
        K::TracefsDenied(_) => format!(
            "{what}: grant CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON ({SETCAP}), or run \
             as root"
        ),
        K::UprobeNeedsSysAdmin { .. } => {
            format!(
                "{what}: uprobes (--uprobe, calls) attached one at a time, as on kernels \
                 before 6.6, need CAP_SYS_ADMIN, which CAP_BPF and CAP_PERFMON do not \
                 replace; run as root, or grant it too \
                 (`setcap cap_bpf,cap_perfmon,cap_dac_read_search,cap_sys_admin+ep <rip-probe>`)"
            )
        }
        K::TracefsMissing => {
            format!("{what}: run `mount -t tracefs nodev /sys/kernel/tracing` as root")
        }
        K::NoBtf => format!("{what}: use a kernel built with CONFIG_DEBUG_INFO_BTF=y"),
        K::NoSuchLibrary { .. } | K::Unreachable { .. } | K::BadPattern { .. } => {
            format!("--uprobe {what}")
        }
        K::NoMatch { .. } => format!("--uprobe {what}"),
        K::Symbols { .. } => format!("--uprobe: {what}"),
        K::TooManyMatches { .. } => format!("--uprobe {what}; use a narrower pattern"),
        K::TooManyToTime { .. } => format!("{what}: narrow the pattern"),
        K::TooManyOneByOne { count, .. } => format!(
            "--uprobe {what}: narrow the pattern, use Linux 6.6 or later (uprobe_multi links), \
             or set RIP_PROBE_ONE_BY_ONE_MAX={count} to wait for the detach"
        ),
        K::Interrupted { .. } => what,
        K::Capabilities(_)
        | K::KernelTooOld { .. }
        | K::Read { .. }
        | K::Unexpected { .. }
        | K::LoadObject(_)
        | K::Program { .. }
        | K::Map { .. }
        | K::MapBatch { .. }
        | K::IteratorLink(_)
        | K::ReadIterator(_)
        | K::PollEvents(_)
        | K::MissingFromObject(_)
        | K::NotMappedExecutable { .. } => what,
    }
}

fn cgroup(e: &cgroup::Error) -> String {
    use cgroup::Error as C;
    let what = e.to_string();
    match e {
        C::NotFound { .. } => format!(
            "--cgroup {what} (give a path under {}, or relative to it, as /proc/PID/cgroup \
             shows it)",
            cgroup::ROOT
        ),
        C::NotCgroup { .. } => format!("--cgroup {what}"),
        C::TooMany { .. } => format!("--cgroup {what}; name a smaller one"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::discover::{Denied, Lacks, NotYoursBecause};

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "gone")
    }

    /// One error of each kind that advises, the object its message must
    /// name and the advice it must give.
    fn advising() -> Vec<(Error, &'static str, &'static str)> {
        use discover::Error as D;
        use kernel::Error as K;
        vec![
            (D::NoSuchProcess(4711).into(), "4711", "ps -p 4711"),
            (D::Hidden(4711).into(), "4711", "hidepid=0"),
            (
                D::KernelThread {
                    pid: 2,
                    comm: "kthreadd".into(),
                    lacks: Lacks::Ring,
                }
                .into(),
                "kthreadd",
                "`rip-probe --pid 2` shows",
            ),
            (D::NoRing(4711).into(), "4711", "it must link librip"),
            (
                D::UserNamespace(4026531837).into(),
                "4026531837",
                "run it on the host",
            ),
            (
                D::ProcOfAnotherPidNamespace(4026531836).into(),
                "4026531836",
                "mount a /proc for it",
            ),
            (
                D::NotInOurPidNamespace {
                    pid: 4711,
                    ns: 4026531836,
                }
                .into(),
                "4711",
                "give the pid as `ps` shows it",
            ),
            (
                D::SetId {
                    ruid: 1000,
                    euid: 0,
                    rgid: 1000,
                    egid: 1000,
                }
                .into(),
                "effective user 0",
                "remove the bit",
            ),
            (
                D::NotYours {
                    pid: 4711,
                    why: NotYoursBecause::User { owner: Some(0) },
                    uid: 1000,
                }
                .into(),
                "4711",
                "run it as root (sudo)",
            ),
            (K::NotPrivileged.into(), "BPF programs", "setcap cap_bpf"),
            (K::TracefsMissing.into(), "tracefs", "mount -t tracefs"),
            (
                K::NoBtf.into(),
                "/sys/kernel/btf/vmlinux",
                "CONFIG_DEBUG_INFO_BTF=y",
            ),
            (
                K::NoSuchLibrary {
                    spec: "libssl:SSL_*".into(),
                    pid: 4711,
                    lib: "libssl".into(),
                }
                .into(),
                "libssl",
                "--uprobe libssl:SSL_*",
            ),
            (
                K::TooManyMatches {
                    spec: "*".into(),
                    count: 9000,
                    max: 2000,
                }
                .into(),
                "9000",
                "narrower pattern",
            ),
            (
                K::TooManyToTime { count: 80, max: 64 }.into(),
                "80",
                "narrow the pattern",
            ),
            (
                cgroup::Error::NotFound {
                    path: "web.slice".into(),
                }
                .into(),
                "--cgroup web.slice",
                "relative to it",
            ),
            (
                cgroup::Error::TooMany {
                    dir: "/sys/fs/cgroup".into(),
                    max: 10_000,
                }
                .into(),
                "--cgroup /sys/fs/cgroup",
                "name a smaller one",
            ),
        ]
    }

    #[test]
    fn each_advising_error_is_one_line_naming_its_object_and_what_to_do() {
        for (e, object, advice) in advising() {
            let m = one_line(&e);
            assert!(!m.contains('\n'), "{m}");
            assert!(m.contains(object), "{object} not in {m}");
            assert!(m.contains(advice), "{advice} not in {m}");
            // The advice is the CLI's: the error's own words are a part,
            // and its own words give none (nor a flag).
            assert!(m.contains(&head_words(&e)), "{m}");
            assert!(!e.to_string().contains(advice), "{e}");
        }
    }

    /// Errors whose reason is also what to do, in the report's notes as in
    /// the CLI's messages (a refused read of a process's files, a kernel
    /// older than rip-probe needs): their own words advise.
    #[test]
    fn self_advising_errors_are_one_line_with_their_advice() {
        use discover::Error as D;
        use kernel::Error as K;
        let cases: Vec<(Error, &str, &str)> = vec![
            (
                D::ProcUnreadable {
                    path: "/proc/4711/maps".into(),
                    why: Denied::OtherUser {
                        pid: 4711,
                        owner: Some(0),
                        uid: 1000,
                    },
                }
                .into(),
                "/proc/4711/maps",
                "run it as root or as that user",
            ),
            (
                K::KernelTooOld {
                    release: "5.4.0".into(),
                    missing: "BPF ring buffers",
                    minimum: "5.9",
                }
                .into(),
                "5.4.0",
                "needs Linux 5.9 or later",
            ),
        ];
        for (e, object, advice) in cases {
            let m = one_line(&e);
            assert_eq!(m, e.one_line());
            assert!(!m.contains('\n'), "{m}");
            assert!(m.contains(object) && m.contains(advice), "{m}");
        }
    }

    /// The first words of `e`'s own message (before its first `:`).
    fn head_words(e: &Error) -> String {
        let own = e.to_string();
        own.split(": ").next().unwrap().to_string()
    }

    /// The messages read as they did when each error was a string: the
    /// tests of the CLI and users' scripts match them.
    #[test]
    fn messages_read_as_before() {
        use discover::Error as D;
        use kernel::Error as K;
        for (e, before) in [
            (
                Error::from(D::NoSuchProcess(4711)),
                "no process with pid 4711: check the pid with `ps -p 4711`",
            ),
            (
                K::NotPrivileged.into(),
                "not permitted to load BPF programs: run as root, or grant CAP_BPF, CAP_PERFMON \
                 and CAP_DAC_READ_SEARCH (`setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep \
                 <rip-probe>`; for one run, as root: `setpriv --reuid=USER --regid=GROUP --init-groups \
                 --inh-caps=+bpf,+perfmon,+dac_read_search \
                 --ambient-caps=+bpf,+perfmon,+dac_read_search rip-probe …`)",
            ),
            (
                K::TracefsMissing.into(),
                "tracefs is not mounted: run `mount -t tracefs nodev /sys/kernel/tracing` as root",
            ),
            (
                D::KernelThread {
                    pid: 2,
                    comm: "kthreadd".into(),
                    lacks: Lacks::UprobeFunctions,
                }
                .into(),
                "process 2 (kthreadd) is a kernel thread: it has no user space, so it has no \
                 functions for --uprobe to probe; `rip-probe --pid 2` shows its kernel state \
                 and stack",
            ),
            (
                K::NoMatch {
                    spec: "app:hanlde*".into(),
                    binary: "/usr/lib/libapp.so".into(),
                    pattern: "hanlde*".into(),
                    near: vec!["handle".into(), "handler".into()],
                }
                .into(),
                "--uprobe app:hanlde*: no function in /usr/lib/libapp.so matches `hanlde*` \
                 (near: handle, handler)",
            ),
            (
                K::Symbols {
                    binary: "/usr/bin/app".into(),
                    why: "no symbols".into(),
                }
                .into(),
                "--uprobe: cannot read /usr/bin/app: no symbols",
            ),
            (
                cgroup::Error::NotCgroup {
                    path: "/sys/fs/cgroup/x".into(),
                }
                .into(),
                "--cgroup /sys/fs/cgroup/x: not a cgroup v2 directory under /sys/fs/cgroup",
            ),
            (
                D::ReadProc {
                    path: "/proc/7/task".into(),
                    source: io(std::io::ErrorKind::Other),
                }
                .into(),
                "/proc/7/task: gone",
            ),
            (
                Error::Ring(librip::reader::ReadError::NoRing(7)),
                &Error::Ring(librip::reader::ReadError::NoRing(7)).to_string(),
            ),
        ] {
            assert_eq!(one_line(&e), before);
        }
    }

    /// A typed error's causes follow it, each once.
    #[test]
    fn causes_follow_on_the_same_line() {
        let source = glob::Pattern::new("[").unwrap_err();
        let glob_says = source.to_string();
        let e = Error::from(kernel::Error::BadPattern {
            spec: "app:[".into(),
            source,
        });
        assert_eq!(
            one_line(&e),
            format!("--uprobe app:[: bad pattern: {glob_says}")
        );
    }

    #[test]
    fn command_line_mistakes_exit_with_2_and_failures_with_1() {
        let usage: Vec<Error> = vec![
            Error::Usage("--training must be shorter than --duration".into()),
            cgroup::Error::NotFound {
                path: PathBuf::from("x"),
            }
            .into(),
            kernel::Error::NotMappedExecutable {
                binary: "/usr/lib/libapp.so".into(),
                pid: 7,
                function: "f".into(),
            }
            .into(),
        ];
        for e in &usage {
            assert_eq!(exit_status(e), 2, "{e}");
        }
        for (e, _, _) in advising() {
            let want = if matches!(
                e,
                Error::Cgroup(_)
                    | Error::Kernel(
                        kernel::Error::NoSuchLibrary { .. }
                            | kernel::Error::TooManyMatches { .. }
                            | kernel::Error::TooManyToTime { .. }
                    )
            ) {
                2
            } else {
                1
            };
            assert_eq!(exit_status(&e), want, "{e}");
        }
        assert_eq!(
            exit_status(&Error::io("stdout", io(std::io::ErrorKind::Other))),
            1
        );
    }
}
