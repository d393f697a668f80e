//! Coroutine slots: a pool of their own, apart from thread slots (a
//! coroutine id equal to a thread id collides with nothing); a slot is
//! reused as soon as its coroutine exits, with the next generation and
//! nothing of its previous owner; and a reader never mixes two owners of a
//! slot, even while it changes owners under it.
//!
//! One ring per process: the whole story is one test.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use librip::{
    Error, Ring, RingOptions,
    coroutine::Coroutine,
    reader::{Slot, SlotKind, SlotState},
};
use rip_tests::{TempDir, gettid, read_ring, sites};

const SLOTS: u32 = 4;

/// Where `sites::a` and `sites::b` snap, learnt from a slot that snapped at
/// both (one snap each, in that order).
struct Sites {
    a: u64,
    b: u64,
}

fn slot(ring: &librip::reader::RingFile, kind: SlotKind, index: u32) -> Slot {
    ring.slots()
        .find(|s| s.kind == kind && s.index == index)
        .unwrap_or_else(|| panic!("no {kind:?} slot {index}"))
}

fn addrs(s: &Slot) -> Vec<u64> {
    s.entries.iter().map(|e| e.addr).collect()
}

#[test]
fn coroutine_slots_are_pooled_apart_reused_and_never_confused() {
    let dir = TempDir::new("/dev/shm", "coroutine-slots");
    let path = dir.join("co.ring");
    let opts = RingOptions {
        thread_slots: 8,
        coroutine_slots: SLOTS,
        depth: 8,
    };
    Ring::create(&path, opts).unwrap();
    librip::register_thread("main").unwrap();
    let tid = u64::from(gettid());

    // Apart from threads: a coroutine whose id is this thread's tid.
    let twin = Coroutine::with_id(tid, "twin").unwrap();
    assert!(matches!(
        Coroutine::with_id(tid, "again"),
        Err(Error::IdInUse(id)) if id == tid
    ));
    sites::a();
    {
        let _in = twin.enter();
        sites::a();
        sites::b();
    }
    sites::b();
    let ring = read_ring(&path);
    let thread = ring
        .slots()
        .find(|s| s.kind == SlotKind::Thread && s.id == tid)
        .unwrap();
    let co = slot(&ring, SlotKind::Coroutine, twin.index());
    assert_eq!((co.id, co.name.as_str(), co.generation), (tid, "twin", 1));
    assert_eq!((thread.snaps, co.snaps), (2, 2), "each its own snaps");
    let sites = Sites {
        a: co.entries[0].addr,
        b: co.entries[1].addr,
    };
    assert_ne!(sites.a, sites.b);
    assert_eq!(addrs(&thread), [sites.a, sites.b]);

    // Fill the pool: one more is refused.
    let mut held: Vec<Coroutine> = (1..SLOTS)
        .map(|i| Coroutine::new(&format!("held-{i}")).unwrap())
        .collect();
    assert!(matches!(
        Coroutine::new("one-too-many"),
        Err(Error::SlotsFull { .. })
    ));

    // An exited coroutine keeps its entries until its slot is taken again.
    let old = held.remove(0);
    let (index, old_id) = (old.index(), old.id());
    {
        let _in = old.enter();
        for _ in 0..20 {
            sites::a();
        }
    }
    drop(old);
    let exited = slot(&read_ring(&path), SlotKind::Coroutine, index);
    assert_eq!((exited.state, exited.generation), (SlotState::Exited, 1));
    assert_eq!((exited.snaps, addrs(&exited)), (20, vec![sites.a; 8]));

    // Reused at once, as the next generation, with nothing of the old owner.
    let new = Coroutine::new("new-owner").unwrap();
    assert_eq!((new.index(), new.generation()), (index, 2));
    assert_ne!(new.id(), old_id);
    {
        let _in = new.enter();
        for _ in 0..3 {
            sites::b();
        }
    }
    let reused = slot(&read_ring(&path), SlotKind::Coroutine, index);
    assert_eq!(
        (
            reused.state,
            reused.generation,
            reused.id,
            reused.name.as_str()
        ),
        (SlotState::Live, 2, new.id(), "new-owner")
    );
    assert_eq!(
        reused.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(addrs(&reused), [sites.b; 3]);
    assert_eq!(reused.task.unwrap().polls, 0, "stats start over");

    // Churn: another thread gives one slot a new owner as fast as it can;
    // owners of odd generations snap at site A, of even ones at site B, a
    // number of times that depends on the generation, and are named after
    // it. Every read must show one owner whole.
    drop(new);
    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicU64::new(0));
    let churner = {
        let stop = stop.clone();
        let churned = churned.clone();
        std::thread::spawn(move || {
            librip::register_thread("churner").unwrap();
            let mut generation = 2;
            let mut owners = 0u64;
            while !stop.load(Ordering::Relaxed) {
                generation += 1;
                let co = Coroutine::new(&format!("gen-{generation}")).unwrap();
                assert_eq!((co.index(), co.generation()), (index, generation));
                let _in = co.enter();
                for _ in 0..snaps_of(generation) {
                    if generation % 2 == 1 {
                        sites::a();
                    } else {
                        sites::b();
                    }
                }
                owners += 1;
                churned.store(owners, Ordering::Relaxed);
            }
            owners
        })
    };
    // Reads go on until the slot had a thousand owners meanwhile and ten
    // reads showed one, however long a busy machine makes that take.
    let t = Instant::now();
    let (mut reads, mut seen) = (0, 0);
    while churned.load(Ordering::Relaxed) <= 1000 || seen <= 10 {
        // A hang guard, not a speed bound.
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "{} owners, {seen} seen in {reads} reads",
            churned.load(Ordering::Relaxed)
        );
        let ring = read_ring(&path);
        reads += 1;
        // Before the churner's first owner, it is still "new-owner".
        let Some(s) = ring
            .slots()
            .find(|s| s.kind == SlotKind::Coroutine && s.index == index && s.generation > 2)
        else {
            continue;
        };
        seen += 1;
        assert_eq!(s.name, format!("gen-{}", s.generation), "{s:?}");
        let site = if s.generation % 2 == 1 {
            sites.a
        } else {
            sites.b
        };
        assert!(addrs(&s).iter().all(|&a| a == site), "{s:?}");
        // The owner may be snapping during the copy: entries it overwrote
        // meanwhile drop out (their tags tell), but none is another's.
        let n = snaps_of(s.generation);
        assert!(s.snaps <= n, "{s:?}");
        assert!(s.entries.iter().all(|e| e.seq < n), "{s:?}");
        assert!(s.entries.windows(2).all(|w| w[0].seq < w[1].seq), "{s:?}");
    }
    stop.store(true, Ordering::Relaxed);
    let owners = churner.join().unwrap();
    eprintln!("{reads} reads of a slot that had {owners} owners meanwhile ({seen} showed one)");
    assert!(owners > 1000 && seen > 10, "{owners} owners, {seen} seen");
    drop(held);
    drop(twin);
}

/// Snaps made by the owner of `generation` in the churn.
fn snaps_of(generation: u32) -> u64 {
    u64::from(generation % 13) + 1
}
