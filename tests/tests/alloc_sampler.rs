//! librip's allocation sampler (librip::alloc): preloaded into programs
//! that know nothing of it (C, Debian's python3), linked into a C program,
//! and used from Rust as the global allocator. Each leaks from one call
//! path among many freed allocations; `rip-probe leaks` finds the path by
//! function name live and after SIGKILL, with exact counts when every
//! allocation is recorded and estimated bytes within sampling error
//! otherwise. A multithreaded storm through every member of the malloc
//! family, with fork() and allocating fork handlers, neither deadlocks nor
//! leaves the table inconsistent; killed at random points, it leaves a
//! table the reader reads, torn entries counted rather than returned.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use librip::reader::{ReadError, RingFile, alloc::AllocTable};
use rip_tests::{Rng, TempDir, Workload, build_c, build_librip_sampler, librip_static, rip_probe};

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");
const RUST_LEAKS: &str = env!("CARGO_BIN_EXE_rip-alloc-leaks");

fn sampler_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(build_librip_sampler)
}

/// `tests/c/alloc_leaks.c`, unmodified.
fn alloc_leaks() -> PathBuf {
    build_c("alloc_leaks", &[])
}

/// The same program linked with librip's static library (the interposer
/// comes with it).
fn alloc_leaks_linked() -> PathBuf {
    let link = librip_static(sampler_dir());
    let mut extra: Vec<&str> = link.iter().map(String::as_str).collect();
    extra.push("-lpthread");
    build_c("alloc_leaks", &extra)
}

/// `cmd` with the sampler preloaded, at `mean`, writing `ring`.
fn preloaded(mut cmd: Command, mean: &str, ring: &Path) -> Command {
    cmd.env("LD_PRELOAD", sampler_dir().join("liblibrip.so"));
    sampled(cmd, mean, ring)
}

/// Runs alloc_leaks with `args` and the sampler preloaded at every call,
/// writing `ring`, to its end; it must succeed (its stderr said if not).
fn leak_every_call(args: &[&str], env: &[(&str, &str)], ring: &Path) {
    let mut cmd = Command::new(alloc_leaks());
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = output(&mut preloaded(cmd, "1", ring), "alloc_leaks");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sampled(mut cmd: Command, mean: &str, ring: &Path) -> Command {
    cmd.env("RIP_ALLOC_SAMPLE", mean)
        .env("RIP_ALLOC_RING", ring);
    cmd
}

/// The stack blocks of `rip-probe leaks` text: each starts with its
/// "heap: …" line.
fn blocks(out: &str) -> Vec<String> {
    out.split("\n\n")
        .filter(|b| b.starts_with("heap: "))
        .map(str::to_string)
        .collect()
}

/// A block without its age (which grows between two readings).
fn ageless(b: &str) -> String {
    let (first, rest) = b.split_once('\n').unwrap_or((b, ""));
    let count = first.split(", oldest ").next().unwrap_or(first);
    format!("{count}\n{rest}")
}

/// The one block whose frames name `function`.
fn block_naming(out: &str, function: &str) -> String {
    let found: Vec<String> = blocks(out)
        .into_iter()
        .filter(|b| b.contains(function))
        .collect();
    assert_eq!(found.len(), 1, "one stack names {function}:\n{out}");
    found.into_iter().next().unwrap()
}

fn leaks(args: &[&str]) -> String {
    let (code, out, err) = rip_probe(CLI, args);
    assert_eq!(code, 0, "rip-probe {args:?}: {err}");
    out
}

fn table(ring: &Path) -> AllocTable {
    RingFile::open(ring)
        .unwrap_or_else(|e| panic!("{}: {e}", ring.display()))
        .allocations()
        .cloned()
        .expect("the ring has an allocation table")
}

/// Kills the workload and waits for it.
fn kill(w: &mut Workload) {
    w.child.kill().expect("SIGKILL");
    w.child.wait().expect("wait");
}

/// Every-call sampling: the leaking path is named with its exact count,
/// live and after SIGKILL; the freed path never appears.
#[test]
fn preloaded_c_program_leak_found_live_and_after_sigkill() {
    let dir = TempDir::new("/dev/shm", "alloc-c");
    let ring = dir.join("c.ring");
    let mut cmd = Command::new(alloc_leaks());
    cmd.args(["leak", "1000", "1000"]);
    let mut w = Workload::start(preloaded(cmd, "1", &ring));
    let pid = w.pid().to_string();

    let live = leaks(&["leaks", "--pid", &pid, "--sampled"]);
    assert!(live.contains("(running)"), "{live}");
    assert!(live.contains("every allocation recorded"), "{live}");
    let b = block_naming(&live, "leak_here");
    assert!(b.starts_with("heap: 1000, 976.6 KiB, oldest "), "{b}");
    assert!(b.contains("leak_path") && b.contains("main"), "{b}");
    assert!(
        !live.contains("churn"),
        "freed allocations are not leaks:\n{live}"
    );

    kill(&mut w);
    let dead = leaks(&["leaks", ring.to_str().unwrap()]);
    assert!(dead.contains("gone: what was live at its end"), "{dead}");
    assert_eq!(ageless(&block_naming(&dead, "leak_here")), ageless(&b));
    assert!(!dead.contains("churn"), "{dead}");
    let t = table(&ring);
    assert_eq!(t.mean, 1);
    assert_eq!(t.torn, 0);
    assert_eq!(t.dropped, 0);
    assert_eq!(
        t.live.iter().filter(|a| a.requested == 1000).count(),
        1000,
        "{:?}",
        t.live.len()
    );
}

/// Linked with librip's static library instead of preloaded: the same.
#[test]
fn linked_c_program_is_sampled_when_asked() {
    let dir = TempDir::new("/dev/shm", "alloc-linked");
    let ring = dir.join("l.ring");
    let mut cmd = Command::new(alloc_leaks_linked());
    cmd.args(["leak", "300", "777"]);
    let mut w = Workload::start(sampled(cmd, "1", &ring));
    let b = block_naming(
        &leaks(&["leaks", "--pid", &w.pid().to_string(), "--sampled"]),
        "leak_here",
    );
    assert!(b.starts_with("heap: 300, "), "{b}");
    kill(&mut w);
    let t = table(&ring);
    assert_eq!(t.live.iter().filter(|a| a.requested == 777).count(), 300);

    // Without RIP_ALLOC_SAMPLE, linking changes nothing: no ring is made.
    let quiet = dir.join("none.ring");
    let mut cmd = Command::new(alloc_leaks_linked());
    cmd.args(["leak", "10", "10"]).env("RIP_ALLOC_RING", &quiet);
    let mut w = Workload::start(cmd);
    kill(&mut w);
    assert!(!quiet.exists(), "a ring without RIP_ALLOC_SAMPLE");
}

/// At a sampling mean the leak is estimated, not counted: 20,000 leaks of
/// 1,000 bytes at a mean of 16 KiB give about 1,184 samples (standard
/// deviation 2.8 %); the estimate must be within 20 % (seven deviations).
#[test]
fn sampled_estimate_is_within_sampling_error() {
    let dir = TempDir::new("/dev/shm", "alloc-est");
    let ring = dir.join("e.ring");
    let mut cmd = Command::new(alloc_leaks());
    cmd.args(["leak", "20000", "1000"]);
    let mut w = Workload::start(preloaded(cmd, "16k", &ring));
    kill(&mut w);
    let t = table(&ring);
    assert_eq!(t.mean, 16 * 1024);
    let leaked: f64 = t
        .live
        .iter()
        .filter(|a| a.requested == 1000)
        .map(|a| librip::reader::alloc::estimated_bytes(a.requested, t.mean))
        .sum();
    let truth = 20_000_000.0;
    assert!(
        (leaked - truth).abs() < 0.2 * truth,
        "estimated {leaked} bytes for {truth}"
    );
    let out = leaks(&["leaks", ring.to_str().unwrap()]);
    let b = block_naming(&out, "leak_here");
    assert!(b.starts_with("heap: about "), "{b}");
    assert!(out.contains("sampled every 16.0 KiB on average"), "{out}");
}

/// Runs `cmd` to its end with its output collected, as `Command::output`,
/// but a run that outlasts `HANG` (a sampler that loops or deadlocks) is
/// killed and fails the test, saying `what`, instead of hanging it.
fn output(cmd: &mut Command, what: &str) -> std::process::Output {
    fn drain(r: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let t = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if t.elapsed() > HANG {
            let _ = child.kill();
            panic!("{what} still running after {HANG:?}: deadlocked or looping");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Longer than any healthy run of these programs takes on a loaded machine.
const HANG: Duration = Duration::from_secs(600);

/// The counts of `RIP_ALLOC_CHECK_UNWIND`'s line on `stderr`: stacks the
/// cached unwinder walked that libgcc walked too, and how many differed.
fn unwind_checks(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("sampled stacks walked both ways"))
        .unwrap_or_else(|| panic!("no check line in {stderr:?}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(nums.len(), 2, "{line}");
    (nums[0], nums[1])
}

/// Four threads through every member of the malloc family, every call
/// sampled, while the main thread forks twenty children (with fork
/// handlers that allocate and free): no deadlock, every child exits 0, and
/// the table's books balance exactly (recorded − freed = live entries,
/// none torn, none dropped): forked children never wrote to it. Each
/// sample's stack is walked by libgcc too (`RIP_ALLOC_CHECK_UNWIND`): the
/// cached unwinder's stacks are libgcc's, in code with and without frame
/// pointers.
#[test]
fn storm_with_fork_keeps_the_table_whole() {
    let dir = TempDir::new("/dev/shm", "alloc-storm");
    for (name, exe, preload) in [
        ("preloaded", alloc_leaks(), true),
        ("linked", alloc_leaks_linked(), false),
        (
            "frame pointers",
            build_c("alloc_leaks", &["-fno-omit-frame-pointer"]),
            true,
        ),
    ] {
        let ring = dir.join(&format!("{}.ring", name.replace(' ', "-")));
        let mut cmd = Command::new(exe);
        cmd.args(["storm", "4"])
            .env(librip::alloc::CHECK_UNWIND_ENV, "1");
        let mut cmd = if preload {
            preloaded(cmd, "1", &ring)
        } else {
            sampled(cmd, "1", &ring)
        };
        let out = output(&mut cmd, name);
        let (stdout, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stdout.contains("storm ok 20 forks"),
            "{name}: {stdout}{err}"
        );
        let t = table(&ring);
        assert_eq!((t.torn, t.dropped), (0, 0), "{name}");
        let (walked, differed) = unwind_checks(&err);
        assert_eq!(differed, 0, "{name}: {err}");
        assert_eq!(walked, t.sampled, "{name}: every stack walked by the cache");
        assert!(t.sampled > 800_000, "{name}: {} recorded", t.sampled);
        assert_eq!(
            t.sampled - t.freed,
            t.live.len() as u64,
            "{name}: recorded {} freed {} live {}",
            t.sampled,
            t.freed,
            t.live.len()
        );
        // What the program never frees: stdio's buffer and the like.
        assert!(t.live.len() < 20, "{name}: {:?}", t.live);
    }
}

/// Blocks that all share the sampler's buckets of the address's low bits,
/// freed in every order: each free of a sampled block removes its entry,
/// whichever of the bucket's blocks went before it, and the one block kept
/// is the only one of them left. The orders run twice: while the process
/// has one thread (the sampler's counts then change by plain stores), and
/// in a second thread that also frees blocks placed by the first while it
/// was alone.
#[test]
fn blocks_of_one_bucket_are_forgotten_in_any_order() {
    let dir = TempDir::new("/dev/shm", "alloc-buckets");
    // A mean of 2 bytes samples each of these blocks all but surely, by
    // the draw, with the bucket's word kept; every call (1) leaves the
    // word saturated and sends the frees to the third look.
    for (name, exe, preload, mean) in [
        ("preloaded", alloc_leaks(), true, "2"),
        ("linked", alloc_leaks_linked(), false, "2"),
        ("preloaded, every call", alloc_leaks(), true, "1"),
    ] {
        let ring = dir.join(&format!("{}.ring", name.replace([' ', ','], "-")));
        let mut cmd = Command::new(exe);
        cmd.arg("buckets");
        let mut cmd = if preload {
            preloaded(cmd, mean, &ring)
        } else {
            sampled(cmd, mean, &ring)
        };
        let out = output(&mut cmd, "alloc_leaks buckets");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("buckets ok"),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = table(&ring);
        assert_eq!((t.torn, t.dropped), (0, 0), "{name}");
        // Twice: 24 orders of four, 51 interleaved, 8 stacked, 4 held;
        // then 8 among the kept one, and the kept one.
        let made: u64 = 2 * (24 * 4 + 51 + 8 + 4) + 8 + 1;
        assert!(t.sampled >= made, "{name}: {} recorded", t.sampled);
        assert_eq!(t.sampled - t.freed, t.live.len() as u64, "{name}");
        let aligned: Vec<u64> = t
            .live
            .iter()
            .filter(|a| a.addr % 65536 == 0)
            .map(|a| a.requested)
            .collect();
        assert_eq!(aligned, [77], "{name}: the 64 KiB-aligned blocks left live");
    }
}

/// Long-lived samples that come one among many short-lived ones, as a
/// program's heap grows: the table keeps them all, and never says it is
/// full while most of it is free. (Zones that all began at the table's
/// start piled each one's long-lived samples into its first entries, and
/// samples that hashed among them were dropped.)
#[test]
fn long_lived_samples_among_short_ones_all_find_room() {
    let dir = TempDir::new("/dev/shm", "alloc-grow");
    let ring = dir.join("grow.ring");
    leak_every_call(&["leak", "2000", "1000"], &[], &ring);
    let t = table(&ring);
    assert_eq!((t.torn, t.dropped), (0, 0));
    assert_eq!(t.live.iter().filter(|a| a.requested == 1000).count(), 2000);
}

/// A table too small for what is live: the samples that find no free
/// entry are counted as dropped and said, never written over another; the
/// entries it holds are whole.
#[test]
fn a_full_table_drops_and_says_so() {
    let dir = TempDir::new("/dev/shm", "alloc-full");
    let ring = dir.join("full.ring");
    leak_every_call(
        &["leak", "100", "1000"],
        &[("RIP_ALLOC_TABLE", "64")],
        &ring,
    );
    let t = table(&ring);
    assert_eq!(t.torn, 0);
    assert!(t.live.len() <= 64, "{} live in 64 entries", t.live.len());
    let kept = t.live.iter().filter(|a| a.requested == 1000).count() as u64;
    assert!(
        t.dropped >= 100 - kept,
        "{} dropped, {kept} kept",
        t.dropped
    );
    assert_eq!(t.sampled - t.freed, t.live.len() as u64);
    assert_drops_said(&ring, t.dropped, "found the table full");
}

/// Asserts that `rip-probe leaks RING` says how many samples were dropped,
/// and `why`.
fn assert_drops_said(ring: &Path, dropped: u64, why: &str) {
    let report = leaks(&["leaks", ring.to_str().unwrap()]);
    assert!(
        report.contains(&format!("{dropped} sampled allocations {why}")),
        "{report}"
    );
}

/// The bytes a file holds (its allocated blocks), not its size.
fn held_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat the ring").blocks() * 512
}

/// The table's later zones take room in the file only once sampling
/// reaches them: a program with a few samples live leaves most of the
/// default 4 MiB table a hole (read as free entries), and one that keeps
/// 2,000 samples live has them all, the zones they needed reserved.
#[test]
fn the_table_takes_room_as_sampling_reaches_it() {
    let dir = TempDir::new("/dev/shm", "alloc-room");
    let few = dir.join("few.ring");
    let mut cmd = Command::new(alloc_leaks());
    cmd.args(["buckets"]).stdout(Stdio::null());
    let out = output(&mut preloaded(cmd, "512k", &few), "alloc_leaks buckets");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = table(&few);
    assert_eq!(t.capacity, 16384);
    assert!(!t.file_full);
    // The ring's header (64 KiB), the table's header and first 64
    // entries (20 KiB; 84 KiB measured), and no more of the table's 4 MiB:
    // a ring every sampled process leaves on tmpfs, which is memory.
    let held = held_bytes(&few);
    assert!(
        held < 128 << 10,
        "{held} bytes held with {} live",
        t.live.len()
    );

    let many = dir.join("many.ring");
    leak_every_call(&["leak", "2000", "1000"], &[], &many);
    let t = table(&many);
    let kept = t.live.iter().filter(|a| a.requested == 1000).count();
    assert_eq!((kept, t.dropped, t.torn), (2000, 0, 0));
    assert!(!t.file_full);
    // 2,000 live need the zones up to the one of 4,096 entries (sampling
    // moves on from a zone more than half full: 2,048 entries hold no more
    // than 1,024): 8,128 entries, about 2 MiB.
    let held = held_bytes(&many);
    assert!(
        held >= 8128 * 256,
        "{held} bytes held for 2,000 live samples"
    );
}

/// A ring on a file system with no room left for the table's later zones:
/// the program runs on (a store into a page the file system cannot hold
/// would raise SIGBUS; the sampler reserves a zone before it moves in),
/// sampling stays where it is and counts what it cannot place, and the
/// report says the file system is full, not the table.
#[test]
fn a_full_tmpfs_drops_samples_and_says_so() {
    if !rip_tests::privileged_tests_enabled(
        "a_full_tmpfs_drops_samples_and_says_so",
        "a full tmpfs",
    ) {
        return;
    }
    let dir = TempDir::new("/tmp", "alloc-fulltmpfs");
    let mnt = dir.path();
    let _tmpfs = rip_tests::Tmpfs::mount(mnt, "256k");
    let ring = mnt.join("full.ring");
    // 64 KiB of ring header and 20 KiB of the table's header and first
    // zone fit in 256 KiB, with the next two zones' 32 and 64 KiB; the
    // fourth's 128 KiB does not.
    leak_every_call(&["leak", "2000", "1000"], &[], &ring);
    let t = table(&ring);
    assert!(t.file_full, "the table says the file system was full");
    assert_eq!(t.torn, 0);
    assert!(
        t.live.len() <= 448,
        "{} live in the first zones",
        t.live.len()
    );
    assert!(t.dropped > 0);
    assert_eq!(t.sampled - t.freed, t.live.len() as u64);
    assert_drops_said(&ring, t.dropped, "found no room in the ring's file system");
}

/// Killed at random points of the storm, the writer leaves a table the
/// reader always reads: entries whole (inside the program's sizes, with a
/// stack), or counted torn.
#[test]
fn killed_storms_leave_readable_tables() {
    let dir = TempDir::new("/dev/shm", "alloc-kill");
    let mut rng = Rng::new(u64::from(std::process::id()));
    let exe = alloc_leaks();
    let mut read = 0;
    for i in 0..30 {
        let ring = dir.join(&format!("k{i}.ring"));
        let mut cmd = Command::new(&exe);
        cmd.args(["storm", "3"]).stdout(Stdio::null());
        let mut child = preloaded(cmd, "1", &ring).spawn().expect("spawn");
        std::thread::sleep(Duration::from_micros(rng.below(300_000)));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        let t = match RingFile::open(&ring) {
            Ok(r) => r.allocations().cloned().expect("a table"),
            // Killed before the constructor made the ring.
            Err(ReadError::NotFound(_)) => continue,
            Err(e) => panic!("kill {i}: {e}"),
        };
        for a in &t.live {
            assert!(a.addr != 0 && a.requested <= 20_000, "kill {i}: {a:?}");
            assert!(!a.frames.is_empty(), "kill {i}: {a:?}");
        }
        read += 1;
    }
    assert!(read > 0, "no kill left a ring");
}

/// Debian's python3, unmodified, preloaded: 4,000 bytearrays of 10,000
/// bytes kept, the process killed; the stack that made them is named and
/// estimated within 20 % (mean 32 KiB: about 1,050 samples, deviation 2.6 %).
#[test]
fn preloaded_python_leak_found_after_sigkill() {
    let dir = TempDir::new("/dev/shm", "alloc-py");
    let ring = dir.join("py.ring");
    let script = [
        "import os, signal",
        "keep = []",
        "for i in range(40000):",
        "    x = [0] * 50",
        "    if i % 10 == 0:",
        "        keep.append(bytearray(10000))",
        "os.kill(os.getpid(), signal.SIGKILL)",
    ]
    .join("\n");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", &script]);
    let status = preloaded(cmd, "32k", &ring)
        .status()
        .expect("run /usr/bin/python3 (cargo xtask setup installs it)");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "python3 killed itself: {status:?}"
    );
    let out = leaks(&["leaks", ring.to_str().unwrap(), "--json"]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["sampler"]["estimated"], true, "{}", r["sampler"]);
    let named: Vec<&serde_json::Value> = r["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["frames"].as_array().unwrap().iter().any(|f| {
                f["function"]
                    .as_str()
                    .is_some_and(|f| f.contains("PyByteArray"))
            })
        })
        .collect();
    assert_eq!(named.len(), 1, "one stack names PyByteArray: {out}");
    assert_eq!(named[0]["kind"], "heap");
    let mib = named[0]["bytes"].as_u64().unwrap() as f64 / (1024.0 * 1024.0);
    let truth = 4000.0 * 10000.0 / (1024.0 * 1024.0);
    assert!(
        (mib - truth).abs() < 0.2 * truth,
        "{mib:.1} MiB estimated: truth {truth:.1} MiB"
    );
}

/// Debian's python3 (its interpreter, libc, and extension modules it
/// loads at run time: sqlite3, decimal, json), every allocation sampled
/// and each stack walked by libgcc too: none differs.
#[test]
fn cached_unwinder_walks_python_as_libgcc_does() {
    let dir = TempDir::new("/dev/shm", "alloc-pycheck");
    let ring = dir.join("py.ring");
    let script = [
        "import decimal, json, sqlite3",
        "db = sqlite3.connect(':memory:')",
        "db.execute('create table t (k integer, v text)')",
        "for i in range(3000):",
        "    db.execute('insert into t values (?, ?)', (i, 'v' * (i % 200)))",
        "rows = db.execute('select k, v from t order by v desc').fetchall()",
        "s = json.dumps({str(k): v for k, v in rows})",
        "d = sum(decimal.Decimal(k) / 7 for k in range(2000))",
        "print(len(json.loads(s)), d > 0)",
    ]
    .join("\n");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", &script])
        .env(librip::alloc::CHECK_UNWIND_ENV, "1");
    let out = output(&mut preloaded(cmd, "1", &ring), "/usr/bin/python3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3000 True\n");
    let (walked, differed) = unwind_checks(&err);
    assert_eq!(differed, 0, "{err}");
    let t = table(&ring);
    assert!(walked > 5_000, "{walked} stacks walked");
    assert_eq!(
        walked,
        t.sampled + t.dropped,
        "every stack walked by the cache"
    );
}

/// Rust, through librip::alloc::Sampled as the global allocator, every
/// allocation recorded: the leaking function is named with its count.
#[test]
fn rust_global_allocator_leak_found_live() {
    let dir = TempDir::new("/dev/shm", "alloc-rs");
    let ring = dir.join("rs.ring");
    let mut cmd = Command::new(RUST_LEAKS);
    cmd.arg(&ring).args(["500", "1000"]);
    let mut w = Workload::start(cmd);
    let out = leaks(&["leaks", "--pid", &w.pid().to_string(), "--sampled"]);
    let b = block_naming(&out, "leak_here");
    assert!(b.starts_with("heap: 500, 488.3 KiB, oldest "), "{b}");
    assert!(b.contains("rip_alloc_leaks::main"), "{b}");
    kill(&mut w);
    let t = table(&ring);
    assert_eq!(t.live.iter().filter(|a| a.requested == 1000).count(), 500);
}

/// A mean that is not a byte count is one line on stderr; the program runs
/// unsampled, without a ring.
#[test]
fn bad_settings_are_said_once() {
    let dir = TempDir::new("/dev/shm", "alloc-bad");
    let ring = dir.join("bad.ring");
    let mut cmd = Command::new(alloc_leaks());
    cmd.args(["leak", "1", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = output(&mut preloaded(cmd, "lots", &ring), "alloc_leaks");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("RIP_ALLOC_SAMPLE=\"lots\" is not a byte count"),
        "{err}"
    );
    assert!(!ring.exists());
}
