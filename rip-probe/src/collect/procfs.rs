//! Facts about a live process from /proc: thread names and states, what an
//! fd refers to (sockets resolved to their addresses), and a few bytes of
//! its memory for syscall arguments that are pointers.

use std::{cell::RefCell, collections::HashMap, path::PathBuf};

use super::Lookup;
use crate::{
    collect::Result,
    discover::{Error, read_proc as read},
};

/// The distinct files a process has mapped executable (its binary and
/// shared libraries), from /proc/PID/maps (paths may hold spaces), as
/// paths that reach the mapped inodes: `/proc/PID/map_files/…` where this
/// process may use it, else the path itself if it is still that inode.
/// Only regular files: a FIFO or device put in a mapped file's place is
/// left out.
pub(crate) fn code_files(pid: u32) -> Vec<PathBuf> {
    // The kernel picks the executable mappings (PROCMAP_QUERY, 6.11 on).
    let files = crate::discover::maps::ProcessMaps::open(pid)
        .and_then(|m| m.executable())
        .unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    let mut v = Vec::new();
    for m in files {
        let Some(path) = m.file() else { continue };
        if !seen.insert(path.to_path_buf()) {
            continue;
        }
        v.extend(code_path(pid, &m));
    }
    v
}

/// The path through which a file mapping of process `pid` is read:
/// `/proc/PID/map_files/…` where this process may use it, else the path
/// itself if it is still the mapped inode, here or inside the process's
/// root (`/proc/PID/root/…`, another mount namespace). The symbolizer
/// caches what it parsed by path, so the warm-up and the reports name each
/// binary the same way.
pub(crate) fn code_path(pid: u32, m: &librip::reader::MapsLine) -> Option<PathBuf> {
    use librip::reader::Via;
    match librip::reader::open_mapped_via(pid, m)? {
        (_, Via::MapFiles(p) | Via::Root(p)) => Some(p),
        (_, Via::Path) => Some(m.file()?.to_path_buf()),
    }
}

/// The most of /proc/PID/cmdline a title is made from: a process may
/// set an argument area of any size (megabytes of arguments), and a title
/// is one line of a report.
pub(crate) const TITLE_MAX: usize = 256;

/// The process title of `pid`, as ps(1) shows it: /proc/PID/cmdline (what
/// the program set with prctl or by rewriting its argv, e.g. "postgres:
/// checkpointer"), at most [`TITLE_MAX`] bytes read; `None` for a kernel
/// thread, a process gone, or an empty title.
pub(crate) fn title(pid: u32) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(TITLE_MAX + 1);
    std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .ok()?
        .take(TITLE_MAX as u64 + 1)
        .read_to_end(&mut buf)
        .ok()?;
    sanitize_title(&buf)
}

/// A title from the raw bytes of a cmdline: arguments (NUL-separated)
/// joined by a space, every other control character (the target chose
/// them: an ESC would drive a terminal, a newline would forge a line of a
/// log) a U+FFFD, invalid UTF-8 replaced, cut to [`TITLE_MAX`] bytes with
/// an ellipsis when there was more.
pub(crate) fn sanitize_title(raw: &[u8]) -> Option<String> {
    let cut = raw.len() > TITLE_MAX;
    let raw = &raw[..raw.len().min(TITLE_MAX)];
    let text = String::from_utf8_lossy(raw);
    let mut title: String = text
        .trim_end_matches('\0')
        .chars()
        .map(|c| match c {
            '\0' => ' ',
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect();
    let trimmed = title.trim_end().len();
    title.truncate(trimmed);
    if title.is_empty() {
        return None;
    }
    if cut {
        title.push('…');
    }
    Some(title)
}

/// Whether a file owned by `uid` may speak for process `pid`: the owner
/// is root or the process's real or effective user, who may ptrace it
/// anyway. A ring from anyone else must not get the process's memory
/// layout (its maps) used on its addresses.
pub(crate) fn may_ptrace(uid: u32, pid: u32) -> bool {
    if uid == 0 {
        return true;
    }
    let status = read(pid, 0, "status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|ids| {
            ids.split_whitespace()
                .take(2)
                .any(|id| id.parse::<u32>().is_ok_and(|id| id == uid))
        })
}

/// Thread ids of process `pid`.
pub(crate) fn tids(pid: u32) -> Result<Vec<u32>> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
        _ => Error::ReadProc {
            path: dir.clone().into(),
            source: e,
        },
    })?;
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// How many threads process `pid` has (`Threads:` of its status file):
/// one read, where [`tids`] lists a directory of them.
pub(crate) fn thread_count(pid: u32) -> Result<usize> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
        _ => Error::ReadProc {
            path: path.clone().into(),
            source: e,
        },
    })?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .unwrap_or(1))
}

/// Resolves fds and reads memory of one live process, with caches: ten
/// thousand threads waiting on the same fd cost one readlink.
pub(crate) struct ProcLookup {
    pid: u32,
    fds: RefCell<HashMap<i32, Option<String>>>,
    sockets: RefCell<Option<HashMap<u64, String>>>,
}

impl ProcLookup {
    /// A lookup for process `pid`.
    pub(crate) fn new(pid: u32) -> Self {
        ProcLookup {
            pid,
            fds: RefCell::default(),
            sockets: RefCell::default(),
        }
    }

    fn socket(&self, inode: u64) -> Option<String> {
        let mut cache = self.sockets.borrow_mut();
        let table = cache.get_or_insert_with(|| socket_table(self.pid));
        table.get(&inode).cloned()
    }
}

impl Lookup for ProcLookup {
    fn fd(&self, fd: i32) -> Option<String> {
        if fd < 0 {
            return None;
        }
        if let Some(v) = self.fds.borrow().get(&fd) {
            return v.clone();
        }
        let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.pid))
            .ok()
            .map(|p| p.display().to_string());
        let v = link.map(|l| {
            let inode = l
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|n| n.parse().ok());
            match inode.and_then(|i| self.socket(i)) {
                Some(desc) => format!("{l} {desc}"),
                None => l,
            }
        });
        self.fds.borrow_mut().insert(fd, v.clone());
        v
    }

    fn mem(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if len == 0 || len > 4096 {
            return None;
        }
        let mut buf = vec![0u8; len];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: one local iovec over our buffer; the remote one is only
        // read by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(self.pid as i32, &local, 1, &remote, 1, 0) };
        (n == len as isize).then_some(buf)
    }
}

/// Socket inode → `TCP 127.0.0.1:80 -> 10.0.0.2:5555 ESTABLISHED`, from the
/// target's network namespace (`/proc/<pid>/net/{tcp,tcp6,udp,udp6,unix}`).
fn socket_table(pid: u32) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let base = PathBuf::from(format!("/proc/{pid}/net"));
    for (file, proto) in [
        ("tcp", "TCP"),
        ("tcp6", "TCP"),
        ("udp", "UDP"),
        ("udp6", "UDP"),
    ] {
        if let Ok(text) = std::fs::read_to_string(base.join(file)) {
            parse_inet(&text, proto, &mut out);
        }
    }
    if let Ok(text) = std::fs::read_to_string(base.join("unix")) {
        parse_unix(&text, &mut out);
    }
    out
}

fn parse_inet(text: &str, proto: &str, out: &mut HashMap<u64, String>) {
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let (Some(local), Some(remote), Ok(inode)) =
            (inet_addr(f[1]), inet_addr(f[2]), f[9].parse::<u64>())
        else {
            continue;
        };
        let state = tcp_state(f[3]);
        let desc = if proto == "TCP" && state == "LISTEN" {
            format!("{proto} {local} LISTEN")
        } else if remote.ends_with(":0") && proto == "UDP" {
            format!("{proto} {local}")
        } else {
            format!("{proto} {local} -> {remote} {state}")
        };
        out.insert(inode, desc.trim_end().to_string());
    }
}

fn parse_unix(text: &str, out: &mut HashMap<u64, String>) {
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 {
            continue;
        }
        let Ok(inode) = f[6].parse::<u64>() else {
            continue;
        };
        let path = f.get(7).copied().unwrap_or("(unnamed)");
        let listening = f[3] == "00010000";
        let desc = if listening {
            format!("UNIX {path} LISTEN")
        } else {
            format!("UNIX {path}")
        };
        out.insert(inode, desc);
    }
}

/// `0100007F:1F90` → `127.0.0.1:8080`; 32-hex-digit IPv6 forms too.
fn inet_addr(s: &str) -> Option<String> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    match ip.len() {
        8 => {
            let v = u32::from_str_radix(ip, 16).ok()?;
            let ip = std::net::Ipv4Addr::from(v.swap_bytes());
            Some(format!("{ip}:{port}"))
        }
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&w.swap_bytes().to_be_bytes());
            }
            Some(format!("[{}]:{port}", std::net::Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

fn tcp_state(hex: &str) -> &'static str {
    match hex {
        "01" => "ESTABLISHED",
        "02" => "SYN_SENT",
        "03" => "SYN_RECV",
        "04" => "FIN_WAIT1",
        "05" => "FIN_WAIT2",
        "06" => "TIME_WAIT",
        "07" => "CLOSE",
        "08" => "CLOSE_WAIT",
        "09" => "LAST_ACK",
        "0A" => "LISTEN",
        "0B" => "CLOSING",
        _ => "",
    }
}

/// Whether thread `tid` of `pid` is asleep (`S`, `D`, `I`, `P`), from its
/// stat file.
pub(crate) fn asleep(pid: u32, tid: u32) -> bool {
    crate::discover::stat(pid, tid).is_some_and(|s| matches!(s.state, 'S' | 'D' | 'I' | 'P'))
}

/// CPU time thread `tid` of `pid` has run, ns (`se.sum_exec_runtime`, the
/// first field of its schedstat file).
pub(crate) fn run_time_ns(pid: u32, tid: u32) -> Option<u64> {
    let text = crate::discover::read_proc(pid, tid, "schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The user stack and instruction pointers of a thread in a syscall, from
/// `/proc/PID/task/TID/syscall` (`NR ARG1 … ARG6 SP PC`). No frame
/// pointer: the unwinder follows the CFI. `None` for a thread not in a
/// syscall (`running`, or a negative number: blocked by a fault or an
/// interrupt).
pub(crate) fn syscall_regs(pid: u32, tid: u32) -> Option<rip_ebpf::UserRegs> {
    let text = crate::discover::read_proc(pid, tid, "syscall").ok()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let hex = |s: &&str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let (sp, ip) = (hex(words.get(7)?)?, hex(words.get(8)?)?);
    Some(rip_ebpf::UserRegs {
        syscall_nr: words.first()?.parse().ok()?,
        ip,
        sp,
        ..rip_ebpf::UserRegs::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_or_the_process_user_may_speak_for_it() {
        let me = std::process::id();
        let uid = rustix::process::getuid().as_raw();
        assert!(may_ptrace(0, me));
        assert!(may_ptrace(uid, me));
        assert!(!may_ptrace(uid.wrapping_add(4242), me));
    }

    #[test]
    fn inet_addresses() {
        assert_eq!(inet_addr("0100007F:1F90").unwrap(), "127.0.0.1:8080");
        assert_eq!(
            inet_addr("00000000000000000000000001000000:0050").unwrap(),
            "[::1]:80"
        );
        let mut m = HashMap::new();
        parse_inet(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5555 1 0000000000000000 100 0 0 10 0\n",
            "TCP",
            &mut m,
        );
        assert_eq!(m[&5555], "TCP 127.0.0.1:8080 LISTEN");
    }

    #[test]
    fn own_code_files() {
        // map_files entries (as root) read back as the mapped paths.
        let files: Vec<PathBuf> = code_files(std::process::id())
            .into_iter()
            .map(|f| std::fs::read_link(&f).unwrap_or(f))
            .collect();
        let me = std::env::current_exe().unwrap();
        assert!(files.contains(&me), "{files:?}");
        assert!(
            files.iter().any(|f| f.to_string_lossy().contains("libc")),
            "{files:?}"
        );
    }

    #[test]
    fn lookup_own_process() {
        let me = ProcLookup::new(std::process::id());
        let x = 0x1234_5678_u64;
        let got = me.mem(&x as *const u64 as u64, 8).unwrap();
        assert_eq!(u64::from_ne_bytes(got.try_into().unwrap()), x);
        assert!(me.fd(0).is_some() || me.fd(1).is_some());
        assert!(me.fd(-1).is_none());
    }

    /// A mapped file named "a b" beside a FIFO named "a": the maps parser
    /// keeps the whole path, and nothing opens (or hangs on) "a".
    #[test]
    fn a_b_path() {
        let dir = std::env::temp_dir().join(format!("rip-ab-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let ab = dir.join("a b");
        std::fs::write(&ab, vec![0u8; 4096]).unwrap();
        let a = dir.join("a");
        let c = std::ffi::CString::new(a.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let f = std::fs::File::open(&ab).unwrap();
        let m = crate::collect::exec_mapping::ExecMapping::of(&f);
        let t = std::time::Instant::now();
        let files = code_files(std::process::id());
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        drop(m);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let _ = maps;
        assert!(files.iter().all(|p| p != &a), "opened the FIFO: {files:?}");
        assert!(!files.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A title is the arguments joined; the target's control characters
    /// never reach a report; a huge argument area is cut, and says so.
    #[test]
    fn titles_are_bounded_and_sanitized() {
        assert_eq!(
            sanitize_title(b"postgres: checkpointer \0\0\0").as_deref(),
            Some("postgres: checkpointer")
        );
        assert_eq!(
            sanitize_title(b"/usr/bin/app\0-p\08080\0").as_deref(),
            Some("/usr/bin/app -p 8080")
        );
        let evil = sanitize_title(b"a\x1b[2Jb\nc\x9bd\xff").unwrap();
        assert!(!evil.chars().any(char::is_control), "{evil:?}");
        assert!(evil.starts_with('a') && evil.contains('b'), "{evil:?}");
        let long = sanitize_title(&[b'x'; 10_000]).unwrap();
        assert!(long.ends_with('…') && long.len() <= TITLE_MAX + '…'.len_utf8());
        assert_eq!(sanitize_title(b""), None);
        assert_eq!(sanitize_title(b"\0\0"), None);
        // Ours.
        let me = title(std::process::id()).unwrap();
        assert!(!me.is_empty());
    }
}
