//! Instructions per call, counted by callgrind inside the loop function
//! (`run_loop`) for two numbers of calls: the difference over the
//! difference in calls cancels what does not repeat per call.

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};

use super::proc::shell_words;

/// The callgrind command counting `exe n`'s loop into `out`.
pub fn args(exe: &str, n: u64, out: &str) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "--toggle-collect=run_loop".into(),
        format!("--callgrind-out-file={out}"),
        exe.into(),
        n.to_string(),
    ]
}

/// Instructions executed inside `run_loop` of `exe n`.
fn loop_instructions(exe: &Path, n: u64, dir: &Path) -> Result<u64> {
    let out = dir.join(format!("callgrind.{}.{n}", std::process::id()));
    let a = args(&exe.to_string_lossy(), n, &out.to_string_lossy());
    let res = Command::new(&a[0])
        .args(&a[1..])
        .output()
        .context("running valgrind")?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !res.status.success() {
        bail!(
            "`{}` failed: {}",
            shell_words(&a),
            String::from_utf8_lossy(&res.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let text = text.with_context(|| format!("reading {}", out.display()))?;
    parse_totals(&text).with_context(|| format!("no totals in callgrind's {}", out.display()))
}

/// The instruction total of a callgrind output file.
pub fn parse_totals(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix("totals: ")
            .or_else(|| l.strip_prefix("summary: "))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Instructions per call of `exe`'s loop: (I(n2) - I(n1)) / (n2 - n1).
pub fn per_call(exe: &Path, n1: u64, n2: u64, dir: &Path) -> Result<f64> {
    let i1 = loop_instructions(exe, n1, dir)?;
    let i2 = loop_instructions(exe, n2, dir)?;
    Ok((i2 as f64 - i1 as f64) / (n2 - n1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals() {
        let out = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\nfn=(1) f\n3 5\n\ntotals: 6000123\n";
        assert_eq!(parse_totals(out), Some(6_000_123));
        assert_eq!(parse_totals("summary: 42\n"), Some(42));
        assert_eq!(parse_totals("events: Ir\n"), None);
    }
}
