//! A small thread-pool "server" that gets stuck in every way rip-probe
//! reports: two threads deadlock on a pair of mutexes (pthread mutexes, as
//! C, C++ and most native code use, which record their owner) and the pool
//! workers pile up behind them, one thread waits on a pipe nobody writes, one
//! sleeps, one blocks in accept, and a few spin. Every thread registers
//! with librip and snaps just before it blocks.
//!
//! It prints `role <name> <tid>` per thread, then `ready`, and runs until
//! killed (or until stdin closes, with `--exit-on-eof`).
//!
//! The lines marked `// SNAP: <label>` are where each role last snaps; the
//! end-to-end tests read this file to know which line to expect.

use std::{
    cell::UnsafeCell,
    hint::black_box,
    io::{BufRead, Write},
    net::TcpListener,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{Arc, Barrier, mpsc},
    thread,
    time::Duration,
};

/// A pthread mutex in a static: what a C or C++ server, or a Rust one
/// through its C libraries, waits on. Only ever locked (the demo's
/// threads never give up what they hold).
struct PthreadMutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads; it is only
// used through pthread_mutex_lock.
unsafe impl Sync for PthreadMutex {}

impl PthreadMutex {
    const fn new() -> Self {
        PthreadMutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    fn lock(&self) {
        // SAFETY: a statically initialized mutex that is never moved.
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
    }
}

/// The jobs queue's lock (the pool takes from it), and the ledger's: the
/// two the lockers take in opposite orders.
static JOBS_LOCK: PthreadMutex = PthreadMutex::new();
static LEDGER_LOCK: PthreadMutex = PthreadMutex::new();

/// The jobs queue the pool takes from, locked for good by the deadlock.
struct Pool {
    jobs: &'static PthreadMutex,
}

impl Pool {
    /// A worker takes the next job: it blocks here once `jobs` is held.
    #[inline(never)]
    fn take(&self) -> Option<u32> {
        librip::snap!(); // SNAP: Pool::take
        self.jobs.lock();
        None
    }
}

/// Locks `first` then `second`; run with the order swapped on another
/// thread, the two never get both.
#[inline(never)]
fn transfer(first: &PthreadMutex, second: &PthreadMutex, gate: &Barrier) {
    first.lock();
    gate.wait();
    librip::snap!(); // SNAP: transfer
    second.lock();
}

/// Waits for a message on a pipe that is never written.
#[inline(never)]
fn wait_for_message(fd: &OwnedFd) {
    let mut buf = [0u8; 64];
    librip::snap!(); // SNAP: wait_for_message
    // SAFETY: valid fd and buffer.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}

/// Sleeps for an hour.
#[inline(never)]
fn nap() {
    librip::snap!(); // SNAP: nap
    thread::sleep(Duration::from_secs(3600));
}

/// Waits for a connection that never comes.
#[inline(never)]
fn serve(listener: &TcpListener) {
    librip::snap!(); // SNAP: serve
    let _ = listener.accept();
}

/// Burns CPU, snapping as it goes.
#[inline(never)]
fn spin() -> ! {
    let mut x = 0u64;
    loop {
        librip::snap!(); // SNAP: spin
        for i in 0..1000 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

struct Opts {
    workers: usize,
    spinners: usize,
    ring: Option<String>,
    exit_on_eof: bool,
    no_ring: bool,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        workers: 4,
        spinners: 2,
        ring: None,
        exit_on_eof: false,
        no_ring: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} needs a number"))
        };
        match a.as_str() {
            "--workers" => o.workers = num("--workers"),
            "--spinners" => o.spinners = num("--spinners"),
            "--ring" => o.ring = args.next(),
            "--no-ring" => o.no_ring = true,
            "--exit-on-eof" => o.exit_on_eof = true,
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn main() {
    let opts = parse_args();
    if !opts.no_ring {
        let ropts = librip::RingOptions {
            thread_slots: (opts.workers + opts.spinners + 16) as u32,
            ..librip::RingOptions::default()
        };
        let created = match &opts.ring {
            Some(p) => librip::Ring::create(p, ropts),
            None => librip::Ring::create_default(ropts),
        };
        if let Err(e) = created {
            eprintln!("rip-demo-server: running untraced: {e}");
        }
    }
    let _ = librip::register_thread("main");

    let (tx, rx) = mpsc::channel::<(String, u32)>();
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        let tx = tx.clone();
        thread::Builder::new()
            .name(name.clone())
            // Small stacks: the scale benchmarks run tens of thousands.
            .stack_size(128 * 1024)
            .spawn(move || {
                let _ = librip::register_thread(&name);
                tx.send((name, gettid())).expect("main is listening");
                drop(tx);
                f();
            })
            .expect("spawn");
    };

    // The deadlock, and the pool piling up behind it.
    let gate = Arc::new(Barrier::new(2));
    for (name, x, y) in [
        ("locker-a", &JOBS_LOCK, &LEDGER_LOCK),
        ("locker-b", &LEDGER_LOCK, &JOBS_LOCK),
    ] {
        let gate = gate.clone();
        spawn(name.into(), Box::new(move || transfer(x, y, &gate)));
    }
    let mut fds = [0; 2];
    // SAFETY: valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    spawn(
        "pipe-reader".into(),
        Box::new(move || wait_for_message(&rd)),
    );
    spawn("sleeper".into(), Box::new(nap));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    spawn("acceptor".into(), Box::new(move || serve(&listener)));
    for i in 0..opts.spinners {
        spawn(format!("spinner-{i}"), Box::new(|| spin()));
    }
    // Workers start once the lockers hold their first lock.
    thread::sleep(Duration::from_millis(50));
    for i in 0..opts.workers {
        let pool = Pool { jobs: &JOBS_LOCK };
        spawn(
            format!("pool-{i}"),
            Box::new(move || {
                let _ = pool.take();
            }),
        );
    }
    drop(tx);

    // Threads keep their sender for life, so count the roles instead of
    // waiting for the channel to close.
    let roles = 5 + opts.spinners + opts.workers;
    let mut out = std::io::stdout().lock();
    writeln!(out, "role main {}", gettid()).ok();
    for (name, tid) in rx.iter().take(roles) {
        writeln!(out, "role {name} {tid}").ok();
    }
    // Give the last threads time to reach their blocking call.
    thread::sleep(Duration::from_millis(100));
    writeln!(out, "ready").ok();
    out.flush().ok();
    drop(out);

    if opts.exit_on_eof {
        for _ in std::io::stdin().lock().lines() {}
        drop(wr);
        std::process::exit(0);
    }
    let _keep = wr;
    loop {
        thread::park();
    }
}
