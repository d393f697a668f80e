//! Decoding a blocked thread's system call: its name, and its arguments as
//! a person reads them (fds resolved to what they are, futex operations by
//! name, sleep durations).
//!
//! Decoding needs two things from the target — what an fd refers to, and a
//! few bytes of its memory (a `timespec`) — behind collection's
//! [`Lookup`] trait so the rules here are tested without a live process.

use crate::{
    collect::Lookup,
    model::{Syscall, SyscallArg},
    util::timefmt::duration,
};

/// The syscall's name for x86-64 number `nr`.
pub(crate) fn syscall_name(nr: i64) -> String {
    usize::try_from(nr)
        .ok()
        .and_then(syscalls::Sysno::new)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}

/// Decodes syscall `nr` with raw arguments `args`. Returns `None` when `nr`
/// is negative (the thread is not in a syscall).
pub(crate) fn decode(nr: i64, args: &[u64; 6], look: &dyn Lookup) -> Option<Syscall> {
    if nr < 0 {
        return None;
    }
    let name = syscall_name(nr);
    let spec = arg_spec(&name);
    let mut out = Vec::with_capacity(spec.len());
    for (i, kind) in spec.iter().enumerate() {
        let raw = args[i];
        let (arg_name, text) = decode_arg(*kind, raw, args, look);
        out.push(SyscallArg {
            name: arg_name,
            raw,
            text,
        });
    }
    let text = format!(
        "{name}({})",
        out.iter()
            .map(|a| a.text.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Some(Syscall {
        nr,
        name,
        args: out,
        text,
    })
}

/// How to read one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    Fd,
    Epfd,
    Addr(&'static str),
    Count(&'static str),
    Int(&'static str),
    FutexOp,
    FutexVal,
    FutexTimeout,
    Timespec(&'static str),
    ClockId,
    ClockFlags,
    TimeoutMs,
    Pollfds,
    WaitPid,
    WaitOptions,
}

/// The arguments we decode, per syscall. Others show no arguments: we do
/// not know them well enough to label them honestly.
fn arg_spec(name: &str) -> &'static [Arg] {
    use Arg::*;
    match name {
        "read" | "write" => &[Fd, Addr("buf"), Count("count")],
        "pread64" | "pwrite64" => &[Fd, Addr("buf"), Count("count"), Int("offset")],
        "readv" | "writev" => &[Fd, Addr("iov"), Count("iovcnt")],
        "recvfrom" | "sendto" => &[Fd, Addr("buf"), Count("len"), Int("flags")],
        "recvmsg" | "sendmsg" => &[Fd, Addr("msg"), Int("flags")],
        "recvmmsg" | "sendmmsg" => &[Fd, Addr("msgvec"), Count("vlen"), Int("flags")],
        "accept" => &[Fd, Addr("addr"), Addr("addrlen")],
        "accept4" => &[Fd, Addr("addr"), Addr("addrlen"), Int("flags")],
        "connect" => &[Fd, Addr("addr"), Count("addrlen")],
        "poll" => &[Pollfds, Count("nfds"), TimeoutMs],
        "ppoll" => &[Pollfds, Count("nfds"), Timespec("tmo_p")],
        "epoll_wait" => &[Epfd, Addr("events"), Count("maxevents"), TimeoutMs],
        "epoll_pwait" | "epoll_pwait2" => &[Epfd, Addr("events"), Count("maxevents"), TimeoutMs],
        "select" | "pselect6" => &[Count("nfds"), Addr("readfds"), Addr("writefds")],
        "futex" => &[Addr("uaddr"), FutexOp, FutexVal, FutexTimeout],
        "nanosleep" => &[Timespec("req"), Addr("rem")],
        "clock_nanosleep" => &[ClockId, ClockFlags, Timespec("req"), Addr("rem")],
        "wait4" => &[WaitPid, Addr("wstatus"), WaitOptions, Addr("rusage")],
        "waitid" => &[Int("idtype"), Int("id"), Addr("infop"), WaitOptions],
        "flock" => &[Fd, Int("operation")],
        "fsync" | "fdatasync" => &[Fd],
        "pause" | "sched_yield" => &[],
        "rt_sigsuspend" | "rt_sigtimedwait" => &[Addr("set")],
        "msgrcv" | "msgsnd" | "semop" => &[Int("id")],
        "openat" => &[Int("dirfd"), Addr("pathname"), Int("flags")],
        _ => &[],
    }
}

fn decode_arg(kind: Arg, raw: u64, all: &[u64; 6], look: &dyn Lookup) -> (&'static str, String) {
    match kind {
        Arg::Fd | Arg::Epfd => {
            let name = if kind == Arg::Fd { "fd" } else { "epfd" };
            let fd = raw as i32;
            match look.fd(fd) {
                Some(what) => (name, format!("{fd} ({what})")),
                None => (name, fd.to_string()),
            }
        }
        Arg::Addr(n) => (n, format!("{raw:#x}")),
        Arg::Count(n) | Arg::Int(n) => (n, (raw as i64).to_string()),
        Arg::FutexOp => ("op", futex_op(raw as u32)),
        Arg::FutexVal => ("val", (raw as u32).to_string()),
        Arg::FutexTimeout => {
            // Only the wait operations take a timeout in argument 4.
            if futex_ops::is_wait(futex_ops::cmd(all[1] as u32)) {
                ("timeout", timespec_arg(raw, look))
            } else {
                ("val2", raw.to_string())
            }
        }
        Arg::Timespec(n) => (n, timespec_arg(raw, look)),
        Arg::ClockId => ("clockid", clock_name(raw as i32)),
        Arg::ClockFlags => (
            "flags",
            if raw & 1 != 0 {
                "TIMER_ABSTIME".into()
            } else {
                "0".into()
            },
        ),
        Arg::TimeoutMs => {
            let ms = raw as i32;
            (
                "timeout",
                if ms < 0 {
                    "infinite".into()
                } else {
                    format!("{ms}ms")
                },
            )
        }
        Arg::Pollfds => ("fds", pollfds(raw, all[1], look)),
        Arg::WaitPid => {
            let pid = raw as i32;
            let text = match pid {
                -1 => "-1 (any child)".to_string(),
                0 => "0 (any child in our group)".to_string(),
                p if p < -1 => format!("{p} (any child in group {})", -p),
                p => p.to_string(),
            };
            ("pid", text)
        }
        Arg::WaitOptions => ("options", wait_options(raw as i32)),
    }
}

use rip_ebpf::futex_ops::{self, FUTEX_CLOCK_REALTIME, FUTEX_PRIVATE_FLAG};

/// `FUTEX_WAIT_PRIVATE`, `FUTEX_WAKE`, ... with `|FUTEX_CLOCK_REALTIME`.
pub(crate) fn futex_op(op: u32) -> String {
    let cmd = futex_ops::cmd(op);
    let mut s = match futex_ops::name(cmd) {
        Some(n) => n.to_string(),
        None => format!("{cmd:#x}"),
    };
    if op & FUTEX_PRIVATE_FLAG != 0 {
        s.push_str("_PRIVATE");
    }
    if op & FUTEX_CLOCK_REALTIME != 0 {
        s.push_str("|FUTEX_CLOCK_REALTIME");
    }
    s
}

fn clock_name(id: i32) -> String {
    match id {
        libc::CLOCK_REALTIME => "CLOCK_REALTIME".into(),
        libc::CLOCK_MONOTONIC => "CLOCK_MONOTONIC".into(),
        libc::CLOCK_PROCESS_CPUTIME_ID => "CLOCK_PROCESS_CPUTIME_ID".into(),
        libc::CLOCK_THREAD_CPUTIME_ID => "CLOCK_THREAD_CPUTIME_ID".into(),
        libc::CLOCK_MONOTONIC_RAW => "CLOCK_MONOTONIC_RAW".into(),
        libc::CLOCK_REALTIME_COARSE => "CLOCK_REALTIME_COARSE".into(),
        libc::CLOCK_MONOTONIC_COARSE => "CLOCK_MONOTONIC_COARSE".into(),
        libc::CLOCK_BOOTTIME => "CLOCK_BOOTTIME".into(),
        libc::CLOCK_REALTIME_ALARM => "CLOCK_REALTIME_ALARM".into(),
        libc::CLOCK_BOOTTIME_ALARM => "CLOCK_BOOTTIME_ALARM".into(),
        libc::CLOCK_TAI => "CLOCK_TAI".into(),
        n => n.to_string(),
    }
}

fn wait_options(o: i32) -> String {
    let mut parts = Vec::new();
    for (bit, name) in [
        (libc::WNOHANG, "WNOHANG"),
        (libc::WUNTRACED, "WUNTRACED"),
        (libc::WEXITED, "WEXITED"),
        (libc::WCONTINUED, "WCONTINUED"),
        (libc::WNOWAIT, "WNOWAIT"),
        (libc::__WNOTHREAD, "__WNOTHREAD"),
        (libc::__WALL, "__WALL"),
        (libc::__WCLONE, "__WCLONE"),
    ] {
        if o & bit != 0 {
            parts.push(name);
        }
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("|")
    }
}

/// A `struct timespec *` argument: the duration it holds, or `NULL`.
fn timespec_arg(ptr: u64, look: &dyn Lookup) -> String {
    if ptr == 0 {
        return "NULL".into();
    }
    match look.mem(ptr, 16) {
        Some(b) if b.len() == 16 => {
            let sec = i64::from_ne_bytes(b[0..8].try_into().expect("8 bytes"));
            let nsec = i64::from_ne_bytes(b[8..16].try_into().expect("8 bytes"));
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                format!("{{{sec}, {nsec}}}")
            } else {
                let ns = (sec as u64)
                    .saturating_mul(1_000_000_000)
                    .saturating_add(nsec as u64);
                duration(ns)
            }
        }
        _ => format!("{ptr:#x}"),
    }
}

/// `poll`'s fd array: up to four fds with what they are.
fn pollfds(ptr: u64, nfds: u64, look: &dyn Lookup) -> String {
    let n = nfds.min(4) as usize;
    let Some(b) = look.mem(ptr, n * 8).filter(|b| b.len() == n * 8) else {
        return format!("{ptr:#x}");
    };
    let mut parts = Vec::new();
    for c in b.chunks_exact(8) {
        let fd = i32::from_ne_bytes(c[0..4].try_into().expect("4 bytes"));
        parts.push(match look.fd(fd) {
            Some(what) => format!("{fd} ({what})"),
            None => fd.to_string(),
        });
    }
    if nfds as usize > n {
        parts.push("...".into());
    }
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;
    impl Lookup for Fake {
        fn fd(&self, fd: i32) -> Option<String> {
            (fd == 3).then(|| "pipe:[42]".to_string())
        }
        fn mem(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
            match addr {
                0x1000 => {
                    let mut v = 1i64.to_ne_bytes().to_vec();
                    v.extend(500_000_000i64.to_ne_bytes());
                    Some(v[..len].to_vec())
                }
                0x2000 => {
                    let mut v = Vec::new();
                    for fd in [3i32, 7] {
                        v.extend(fd.to_ne_bytes());
                        v.extend(1i16.to_ne_bytes());
                        v.extend(0i16.to_ne_bytes());
                    }
                    Some(v[..len.min(v.len())].to_vec())
                }
                _ => None,
            }
        }
    }

    #[test]
    fn read_resolves_fd() {
        let s = decode(0, &[3, 0x7f00, 1, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.name, "read");
        assert_eq!(s.text, "read(3 (pipe:[42]), 0x7f00, 1)");
        assert_eq!(s.args[0].name, "fd");
    }

    #[test]
    fn futex_ops() {
        assert_eq!(futex_op(128), "FUTEX_WAIT_PRIVATE");
        assert_eq!(
            futex_op(9 | 128 | 256),
            "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME"
        );
        let s = decode(202, &[0x7fff_0000, 128, 2, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.text, "futex(0x7fff0000, FUTEX_WAIT_PRIVATE, 2, NULL)");
        let s = decode(202, &[0x10, 0x81, 1, 5, 0, 0], &Fake).unwrap();
        assert_eq!(s.args[3].name, "val2", "FUTEX_WAKE has no timeout");
    }

    /// Argument 4 is a timeout for the operations that wait, and only for
    /// them: a condition variable's wait for a PI mutex has one, a trylock
    /// (which never sleeps) does not.
    #[test]
    fn the_waits_take_a_timeout() {
        use rip_ebpf::futex_ops::*;
        for cmd in 0..14 {
            let s = decode(202, &[0x10, u64::from(cmd | 128), 1, 0x1000, 0, 0], &Fake).unwrap();
            let want = if is_wait(cmd) { "timeout" } else { "val2" };
            assert_eq!(s.args[3].name, want, "{}", NAMES[cmd as usize]);
        }
        let s = decode(202, &[0x10, 11 | 128, 1, 0x1000, 0x20, 0], &Fake).unwrap();
        assert_eq!(s.args[3].text, "1.5s", "FUTEX_WAIT_REQUEUE_PI: {}", s.text);
    }

    #[test]
    fn sleeps_show_duration() {
        let s = decode(35, &[0x1000, 0, 0, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.text, "nanosleep(1.5s, 0x0)");
        let s = decode(230, &[1, 0, 0x1000, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.text, "clock_nanosleep(CLOCK_MONOTONIC, 0, 1.5s, 0x0)");
        let s = decode(35, &[0xdead, 0, 0, 0, 0, 0], &Fake).unwrap();
        assert_eq!(
            s.args[0].text, "0xdead",
            "unreadable memory shows the pointer"
        );
    }

    #[test]
    fn poll_and_wait() {
        let s = decode(7, &[0x2000, 2, u64::MAX, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.text, "poll([3 (pipe:[42]), 7], 2, infinite)");
        let s = decode(61, &[u64::MAX, 0, 0x4000_0000, 0, 0, 0], &Fake).unwrap();
        assert_eq!(s.text, "wait4(-1 (any child), 0x0, __WALL, 0x0)");
    }

    #[test]
    fn not_in_syscall_and_unknown() {
        assert!(decode(-1, &[0; 6], &Fake).is_none());
        assert_eq!(
            decode(100_000, &[0; 6], &Fake).unwrap().name,
            "syscall_100000"
        );
    }
}
