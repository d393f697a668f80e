//! `rip-probe calls` as text: a table of the functions (calls, latency
//! figures), each function's log2 histogram, then the outliers; or as
//! JSON.

use std::io::{self, Write};

use super::{hist, text::escape};
use crate::{
    model::calls::{Bounds, CallsReport, FunctionCalls, OutlierRule},
    util::timefmt::{duration, utc},
};

/// Writes `report` as one line of JSON and a newline (schema in
/// docs/JSON.md).
pub fn calls_json(report: &CallsReport, mut w: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut w, report).map_err(io::Error::other)?;
    writeln!(w)
}

/// Writes `report` as text.
pub fn calls_text(r: &CallsReport, w: &mut dyn Write) -> io::Result<()> {
    let p = &r.process;
    writeln!(
        w,
        "pid {} ({}) {}: {} probed, calls counted for {}",
        p.pid,
        escape(p.comm.as_deref().unwrap_or("?")),
        escape(p.exe.as_deref().unwrap_or("?")),
        match r.functions.len() {
            1 => "1 function".to_string(),
            n => format!("{n} functions"),
        },
        duration(r.window_ns)
    )?;
    for warning in &r.warnings {
        writeln!(w, "warning: {}", escape(warning))?;
    }
    writeln!(w)?;
    table(&r.functions, w)?;
    writeln!(
        w,
        "(p50 and p99: the histogram bucket holding them, a quarter of a power of two)"
    )?;
    for f in r.functions.iter().filter(|f| !f.histogram.is_empty()) {
        writeln!(w)?;
        writeln!(
            w,
            "{}: latency of {} timed calls, ns",
            escape(&f.function),
            f.timed
        )?;
        hist::log2(&f.histogram, "  ", w)?;
    }
    if let Some(rule) = &r.outlier_rule {
        outliers(r, rule, w)?;
    }
    Ok(())
}

fn table(functions: &[FunctionCalls], w: &mut dyn Write) -> io::Result<()> {
    let name_width = functions
        .iter()
        .map(|f| f.function.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 40);
    writeln!(
        w,
        "{:<name_width$} {:>10} {:>10} {:>8} {:>8} {:>15} {:>15} {:>8}",
        "FUNCTION", "CALLS", "TIMED", "MIN", "MEAN", "P50", "P99", "MAX"
    )?;
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), duration);
    let bounds = |b: Option<Bounds>| {
        b.map_or_else(
            || "-".to_string(),
            |b| format!("{}–{}", duration(b.lo_ns), duration(b.hi_ns)),
        )
    };
    for f in functions {
        writeln!(
            w,
            "{:<name_width$} {:>10} {:>10} {:>8} {:>8} {:>15} {:>15} {:>8}",
            super::words::truncate(&escape(&f.function), name_width),
            f.calls,
            f.timed,
            opt(f.min_ns),
            opt(f.mean_ns),
            bounds(f.p50),
            bounds(f.p99),
            opt(f.max_ns)
        )?;
    }
    Ok(())
}

fn outliers(r: &CallsReport, rule: &OutlierRule, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w)?;
    let total: u64 = r.functions.iter().map(|f| f.outliers).sum();
    let what = match rule {
        OutlierRule::SlowerThan { threshold_ns } => {
            format!("slower than {}", duration(*threshold_ns))
        }
        OutlierRule::Trained {
            percent,
            training_ns,
        } => {
            let per_fn: Vec<String> = r
                .functions
                .iter()
                .filter_map(|f| {
                    f.threshold_ns
                        .map(|t| format!("{} {}", escape(&f.function), duration(t)))
                })
                .collect();
            format!(
                "slower than {percent}% of the slowest call in the first {} ({})",
                duration(*training_ns),
                if per_fn.is_empty() {
                    "no calls to train on".to_string()
                } else {
                    per_fn.join(", ")
                }
            )
        }
    };
    writeln!(w, "OUTLIERS: {total} calls {what}")?;
    if r.outliers.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "  {:<24} {:>8} {:<20} {:>9}  CALLED FROM",
        "START (UTC)", "TID", "FUNCTION", "DURATION"
    )?;
    for o in &r.outliers {
        writeln!(
            w,
            "  {:<24} {:>8} {:<20} {:>9}  {}",
            utc(o.start_unix_ns),
            o.tid,
            super::words::truncate(&escape(&o.function), 20),
            duration(o.duration_ns),
            escape(&o.caller.describe())
        )?;
    }
    if r.outliers_omitted > 0 {
        writeln!(w, "  … and {} more, not kept", r.outliers_omitted)?;
    }
    Ok(())
}
