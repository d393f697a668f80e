//! The runtime's roots in a stripped Go binary, found in its code: the
//! `.gopclntab` (which stripped binaries keep) says where a runtime
//! function is, and that function's instructions name the globals it
//! reads by their RIP-relative addresses, decoded with a real x86
//! decoder. Checked against the symbol table of unstripped builds.

use iced_x86::{Decoder, DecoderOptions, Instruction};

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
}
