//! The perf map parser (`/tmp/perf-PID.map`, written by the target's JIT)
//! against arbitrary bytes: no panic, one symbol per line that parses
//! alone, and a lookup lands on the latest symbol that holds the address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use librip::reader::{PerfMap, PerfMapSymbol};

fuzz_target!(|data: &[u8]| {
    let map = PerfMap::parse(data);
    let all: Vec<PerfMapSymbol<'_>> = map.symbols().collect();
    let alone: usize = data.split(|&b| b == b'\n').map(|l| PerfMap::parse(l).len()).sum();
    assert_eq!(all.len(), alone, "one symbol per line that parses");
    // Each symbol's edges and neighbours, and words of the input.
    let mut addrs: Vec<u64> = all
        .iter()
        .flat_map(|s| [s.start, s.start.wrapping_sub(1), s.start + (s.size - 1), s.start + s.size / 2])
        .take(256)
        .collect();
    addrs.extend(data.chunks(8).take(64).map(|w| {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        u64::from_le_bytes(b)
    }));
    for a in addrs {
        let want = all.iter().rev().find(|s| s.start <= a && a - s.start < s.size);
        assert_eq!(map.find(a).as_ref(), want, "{a:#x}");
    }
});
