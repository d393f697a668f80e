//! A Rust program sampled through librip's Rust API (`librip::alloc::Sampled`
//! as its global allocator, every allocation recorded): it frees many
//! allocations made by `churn` and leaks `N` boxes of `SIZE` bytes from
//! `leak_here`, prints `ready`, and waits for a line on stdin.
//!
//! Usage: rip-alloc-leaks RING N SIZE

use std::{hint::black_box, io::BufRead};

use librip::{Ring, RingOptions, alloc::Sampled};

#[global_allocator]
static ALLOC: Sampled<std::alloc::System> = Sampled::new(std::alloc::System);

#[inline(never)]
fn churn(i: usize) {
    let v = black_box(vec![i as u8; 16 + i % 3000]);
    drop(v);
}

#[inline(never)]
fn leak_here(size: usize) {
    let b = black_box(vec![1u8; size].into_boxed_slice());
    Box::leak(b);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, ring, n, size] = &args[..] else {
        eprintln!("usage: rip-alloc-leaks RING N SIZE");
        std::process::exit(2);
    };
    let (n, size): (usize, usize) = (n.parse().expect("N"), size.parse().expect("SIZE"));
    librip::alloc::sample_allocations(1);
    Ring::create(ring, RingOptions::default()).expect("create the ring");
    for i in 0..n * 50 {
        churn(i);
        if i % 50 == 0 {
            leak_here(size);
        }
    }
    println!("ready");
    let _ = std::io::stdin().lock().lines().next();
}
