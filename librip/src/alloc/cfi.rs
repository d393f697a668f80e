//! The call-frame information the sampler's stack walk takes its rules
//! from (`csrc/cfi.c`), on bytes given here: for its fuzz target and its
//! tests, which hold it to the same rules as the live walk and to reading
//! nothing outside the two records it is given. Not part of the API.

/// What stepping over a frame needs (`csrc/unwind.h`, `struct
/// rip_cfi_rule`): the CFA is rsp (or rbp, [`CFA_RBP`]) plus `cfa_off`;
/// the caller's rbp is at CFA + `bp_off` ([`BP_SAVED`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Rule {
    /// Bytes from rsp or rbp to the CFA.
    pub cfa_off: i32,
    /// Bytes from the CFA to where the caller's rbp is saved.
    pub bp_off: i16,
    /// [`CFA_RBP`], [`BP_SAVED`], [`BP_UNDEFINED`], [`END`].
    pub flags: u8,
}

/// The CFA is rbp-based.
pub const CFA_RBP: u8 = 1;
/// The caller's rbp is saved at CFA + `bp_off`.
pub const BP_SAVED: u8 = 2;
/// The caller's rbp is undefined.
pub const BP_UNDEFINED: u8 = 4;
/// No caller: the stack ends here.
pub const END: u8 = 8;

unsafe extern "C" {
    fn rip_cfi_rule(pc: u64, rule: *mut Rule) -> i32;
    fn rip_cfi_rule_in(
        fde: *const u8,
        fde_size: usize,
        cie: *const u8,
        cie_size: usize,
        func: u64,
        pc: u64,
        rule: *mut Rule,
    ) -> i32;
}

/// The rule at `pc` from an FDE record and its CIE record, of a function
/// starting at `func`: any bytes; `None` when they say nothing a rule can
/// hold (or are no records).
pub fn rule_in(fde: &[u8], cie: &[u8], func: u64, pc: u64) -> Option<Rule> {
    let mut r = Rule::default();
    // SAFETY: the C side reads only inside the two slices it is given and
    // writes only `r`.
    let found = unsafe {
        rip_cfi_rule_in(
            fde.as_ptr(),
            fde.len(),
            cie.as_ptr(),
            cie.len(),
            func,
            pc,
            &mut r,
        )
    };
    (found == 1).then_some(r)
}

/// What the live walk finds for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// Its rule.
    Rule(Rule),
    /// Its CFI says what a rule cannot hold (the walk falls back to libgcc).
    Unsupported,
    /// No FDE holds it (the walk ends there).
    NoFde,
}

/// The rule the live walk takes for `pc`, an instruction of this process.
pub fn rule_at(pc: u64) -> At {
    let mut r = Rule::default();
    // SAFETY: libgcc finds the FDE of an address of this process, or none;
    // the record is read inside its own lengths; only `r` is written.
    match unsafe { rip_cfi_rule(pc, &mut r) } {
        1 => At::Rule(r),
        0 => At::Unsupported,
        _ => At::NoFde,
    }
}

#[derive(Debug)]
/// Room for bytes placed so that the first byte past them is an
/// inaccessible page: a read beyond them faults (the fuzz target's and the
/// tests' check that the C side reads only what it is given).
pub struct Guarded {
    base: *mut u8,
    page: usize,
}

impl Guarded {
    /// Two fresh pages, the second inaccessible.
    pub fn new() -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a fresh private mapping of two pages, the second made
        // inaccessible; unmapped on drop.
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

    /// `bytes` (at most a page of them) copied to end at the guard page.
    pub fn hold(&mut self, bytes: &[u8]) -> &[u8] {
        let bytes = &bytes[..bytes.len().min(self.page)];
        // SAFETY: inside the accessible page, which nothing else uses.
        unsafe {
            let at = self.base.add(self.page - bytes.len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            std::slice::from_raw_parts(at, bytes.len())
        }
    }
}

impl Default for Guarded {
    fn default() -> Guarded {
        Guarded::new()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new.
        unsafe { libc::munmap(self.base.cast(), 2 * self.page) };
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// libgcc's FDE search (exported, in no header).
    #[repr(C)]
    struct Bases {
        tbase: usize,
        dbase: usize,
        func: usize,
    }
    unsafe extern "C" {
        fn _Unwind_Find_FDE(pc: usize, bases: *mut Bases) -> *const u8;
    }

    /// The FDE and CIE records holding `pc`, copied, and the function's
    /// start.
    fn records(pc: usize) -> (Vec<u8>, Vec<u8>, u64) {
        let mut b = Bases {
            tbase: 0,
            dbase: 0,
            func: 0,
        };
        // SAFETY: a search of this process's own loaded .eh_frame.
        let fde = unsafe { _Unwind_Find_FDE(pc, &mut b) };
        assert!(!fde.is_null(), "no FDE for {pc:#x}");
        // SAFETY: the records lie in a loaded, read-only .eh_frame; each is
        // its 4-byte length plus that many bytes.
        unsafe {
            let len = |p: *const u8| 4 + (p as *const u32).read_unaligned() as usize;
            let cie = fde
                .add(4)
                .sub((fde.add(4) as *const u32).read_unaligned() as usize);
            (
                std::slice::from_raw_parts(fde, len(fde)).to_vec(),
                std::slice::from_raw_parts(cie, len(cie)).to_vec(),
                b.func as u64,
            )
        }
    }

    /// The address of a function of this binary (this module's `records`).
    fn a_function() -> usize {
        records as fn(usize) -> (Vec<u8>, Vec<u8>, u64) as usize
    }

    #[test]
    fn records_given_as_bytes_give_the_live_rules() {
        let (fde, cie, func) = records(a_function() + 1);
        let (mut gf, mut gc) = (Guarded::new(), Guarded::new());
        let (fde_g, cie_g) = (gf.hold(&fde), gc.hold(&cie));
        let mut seen = 0;
        // Every address of the function's first 256 bytes that its FDE
        // covers.
        for at in 0..256u64 {
            let pc = func + at;
            if records(pc as usize).2 != func {
                break;
            }
            let live = match rule_at(pc) {
                At::Rule(r) => Some(r),
                At::Unsupported => None,
                At::NoFde => panic!("no FDE at +{at}"),
            };
            assert_eq!(rule_in(fde_g, cie_g, func, pc), live, "at +{at}");
            seen += usize::from(live.is_some());
        }
        assert!(seen > 16, "{seen} addresses with a rule");
        // At a function's first instruction, the CFA is the caller's rsp
        // before the call: rsp + 8, rbp untouched.
        assert_eq!(
            rule_in(fde_g, cie_g, func, func),
            Some(Rule {
                cfa_off: 8,
                bp_off: 0,
                flags: 0
            })
        );
    }

    /// Records cut short or with bytes changed at random, each placed
    /// against an inaccessible page: a rule or none, never a read past
    /// them (which would fault and end the test).
    #[test]
    fn changed_and_cut_records_are_read_inside_their_bytes() {
        let (fde, cie, func) = records(a_function() + 1);
        let (mut gf, mut gc) = (Guarded::new(), Guarded::new());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let (mut f, mut c) = (fde.clone(), cie.clone());
            if next() % 8 == 0 {
                // Any bytes at all.
                let v = if next() % 2 == 0 { &mut f } else { &mut c };
                v.iter_mut().for_each(|b| *b = next() as u8);
            }
            for _ in 0..(next() % 4) {
                let v = if next() % 2 == 0 { &mut f } else { &mut c };
                let i = (next() % v.len() as u64) as usize;
                v[i] = next() as u8;
            }
            f.truncate((next() % (f.len() as u64 + 1)) as usize);
            c.truncate((next() % (c.len() as u64 + 1)) as usize);
            let pc = func + next() % 512;
            if let Some(r) = rule_in(gf.hold(&f), gc.hold(&c), func, pc) {
                assert!(r.cfa_off > 0, "{r:?}");
            }
        }
    }
}
