//! The /proc/PID/maps parser and the symbolizer's module lookup against
//! arbitrary text and ranges: no panic, and a lookup always lands in a
//! range that holds the address, the latest such entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use librip::reader::{RangeIndex, parse_maps};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = parse_maps(&text);
    for m in &lines {
        let _ = (m.file(), m.is_exec(), m.map_files(1));
    }
    // The same bytes as a module table: (start, end) pairs.
    let ranges: Vec<(u64, u64)> = data
        .chunks_exact(16)
        .map(|c| {
            let w = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().expect("8 bytes"));
            (w(0) % 4096, w(8) % 4096)
        })
        .collect();
    let ix = RangeIndex::new(ranges.iter().copied());
    for addr in (0..4096).step_by(7) {
        let want = ranges.iter().rposition(|&(s, e)| s <= addr && addr < e);
        assert_eq!(ix.find(addr), want, "{addr}");
    }
});
