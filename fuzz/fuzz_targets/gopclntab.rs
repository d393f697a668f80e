//! Go's `.gopclntab` as rip-probe reads it (its `symbolize::gopclntab`
//! module, built from the same file): a hostile table, or a hostile ELF
//! file, gives answers or a typed error, never a panic, a hang or memory
//! without bound. The input's first 8 bytes are the table's address; the
//! rest is the table (its funcdata read from itself, as recent Go lays it
//! out). Inputs that are ELF files are also read whole.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../rip-probe/src/symbolize/gopclntab.rs"]
mod gopclntab;

use gopclntab::GoBinary;

/// Every lookup, at the functions' edges and at pcs taken from the input.
fn exercise(bin: &GoBinary, pcs: impl Iterator<Item = u64>) {
    let mut n = 0;
    for f in bin.funcs().take(64) {
        assert!(f.entry < f.end);
        for pc in [f.entry, f.end - 1, f.entry + (f.end - f.entry) / 2] {
            assert!(bin.frames_at(pc).len() <= 64);
            let _ = bin.sp_delta(pc);
        }
        if n < 4 {
            let _ = bin.func_by_name(&f.name);
        }
        n += 1;
    }
    assert!(n <= bin.len());
    for pc in pcs.take(64) {
        let _ = bin.frames_at(pc);
        let _ = bin.func_at(pc);
        let _ = bin.sp_delta(pc);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"\x7fELF") {
        if let Ok(Some(bin)) = GoBinary::from_bytes(data) {
            let _ = bin.go_version();
            exercise(&bin, std::iter::empty());
        }
        return;
    }
    let Some((addr, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let addr = u64::from_le_bytes(*addr);
    if let Ok(bin) = GoBinary::from_table(rest.to_vec(), addr) {
        let pcs = rest
            .chunks_exact(4)
            .map(|c| addr.wrapping_add(u64::from(u32::from_le_bytes(c.try_into().unwrap()))));
        exercise(&bin, pcs);
    }
});
