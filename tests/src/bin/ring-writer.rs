//! A librip writer for the ring tests: `ring-writer MODE PATH [ARGS]`.
//!
//! Modes print what the test needs on stdout, one `key value...` line per
//! fact, and exit 0 unless librip misbehaved.
//!
//! - `basic PATH`: threads, an unregistered thread, coroutines; prints the
//!   source line of every snap site it used (`site LINE ADDR-HINT`).
//! - `default -`: a ring at the default path; prints it.
//! - `untraced PATH`: the C ABI with a ring that cannot be created.
//! - `named PATH NAME`: one thread registered under NAME snaps once.
//! - `fill PATH`: registers threads until tmpfs is full, then snaps in all.
//! - `overflow PATH SLOTS THREADS`: more threads than thread slots.
//! - `churn PATH`: threads and coroutines come and go until killed.
//! - `fork PATH CHILD_PATH`: forks while registered and inside a coroutine.
//! - `many PATH N`: N threads register and snap, waits on stdin, exits them.

use std::{
    io::{BufRead, Write},
    path::Path,
    sync::{Arc, Barrier, RwLock},
    thread,
};

use librip::{Ring, RingOptions, coroutine::Coroutine, snap};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> &str { args.get(i).map(String::as_str).unwrap_or_else(|| usage()) };
    let num = |i: usize| -> u32 { arg(i).parse().unwrap_or_else(|_| usage()) };
    let path = Path::new(arg(1));
    match arg(0) {
        "basic" => basic(path),
        "default" => default(),
        "untraced" => untraced(path),
        "named" => named(path, arg(2)),
        "fill" => fill(path),
        "overflow" => overflow(path, num(2), num(3)),
        "churn" => churn(path),
        "fork" => fork(path, Path::new(arg(2))),
        "many" => many(path, num(2)),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: ring-writer basic|untraced|fill|overflow|churn|fork|many PATH [ARGS]");
    std::process::exit(2)
}

fn create(path: &Path, thread_slots: u32, coroutine_slots: u32) -> &'static Ring {
    let opts = RingOptions {
        thread_slots,
        coroutine_slots,
        depth: 32,
    };
    Ring::create(path, opts).unwrap_or_else(|e| {
        eprintln!("ring-writer: {e}");
        std::process::exit(1)
    })
}

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn wait_stdin() {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

fn basic(path: &Path) {
    let ring = create(path, 16, 8);
    let again = Ring::create(path.with_extension("second"), RingOptions::default());
    say(format_args!("second-create {}", again.unwrap_err()));
    // Loaded after creation: registration adds it to the module table.
    // SAFETY: RTLD_NOLOAD only asks whether it is loaded already.
    let before = unsafe {
        libc::dlopen(
            c"libresolv.so.2".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        )
    };
    // SAFETY: loads a system library whose constructors are benign.
    let lib = unsafe { libc::dlopen(c"libresolv.so.2".as_ptr(), libc::RTLD_NOW) };
    say(format_args!(
        "dlopen {} {}",
        before.is_null(),
        !lib.is_null()
    ));
    ring.register_thread("main").unwrap();
    for _ in 0..5 {
        snap!();
    }
    say(format_args!("site main {}", line!() - 2));
    let workers: Vec<_> = (0..3u64)
        .map(|i| {
            thread::spawn(move || {
                librip::register_thread(&format!("w{i}")).unwrap();
                for _ in 0..10 + i {
                    snap!();
                }
                say(format_args!("site worker {}", line!() - 2));
                say(format_args!("tid w{i} {}", rip_tests::gettid()));
                if i == 0 {
                    librip::exit_thread();
                    // After exit the thread's snaps are dropped.
                    snap!();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    thread::spawn(|| {
        for _ in 0..50 {
            snap!();
        }
    })
    .join()
    .unwrap();

    let co = Coroutine::new("co-a").unwrap();
    {
        let _p = co.poll();
        for _ in 0..7 {
            snap!();
        }
        say(format_args!("site coroutine {}", line!() - 2));
    }
    let gone = Coroutine::with_id(99, "co-gone").unwrap();
    {
        let _e = gone.enter();
        snap!();
    }
    drop(gone);
    snap!();
    say(format_args!("site main-after {}", line!() - 1));
    ring.publish_dropped();
    say(format_args!("coroutine {} {}", co.id(), co.index()));
    say(format_args!("dropped {}", ring.dropped_snaps()));
    say(format_args!("tmpfs {}", ring.on_tmpfs()));
    // A task still pending when the process ends: its slot stays live.
    std::mem::forget(co);
    say(format_args!("done"));
}

fn default() {
    let ring = Ring::create_default(RingOptions {
        thread_slots: 4,
        coroutine_slots: 0,
        depth: 32,
    })
    .unwrap_or_else(|e| {
        eprintln!("ring-writer: {e}");
        std::process::exit(1)
    });
    ring.register_thread("main").unwrap();
    snap!();
    say(format_args!("path {}", ring.path().display()));
}

unsafe extern "C" {
    fn rip_create_ring(file: *const std::ffi::c_char, max_procs: u32) -> bool;
    fn rip_init(id: u32, name: *const std::ffi::c_char, namelen: usize, idx: u8, ctr: u8);
    fn rip_snap();
    fn rip_exit();
}

fn c_init(name: &str) {
    // SAFETY: a valid name buffer of the given length.
    unsafe { rip_init(0, name.as_ptr().cast(), name.len(), 0, 0) };
}

/// `named PATH NAME`: one thread registered as NAME (any bytes, escapes
/// included) snaps and exits.
fn named(path: &Path, name: &str) {
    Ring::create(path, RingOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    librip::register_thread(name).unwrap_or_else(|e| panic!("{e}"));
    snap!();
    say(format_args!("done"));
}

fn untraced(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let ok = unsafe { rip_create_ring(c.as_ptr(), 0) };
    say(format_args!("created {ok}"));
    c_init("main");
    let t = thread::spawn(|| {
        c_init("worker");
        for _ in 0..1000 {
            // SAFETY: always callable.
            unsafe { rip_snap() };
        }
        // SAFETY: always callable.
        unsafe { rip_exit() };
    });
    for _ in 0..1000 {
        // SAFETY: always callable.
        unsafe { rip_snap() };
        snap!();
    }
    t.join().unwrap();
    say(format_args!("still running"));
}

fn fill(path: &Path) {
    let ring = create(path, 100_000, 0);
    // Threads hold a read lock until every registration was tried.
    let go = Arc::new(RwLock::new(()));
    let hold = go.write().unwrap();
    let mut threads = Vec::new();
    let mut registered = 0u32;
    let error = loop {
        let (tx, rx) = std::sync::mpsc::channel();
        let go = go.clone();
        threads.push(
            thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    tx.send(librip::register_thread("filler").map_err(|e| e.to_string()))
                        .unwrap();
                    let _go = go.read().unwrap();
                    for _ in 0..1000 {
                        snap!();
                    }
                })
                .unwrap(),
        );
        match rx.recv().unwrap() {
            Ok(_) => registered += 1,
            Err(e) => break e,
        }
    };
    drop(hold);
    for t in threads {
        t.join().unwrap();
    }
    ring.publish_dropped();
    say(format_args!("registered {registered}"));
    say(format_args!("error {error}"));
    say(format_args!("done"));
}

fn overflow(path: &Path, slots: u32, threads: u32) {
    let ring = create(path, slots, 0);
    // All alive at once, so that no slot is freed for another to reuse.
    let all = Arc::new(Barrier::new(threads as usize));
    let results: Vec<bool> = (0..threads)
        .map(|_| {
            let all = all.clone();
            thread::spawn(move || {
                let ok = librip::register_thread("over").is_ok();
                all.wait();
                for _ in 0..100 {
                    snap!();
                }
                ok
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    ring.publish_dropped();
    let ok = results.iter().filter(|&&r| r).count();
    say(format_args!(
        "registered {ok} failed {}",
        results.len() - ok
    ));
    say(format_args!("dropped {}", ring.dropped_snaps()));
}

/// Threads and coroutines that come and go as fast as they can.
fn churn(path: &Path) {
    create(path, 8, 16);
    say(format_args!("created"));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            thread::spawn(move || {
                for round in 0u64.. {
                    let t = thread::spawn(move || {
                        let _ = librip::register_thread(&format!("churn-{w}-{round}"));
                        for _ in 0..(round % 50) {
                            snap!();
                        }
                        if let Ok(co) = Coroutine::new("task") {
                            let _p = co.poll();
                            for _ in 0..(round % 70) {
                                snap!();
                            }
                        }
                        if round % 2 == 0 {
                            librip::exit_thread();
                        }
                    });
                    t.join().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}

/// Fork while registered and inside a coroutine: nothing the child does
/// may reach the parent's slots.
fn fork(path: &Path, child_path: &Path) {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct RawCursor {
        seq: *mut u64,
        epoch: u64,
    }
    unsafe extern "C" {
        fn rip_cursor_save() -> RawCursor;
        fn rip_cursor_restore(c: RawCursor);
    }
    let ring = create(path, 4, 4);
    ring.register_thread("parent").unwrap();
    for _ in 0..10 {
        snap!();
    }
    let co = Coroutine::new("parent-co").unwrap();
    let _inside = co.enter();
    for _ in 0..20 {
        snap!();
    }
    // SAFETY: reads this thread's cursor.
    let saved = unsafe { rip_cursor_save() };
    // SAFETY: the process is single-threaded here.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // The child: the cursor was moved to the sink.
        for _ in 0..1000 {
            snap!();
        }
        // A saved cursor is stale in the child...
        // SAFETY: restoring a cursor this process saved.
        unsafe { rip_cursor_restore(saved) };
        for _ in 0..1000 {
            snap!();
        }
        {
            let _again = co.enter();
            for _ in 0..1000 {
                snap!();
            }
        }
        let regs = ring.register_thread("child").is_err();
        // The child may make its own ring.
        let child = create(child_path, 4, 4);
        child.register_thread("child").unwrap();
        for _ in 0..3 {
            snap!();
        }
        // A cursor forged to look current points into the parent's old
        // range, which is private anonymous memory now.
        // SAFETY: reads this thread's cursor.
        let now = unsafe { rip_cursor_save() };
        let forged = RawCursor {
            epoch: now.epoch,
            ..saved
        };
        // SAFETY: as above.
        unsafe { rip_cursor_restore(forged) };
        for _ in 0..1000 {
            snap!();
        }
        say(format_args!(
            "child registered-in-parent-ring-refused {regs}"
        ));
        // SAFETY: ends the child without running the parent's atexit work twice.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    for _ in 0..5 {
        snap!();
    }
    say(format_args!("child-status {status}"));
}

/// `n` threads register and snap 100 times each, concurrently; they stay
/// alive until a line (or EOF) arrives on stdin.
fn many(path: &Path, n: u32) {
    let _ring = create(path, n, 0);
    let start = Arc::new(Barrier::new(n as usize + 1));
    let end = Arc::new(Barrier::new(n as usize + 1));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (start, end) = (start.clone(), end.clone());
            thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    librip::register_thread(&format!("t{i}")).unwrap();
                    start.wait();
                    for _ in 0..100 {
                        snap!();
                    }
                    end.wait();
                    // Hold until the main thread lets go.
                    end.wait();
                })
                .unwrap()
        })
        .collect();
    start.wait();
    end.wait();
    say(format_args!("ready"));
    wait_stdin();
    end.wait();
    for t in threads {
        t.join().unwrap();
    }
    say(format_args!("done"));
}
