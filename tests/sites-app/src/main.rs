//! `sites-app RING`: threads and tokio tasks that snap at known sites (the
//! lines marked `// SITE: <name>`), two threads and two tasks in closures
//! whose demangled names are identical. Prints `role <name> <tid>` lines,
//! `ready`, and waits to be killed.

use std::{
    io::Write,
    sync::{Arc, Barrier},
    thread,
};

use librip::{Ring, RingOptions, snap, tokio::spawn_traced};

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { librip_gettid() }
}

unsafe extern "C" {
    #[link_name = "gettid"]
    fn librip_gettid() -> u32;
}

#[inline(never)]
fn park_forever() -> ! {
    loop {
        thread::park();
    }
}

fn main() {
    let ring = std::env::args().nth(1).expect("usage: sites-app RING");
    let opts = RingOptions {
        thread_slots: 64,
        coroutine_slots: 64,
        depth: 32,
    };
    if let Err(e) = Ring::create(&ring, opts) {
        eprintln!("sites-app: {e}");
        std::process::exit(1);
    }
    librip::register_thread("main").expect("slot");
    let ready = Arc::new(Barrier::new(3));
    // Two threads whose code are closures of `main`: the same demangled
    // name, `sites_app::main::{{closure}}`, for both.
    let r = ready.clone();
    let alpha = thread::spawn(move || {
        librip::register_thread("alpha").expect("slot");
        println!("role alpha {}", gettid());
        snap!("waiting for the order book"); // SITE: alpha
        r.wait();
        park_forever()
    });
    let r = ready.clone();
    let beta = thread::spawn(move || {
        librip::register_thread("beta").expect("slot");
        println!("role beta {}", gettid());
        snap!(); // SITE: beta
        r.wait();
        park_forever()
    });
    ready.wait();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .on_thread_start(|| {
            librip::register_thread("tokio-worker").expect("slot");
        })
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(1);
        let lock = Arc::new(tokio::sync::Mutex::new(0u32));
        let guard = lock.clone().lock_owned().await;
        // Two tasks, async blocks of the same function: identical names
        // (`sites_app::main::{{closure}}::{{closure}}`), different sites.
        let on_channel = spawn_traced("on-channel", async move {
            snap!("waiting on the channel"); // SITE: channel
            rx.recv().await
        });
        let l = lock.clone();
        let on_mutex = spawn_traced("on-mutex", async move {
            snap!("waiting on the mutex"); // SITE: mutex
            *l.lock().await += 1;
        });
        // Let both tasks reach their await.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        println!("ready");
        std::io::stdout().flush().expect("flush");
        // Held, not dropped: the tasks stay blocked.
        let _held = (tx, guard, on_channel, on_mutex);
        std::future::pending::<()>().await;
    });
    let _ = (alpha, beta);
}
