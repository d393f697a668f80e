//! The runtime's roots in a stripped Go binary, found in its code: the
//! `.gopclntab` (which stripped binaries keep) says where a runtime
//! function is, and that function's instructions name the globals it
//! reads by their RIP-relative addresses, decoded with a real x86
//! decoder. Checked against the symbol table of unstripped builds.

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic};

/// The addresses the RIP-relative memory operands of `code` (loaded at
/// `ip`) refer to, in program order.
pub(crate) fn rip_targets(code: &[u8], ip: u64) -> Vec<u64> {
    let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut i = Instruction::default();
    let mut out = Vec::new();
    while d.can_decode() {
        d.decode_out(&mut i);
        if i.is_invalid() {
            continue;
        }
        if i.is_ip_rel_memory_operand() {
            out.push(i.ip_rel_memory_address());
        }
    }
    out
}

/// The addresses the RIP-relative `lea`s of `code` (loaded at `ip`) take:
/// the globals it indexes (an array's base), not those it loads.
pub(crate) fn lea_targets(code: &[u8], ip: u64) -> Vec<u64> {
    let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut i = Instruction::default();
    let mut out = Vec::new();
    while d.can_decode() {
        d.decode_out(&mut i);
        if !i.is_invalid() && i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand() {
            out.push(i.ip_rel_memory_address());
        }
    }
    out
}

/// `runtime.semtable` from the `lea` targets of the runtime's semaphore
/// functions (`semacquire1` and `semrelease1` both index the table by the
/// semaphore's address; their other `lea`s, the strings they throw and
/// the functions they call, differ): the one target every function has
/// that `writable` accepts (an address in the binary's writable data).
pub(crate) fn semtable(per_function: &[Vec<u64>], writable: impl Fn(u64) -> bool) -> Option<u64> {
    let (first, rest) = per_function.split_first()?;
    let mut common: Vec<u64> = first
        .iter()
        .copied()
        .filter(|a| writable(*a) && rest.iter().all(|t| t.contains(a)))
        .collect();
    common.sort_unstable();
    common.dedup();
    // Two candidates would be a guess.
    match common[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// `runtime.allgs` from the code of `runtime.forEachG` (or another
/// function that ranges over it): the slice is the global whose first two
/// words (pointer, length) are both read.
pub(crate) fn allgs(targets: &[u64]) -> Option<u64> {
    let mut found = targets
        .iter()
        .copied()
        .filter(|&a| targets.contains(&(a + 8)));
    let first = found.next()?;
    // Two candidates would be a guess.
    found.all(|a| a == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rip_relative_operands_are_decoded() {
        // mov rax, [rip+0x10]; mov rcx, [rip+0x12]; ret
        let code = [
            0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x0d, 0x12, 0x00, 0x00, 0x00,
            0xc3,
        ];
        let t = rip_targets(&code, 0x1000);
        assert_eq!(t, [0x1000 + 7 + 0x10, 0x1000 + 14 + 0x12]);
        assert_eq!(allgs(&t), None, "not a pointer and its length");
        assert_eq!(allgs(&[0x5000, 0x9000, 0x5008]), Some(0x5000));
        assert_eq!(allgs(&[0x5000, 0x5008, 0x7000, 0x7008]), None, "ambiguous");
    }

    #[test]
    fn semtable_is_the_writable_lea_target_both_functions_share() {
        // lea rdx, [rip+0x10]; mov rax, [rip+0x20]; ret
        let code = [
            0x48, 0x8d, 0x15, 0x10, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x05, 0x20, 0x00, 0x00, 0x00,
            0xc3,
        ];
        assert_eq!(
            lea_targets(&code, 0x1000),
            [0x1000 + 7 + 0x10],
            "the lea only"
        );
        let data = |a: u64| (0x9000..0xa000).contains(&a);
        // The table, a string each throws, a function each calls.
        let acquire = vec![0x9100, 0x3000, 0x9100, 0x2000];
        let release = vec![0x9100, 0x3100, 0x2000];
        assert_eq!(semtable(&[acquire.clone(), release], data), Some(0x9100));
        assert_eq!(
            semtable(&[acquire.clone(), vec![0x3000, 0x2000]], data),
            None,
            "not in both"
        );
        assert_eq!(
            semtable(&[vec![0x9100, 0x9200], vec![0x9200, 0x9100]], data),
            None,
            "ambiguous"
        );
        assert_eq!(semtable(&[], data), None);
    }
}
