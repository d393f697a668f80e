//! Criterion's estimates, read back for the benches' own summaries.

use std::path::Path;

/// Criterion's median for benchmark `name` of the group whose results are
/// in `dir`, in ns per iteration.
pub fn median(dir: &Path, name: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(name).join("new/estimates.json")).ok()?;
    let m = &text[text.find("\"median\"")?..];
    let p = &m[m.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    p[..p.find([',', '}'])?].trim().parse().ok()
}
