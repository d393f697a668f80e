//! `librip::tokio`: a traced future snaps into its own slot while it is
//! polled and nowhere else, keeps its task statistics, gives its slot back
//! when it completes or is dropped, and leaves the thread's cursor as it
//! found it even when its poll panics or polls another traced future.
//!
//! The tests share one ring (one per process) and find their slots by name.

use std::{
    future::Future,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    pin::pin,
    sync::{OnceLock, mpsc},
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use librip::{
    Ring, RingOptions,
    coroutine::Cursor,
    reader::{Slot, SlotKind, SlotState},
    tokio::{TracedExt, spawn_traced},
};
use rip_tests::{TempDir, gettid, monotonic_ns, read_ring, sites};

static RING: OnceLock<(TempDir, PathBuf)> = OnceLock::new();

/// The shared ring's path.
fn ring() -> &'static Path {
    &RING
        .get_or_init(|| {
            let dir = TempDir::new("/dev/shm", "traced");
            let path = dir.join("traced.ring");
            let opts = RingOptions {
                thread_slots: 64,
                coroutine_slots: 256,
                depth: 16,
            };
            Ring::create(&path, opts).unwrap();
            // Statics are never dropped: remove the directory at exit.
            // SAFETY: registers a handler valid for the life of the process.
            unsafe { libc::atexit(remove_ring) };
            (dir, path)
        })
        .1
}

extern "C" fn remove_ring() {
    if let Some((dir, _)) = RING.get() {
        let _ = std::fs::remove_dir_all(dir.path());
    }
}

/// The slot named `name` (unique per test) of kind `kind`.
fn slot(kind: SlotKind, name: &str) -> Slot {
    read_ring(ring())
        .slots()
        .find(|s| s.kind == kind && s.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} slot {name}"))
}

fn task(name: &str) -> Slot {
    slot(SlotKind::Coroutine, name)
}

fn addrs(s: &Slot) -> Vec<u64> {
    s.entries.iter().map(|e| e.addr).collect()
}

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn polls_switch_the_snap_target_and_keep_the_statistics() {
    ring();
    librip::register_thread("polls-thread").unwrap();
    let tid = gettid();
    let mut polls_seen = 0;
    let t0 = monotonic_ns();
    let mut fut = pin!(
        std::future::poll_fn(move |_| {
            polls_seen += 1;
            sites::a();
            // Seen from outside while the poll runs: polled by this thread.
            let me = task("polls-task").task.unwrap();
            assert_eq!((me.polls, me.polling_tid), (polls_seen, tid));
            if polls_seen == 3 {
                Poll::Ready(polls_seen)
            } else {
                Poll::Pending
            }
        })
        .traced("polls-task")
    );
    let created = task("polls-task");
    let stats = created.task.unwrap();
    assert_eq!(
        (created.state, stats.polls, stats.polling_tid),
        (SlotState::Live, 0, 0)
    );
    assert!(stats.created_ns >= t0, "created with the future");

    for _ in 0..2 {
        sites::b();
        assert!(poll_once(fut.as_mut()).is_pending());
        sites::b();
        let s = task("polls-task");
        let st = s.task.unwrap();
        assert_eq!(st.polling_tid, 0, "idle between polls");
        assert!(st.last_poll_start_ns <= st.last_poll_end_ns);
        // The coarse clock is never ahead, and at most a tick behind.
        assert!(st.last_poll_end_ns <= monotonic_ns());
        assert!(st.last_poll_start_ns + 20_000_000 >= t0);
    }
    assert_eq!(poll_once(fut.as_mut()), Poll::Ready(3));
    assert!(
        fut.coroutine().is_none(),
        "completed: the slot is given back"
    );

    let done = task("polls-task");
    assert_eq!((done.state, done.snaps), (SlotState::Exited, 3));
    assert_eq!(done.task.unwrap().polls, 3);
    let thread = slot(SlotKind::Thread, "polls-thread");
    assert_eq!(thread.snaps, 4, "the thread's own snaps only");
    let (a, b) = (addrs(&done)[0], addrs(&thread)[0]);
    assert_ne!(a, b);
    assert_eq!(addrs(&done), [a; 3]);
    assert_eq!(addrs(&thread), [b; 4]);
}

#[test]
fn a_panicking_poll_restores_the_cursor_and_ends_the_poll() {
    ring();
    librip::register_thread("panic-thread").unwrap();
    let before = Cursor::current();
    let mut fut = Box::pin(
        async {
            sites::a();
            panic!("the task's poll panics");
        }
        .traced("panicky"),
    );
    let r = catch_unwind(AssertUnwindSafe(|| poll_once(fut.as_mut())));
    assert!(r.is_err());
    assert_eq!(Cursor::current(), before, "the thread's cursor is back");
    sites::b();
    let s = task("panicky");
    let st = s.task.unwrap();
    assert_eq!(
        (s.state, s.snaps, st.polls, st.polling_tid),
        (SlotState::Live, 1, 1, 0)
    );
    assert!(st.last_poll_end_ns >= st.last_poll_start_ns && st.last_poll_end_ns > 0);
    assert_eq!(slot(SlotKind::Thread, "panic-thread").snaps, 1);
    drop(fut);
    assert_eq!(task("panicky").state, SlotState::Exited);
}

#[test]
fn dropping_an_unfinished_future_frees_its_slot() {
    ring();
    let mut fut = Box::pin(std::future::pending::<()>().traced("dropped"));
    assert!(poll_once(fut.as_mut()).is_pending());
    assert_eq!(task("dropped").state, SlotState::Live);
    drop(fut);
    let s = task("dropped");
    assert_eq!((s.state, s.task.unwrap().polls), (SlotState::Exited, 1));
}

#[test]
fn a_task_polled_inside_another_leaves_it_its_snaps() {
    ring();
    let mut inner = Box::pin(
        std::future::poll_fn(|_| {
            sites::b();
            Poll::<()>::Pending
        })
        .traced("inner"),
    );
    let mut outer = Box::pin(
        std::future::poll_fn(move |cx| {
            sites::a();
            let _ = inner.as_mut().poll(cx);
            sites::c();
            Poll::<()>::Pending
        })
        .traced("outer"),
    );
    assert!(poll_once(outer.as_mut()).is_pending());
    let (outer_slot, inner_slot) = (task("outer"), task("inner"));
    assert_eq!(outer_slot.snaps, 2);
    assert_eq!(inner_slot.snaps, 1);
    let b = addrs(&inner_slot)[0];
    assert!(!addrs(&outer_slot).contains(&b), "{outer_slot:?}");
    assert_eq!(inner_slot.task.unwrap().polls, 1);
}

/// On a multi-thread runtime: each task snaps into its own slot on
/// whichever worker polls it, is seen idle while it awaits, and its slot
/// is exited once it completes. The workers' own slots get none of it.
#[test]
fn spawned_tasks_snap_into_their_slots_on_worker_threads() {
    ring();
    const TASKS: usize = 8;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            librip::register_thread("traced-worker").unwrap();
        })
        .build()
        .unwrap();
    let (parked_tx, parked_rx) = mpsc::channel();
    let mut go = Vec::new();
    let mut handles = Vec::new();
    for i in 0..TASKS {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        go.push(tx);
        let parked = parked_tx.clone();
        handles.push(rt.spawn(async move {
            // spawn_traced needs the runtime's context: inside a task it has.
            spawn_traced(&format!("spawned-{i}"), async move {
                sites::a();
                parked.send(()).unwrap();
                rx.await.unwrap();
                sites::b();
                gettid()
            })
            .await
            .unwrap()
        }));
    }
    for _ in 0..TASKS {
        parked_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    // Parked: every task idle, polled once, its snap in its slot.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ring = read_ring(ring());
        let idle = ring
            .slots()
            .filter(|s| s.name.starts_with("spawned-") && s.state == SlotState::Live)
            .filter(|s| s.task.is_some_and(|t| t.polling_tid == 0 && t.polls == 1))
            .count();
        if idle == TASKS {
            break;
        }
        assert!(Instant::now() < deadline, "{idle} of {TASKS} tasks idle");
        std::thread::sleep(Duration::from_millis(5));
    }
    for tx in go {
        tx.send(()).unwrap();
    }
    let tids: Vec<u32> = rt.block_on(async {
        let mut v = Vec::new();
        for h in handles {
            v.push(h.await.unwrap());
        }
        v
    });
    drop(rt);
    let ring = read_ring(ring());
    let workers: Vec<Slot> = ring.slots().filter(|s| s.name == "traced-worker").collect();
    assert_eq!(workers.len(), 2);
    for (i, tid) in tids.iter().enumerate() {
        let s = ring
            .slots()
            .find(|s| s.name == format!("spawned-{i}"))
            .unwrap();
        assert_eq!((s.state, s.snaps), (SlotState::Exited, 2), "{s:?}");
        assert_eq!(s.task.unwrap().polls, 2);
        assert!(
            workers.iter().any(|w| w.id == u64::from(*tid)),
            "polled by a worker"
        );
        for w in &workers {
            for a in addrs(&s) {
                assert!(!addrs(w).contains(&a), "a task's snap in worker {}", w.id);
            }
        }
    }
}
