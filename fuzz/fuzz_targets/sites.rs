//! The site-table parser (`librip::sites`) against arbitrary sections:
//! a table or a typed error, never a panic. The input's first 8 bytes are
//! the section's address; the rest is both the section and the image its
//! strings are read from (so relative fields can reach real strings).
#![no_main]

use libfuzzer_sys::fuzz_target;
use librip::sites::SiteTable;

fuzz_target!(|data: &[u8]| {
    let Some((addr, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let base = u64::from_le_bytes(*addr);
    let image = |a: u64| -> Option<&[u8]> {
        let off = usize::try_from(a.checked_sub(base)?).ok()?;
        rest.get(off..)
    };
    if let Ok(t) = SiteTable::parse(rest, base, &image) {
        let sites = t.sites();
        assert!(sites.windows(2).all(|w| w[0].addr < w[1].addr));
        for s in sites {
            assert_eq!(t.find(s.addr), Some(s));
            assert!(s.file.len() <= librip::sites::MAX_STRING * 3);
        }
        let n = t.len();
        assert!(t.translate(|a| a.checked_add(1)).len() <= n);
    }
});
