//! The sampler's call-frame-information interpreter (librip/csrc/cfi.c) on
//! any bytes as an FDE record and its CIE record: a rule or none. The C
//! side is compiled by gcc without the sanitizers or coverage (so the
//! fuzzer mutates the seeds, real records of Debian's python3 and of a C
//! program, without guidance inside it), and each record is placed
//! against an inaccessible page: a read past either one faults.
#![no_main]

use libfuzzer_sys::fuzz_target;
use librip::alloc::cfi;

/// Two pages, the second inaccessible; `hold` puts bytes at the end of
/// the first.
struct Guarded {
    base: *mut u8,
    page: usize,
}

impl Guarded {
    fn new() -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a fresh private mapping, its second page made
        // inaccessible; never unmapped (one per fuzzing thread).
        let base = unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(m.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                0
            );
            m.cast::<u8>()
        };
        Guarded { base, page }
    }

    fn hold(&mut self, bytes: &[u8]) -> &[u8] {
        let bytes = &bytes[..bytes.len().min(self.page)];
        // SAFETY: inside the accessible page, used by nothing else.
        unsafe {
            let at = self.base.add(self.page - bytes.len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            std::slice::from_raw_parts(at, bytes.len())
        }
    }
}

thread_local! {
    static PAGES: std::cell::RefCell<(Guarded, Guarded)> =
        std::cell::RefCell::new((Guarded::new(), Guarded::new()));
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
