//! The sampler's call-frame-information interpreter (librip/csrc/cfi.c) on
//! any bytes as an FDE record and its CIE record: a rule or none. The C
//! side is compiled by gcc without the sanitizers or coverage (so the
//! fuzzer mutates the seeds, real records of Debian's python3 and of a C
//! program, without guidance inside it), and each record is placed
//! against an inaccessible page: a read past either one faults.
#![no_main]

use libfuzzer_sys::fuzz_target;
use librip::alloc::cfi;

thread_local! {
    static PAGES: std::cell::RefCell<(cfi::Guarded, cfi::Guarded)> =
        std::cell::RefCell::new((cfi::Guarded::new(), cfi::Guarded::new()));
}

fuzz_target!(|data: &[u8]| {
    // Two bytes where the FDE ends and the CIE begins, two of the
    // address's offset in the function, then the records.
    if data.len() < 4 {
        return;
    }
    let rest = &data[4..];
    let split = usize::from(u16::from_le_bytes([data[0], data[1]])) % (rest.len() + 1);
    let func = 0x40_0000u64;
    let pc = func + u64::from(u16::from_le_bytes([data[2], data[3]]));
    PAGES.with(|p| {
        let (f, c) = &mut *p.borrow_mut();
        let (fde, cie) = (f.hold(&rest[..split]), c.hold(&rest[split..]));
        if let Some(r) = cfi::rule_in(fde, cie, func, pc) {
            assert!(r.cfa_off > 0, "{r:?}");
        }
    });
});
