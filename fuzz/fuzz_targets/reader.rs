//! The reader against arbitrary bytes: any input is a ring or a typed
//! error, never a panic, and a parsed ring can be walked whole.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ring) = librip::reader::RingFile::from_bytes(data) {
        let _ = ring.header();
        for m in ring.modules() {
            let _ = ring.module_of(m.start);
        }
        for slot in ring.slots() {
            assert!(slot.entries.len() <= ring.header().depth as usize);
            assert!(slot.entries.windows(2).all(|w| w[0].seq < w[1].seq));
        }
    }
});
