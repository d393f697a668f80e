//! CPython's `str` headers and location tables as rip-probe decodes them
//! from a live interpreter's memory (which may be torn or hostile): no
//! panic, a decoded string has the length its header says, and a line
//! found is positive.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The module itself, as rip-probe compiles it (it depends on nothing).
#[path = "../../rip-probe/src/collect/runtime/python/decode.rs"]
#[allow(dead_code)]
mod decode;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let w = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    let (a, b) = (w(0), w(8));
    let rest = &data[16..];
    let h = decode::StrHeader::new(a % (decode::MAX_STR + 8), b as u32);
    if let Some(s) = h.decode(rest) {
        assert_eq!(s.chars().count() as u64, h.length);
    }
    if let Some(line) = decode::line_at(rest, b as i32, a % 4096) {
        assert!(line > 0);
    }
});
