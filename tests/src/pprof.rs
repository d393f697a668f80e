//! `go tool pprof -top` read back: the rows and total it prints for a
//! profile rip-probe wrote, for tests that check a profile by the reader
//! its users have.

use std::{collections::BTreeMap, path::Path, process::Command};

use crate::go_toolchains;

/// `go tool pprof -top` of `file` for `sample_index`: its rows by
/// function, (flat, cum), values as printed in `unit`, and the total.
pub fn pprof_top(
    file: &Path,
    sample_index: &str,
    unit: &str,
) -> (BTreeMap<String, (u64, u64)>, u64) {
    pprof_top_of(file, sample_index, unit, &[])
}

/// [`pprof_top`] with more of go tool pprof's options (`-tagfocus=…`).
pub fn pprof_top_of(
    file: &Path,
    sample_index: &str,
    unit: &str,
    more: &[&str],
) -> (BTreeMap<String, (u64, u64)>, u64) {
    // Debian's toolchain (the first): the one every Debian user has.
    let go = &go_toolchains()[0];
    let out = Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=100000",
            "-nodefraction=0",
            "-edgefraction=0",
            &format!("-unit={unit}"),
            &format!("-sample_index={sample_index}"),
        ])
        .args(more)
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
        .expect("go tool pprof runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = |s: &str| -> u64 {
        let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        digits
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{s} is not a value: {text}")) as u64
    };
    let mut rows = BTreeMap::new();
    let mut total = None;
    let mut in_rows = false;
    for l in text.lines() {
        if let Some(rest) = l.trim().strip_prefix("Showing nodes accounting for ") {
            // "X, 100% of Y total"
            let y = rest
                .split(" of ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            total = Some(value(y));
            continue;
        }
        if l.trim_start().starts_with("flat") {
            in_rows = true;
            continue;
        }
        if !in_rows {
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 6 {
            continue;
        }
        // An inlined function is shown as `name (inline)`.
        let name = w[5..].join(" ");
        let name = name.trim_end_matches(" (inline)").to_string();
        rows.insert(name, (value(w[0]), value(w[3])));
    }
    // An empty profile shows no "Showing" line.
    (rows, total.unwrap_or(0))
}
