//! The allocation table's reader (librip::reader::alloc) on any bytes as a
//! table region: a table or a typed error, never a panic; what it returns
//! keeps to the region's own limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(t)) = librip::reader::alloc::from_region_bytes(data) {
        assert!(t.live.len() + t.torn as usize <= t.capacity as usize);
        for a in &t.live {
            assert!(a.frames.len() <= 64);
            let e = librip::reader::alloc::estimated_bytes(a.requested, t.mean);
            assert!(e >= a.requested as f64 * 0.999_999);
        }
    }
});
