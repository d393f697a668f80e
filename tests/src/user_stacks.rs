//! `tests/c/user_stacks.c`, the program whose threads block in known user
//! stacks, built the ways the stack tests need, and driven over its stdin
//! (a ticker's longest gap).

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::Mutex,
    time::Duration,
};

use crate::target_dir;

/// The chain every blocked thread has under its blocking function,
/// innermost first (the library's two frames in the middle).
pub const CHAIN: [&str; 5] = [
    "stk_lib_inner",
    "stk_lib_outer",
    "stk_chain_b",
    "stk_chain_a",
    "stk_thread",
];

/// How user_stacks.c and its library are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// `-O2 -fomit-frame-pointer`, then `strip --strip-all`: no .symtab,
    /// no DWARF; .dynsym and .eh_frame stay. How programs ship.
    Stripped,
    /// The same, not stripped: DWARF lines.
    Full,
    /// As `Stripped`, the executable not position-independent (`-no-pie`:
    /// its stated addresses are its addresses, a load bias of 0).
    NonPie,
    /// Frame pointers and no CFI for our code (`-fno-asynchronous-unwind-
    /// tables -fno-unwind-tables`): only the saved `bp` can start the walk
    /// through it.
    FramePointersOnly,
}

/// Builds user_stacks.c and its library, once per test process and build.
pub fn build(how: Build) -> PathBuf {
    static BUILT: Mutex<Vec<(Build, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(b, _)| *b == how) {
        return p.clone();
    }
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    let dir = target_dir().join(format!(
        "c-build/{}/user_stacks-{how:?}",
        std::process::id(),
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let flags: &[&str] = match how {
        Build::Stripped | Build::Full | Build::NonPie => &["-O2", "-g", "-fomit-frame-pointer"],
        Build::FramePointersOnly => &[
            "-O2",
            "-fno-omit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    };
    let lib = dir.join("libstkchain.so");
    let exe = dir.join("user_stacks");
    let ok = |cmd: &mut Command| {
        let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(st.success(), "{cmd:?} failed");
    };
    ok(Command::new("cc")
        .args(flags)
        .args(["-Wall", "-Werror", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(c.join("user_stacks_lib.c")));
    ok(Command::new("cc")
        .args(flags)
        .args(["-Wall", "-Werror", "-pthread", "-rdynamic", "-o"])
        .arg(&exe)
        .args(if how == Build::NonPie {
            &["-no-pie"][..]
        } else {
            &[]
        })
        .arg(c.join("user_stacks.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lstkchain", "-Wl,-rpath,$ORIGIN"]));
    let sections = |f: &Path| {
        let out = Command::new("readelf").arg("-S").arg(f).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    match how {
        Build::Stripped | Build::NonPie => {
            ok(Command::new("strip").arg("--strip-all").arg(&exe).arg(&lib));
            let s = sections(&exe);
            assert!(!s.contains(".symtab") && !s.contains(".debug_info"), "{s}");
            assert!(s.contains(".eh_frame_hdr"), "{s}");
        }
        Build::Full => {}
        Build::FramePointersOnly => {
            // The executable keeps the C runtime's CFI (crt1.o's
            // `_start`), which covers none of our functions; the library
            // has an .eh_frame without a single FDE.
            let frames = Command::new("readelf")
                .arg("--debug-dump=frames")
                .arg(&lib)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            assert!(!frames.contains("FDE"), "{frames}");
        }
    }
    built.push((how, exe.clone()));
    exe
}

/// A running user_stacks, killed on drop, that can be sent commands.
pub struct Target {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    lines: Vec<String>,
}

impl Target {
    /// Starts the program built `how` with `workers` more blocked
    /// threads (and a spinning thread if `spin`), and waits for `ready`.
    pub fn start(how: Build, workers: usize, spin: bool) -> Target {
        let mut child = Command::new(build(how))
            .arg(workers.to_string())
            .args(spin.then_some("spin"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start user_stacks");
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            assert!(out.read_line(&mut l).unwrap() > 0, "exited: {lines:?}");
            if l.trim() == "ready" {
                break;
            }
            lines.push(l.trim().to_string());
        }
        Target {
            child,
            stdin,
            out,
            lines,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (kind, tid) of the lines `<prefix> <kind> <tid>`.
    pub fn threads(&self, prefix: &str) -> Vec<(String, u32)> {
        self.lines
            .iter()
            .filter_map(|l| {
                let mut w = l.strip_prefix(prefix)?.split_whitespace();
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect()
    }

    /// Sends `cmd` and returns the reply line.
    pub fn command(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    /// The ticker's longest gap and longest held time since the last
    /// reset.
    pub fn gap(&mut self) -> Ticks {
        let l = self.command("gap");
        let ns: Vec<u64> = l
            .strip_prefix("gap ")
            .map(|n| n.split(' ').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        let [gap, held] = ns[..] else {
            panic!("bad reply {l:?}")
        };
        Ticks {
            gap: Duration::from_nanos(gap),
            held: Duration::from_nanos(held),
        }
    }
}

/// What the ticker measured between two of its 1 ms sleeps.
#[derive(Debug, Clone, Copy)]
pub struct Ticks {
    /// The longest time between two ticks: a busy machine adds to it.
    pub gap: Duration,
    /// The longest of those times less what the thread spent running or
    /// waiting for a CPU: its sleep, plus any time it was stopped or held
    /// by the process's own locks. Load does not add to it.
    pub held: Duration,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
