//! How reports write durations (`750ns`, `1.2s`, `2m05s`) and wall-clock
//! times (UTC to the millisecond). One place, so every view agrees.

/// Formats a duration in ns the way the reports do: `750ns`, `12µs`,
/// `3.5ms`, `1.25s`, `2m05s`, `3h02m`.
pub(crate) fn duration(ns: u64) -> String {
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    match ns {
        n if n < US => format!("{n}ns"),
        n if n < MS => format!("{}µs", n / US),
        n if n < 10 * MS => format!("{:.1}ms", n as f64 / MS as f64),
        n if n < S => format!("{}ms", n / MS),
        n if n < 60 * S => format!("{:.1}s", n as f64 / S as f64),
        n if n < 3600 * S => format!("{}m{:02}s", n / (60 * S), (n / S) % 60),
        n => format!("{}h{:02}m", n / (3600 * S), (n / (60 * S)) % 60),
    }
}

/// A wall-clock time (ns since the Unix epoch) as UTC to the millisecond,
/// e.g. `2026-11-22T10:21:05.120Z`.
pub(crate) fn utc(ns: u64) -> String {
    // u64 nanoseconds end in 2554, well inside jiff's range.
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|_| format!("{ns}ns after the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        // date -u -d @1795853265.12
        assert_eq!(utc(1_795_853_265_120_000_000), "2026-11-28T08:07:45.120Z");
        assert_eq!(utc(951_782_400_999_000_000), "2000-02-29T00:00:00.999Z");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(999), "999ns");
        assert_eq!(duration(12_345), "12µs");
        assert_eq!(duration(3_500_000), "3.5ms");
        assert_eq!(duration(1_250_000_000), "1.2s");
        assert_eq!(duration(125_000_000_000), "2m05s");
        assert_eq!(
            duration(3 * 3600 * 1_000_000_000 + 120_000_000_000),
            "3h02m"
        );
    }
}
