//! A log2 histogram drawn the way bpftrace's `hist()` prints one (and
//! SystemTap's `@hist_log`, turned on its side): one line per power of
//! two, `[lo, hi)` with K/M/G/T suffixes for powers of 1024, the count,
//! and a bar of `@` scaled to the fullest bucket.

use std::io::{self, Write};

use crate::model::Bucket;

/// Width of a full bar, as bpftrace draws it.
const BAR: u64 = 52;

/// `v` as bpftrace labels a bucket bound: `512`, `1K`, `4M`, `2G`.
fn label(v: u64) -> String {
    const SUFFIXES: [(u32, &str); 6] = [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ];
    for (shift, suffix) in SUFFIXES {
        if v >= 1 << shift && v.trailing_zeros() >= shift {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// Writes `buckets` one line per bucket prefixed with `indent`. Every
/// histogram of rip-probe (`calls` latencies, `locks` wait times) is drawn
/// here.
pub(crate) fn log2(buckets: &[Bucket], indent: &str, w: &mut dyn Write) -> io::Result<()> {
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    for &Bucket {
        lo_ns: lo,
        hi_ns: hi,
        count,
    } in buckets
    {
        let range = if hi.saturating_sub(lo) == 1 {
            format!("[{}]", label(lo))
        } else if hi == u64::MAX {
            format!("[{}, ...)", label(lo))
        } else {
            format!("[{}, {})", label(lo), label(hi))
        };
        let bar = "@".repeat((count.saturating_mul(BAR) / max) as usize);
        writeln!(
            w,
            "{indent}{range:<16}{count:>8} |{bar:<width$}|",
            width = BAR as usize
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_bpftrace() {
        assert_eq!(label(512), "512");
        assert_eq!(label(1024), "1K");
        assert_eq!(label(4 << 20), "4M");
        assert_eq!(label(1 << 31), "2G");
        let bucket = |lo_ns, hi_ns, count| Bucket {
            lo_ns,
            hi_ns,
            count,
        };
        let buckets = [bucket(1, 2, 1), bucket(2 << 20, 4 << 20, 4)];
        let mut out = Vec::new();
        log2(&buckets, "", &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = format!(
            "[1]                    1 |{:<52}|\n[2M, 4M)               4 |{}|\n",
            "@".repeat(13),
            "@".repeat(52)
        );
        assert_eq!(text, expected);
    }
}
