//! `rip-probe calls` as text: a table of the functions (calls, latency
//! figures), each function's log2 histogram, then the outliers; or as
//! JSON.

use std::io::{self, Write};

use super::{hist, text::escape};
use crate::{
    model::calls::{Bounds, CallsReport, FunctionCalls, OutlierRule},
    util::timefmt::{duration, utc},
};

/// Writes `r` as text.
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
    // The slowest calls' stacks at entry: who called, through what.
    let mut slowest: Vec<&crate::model::calls::SlowCall> =
        r.outliers.iter().filter(|o| o.stack.len() > 1).collect();
    slowest.sort_by_key(|o| std::cmp::Reverse(o.duration_ns));
    for o in slowest.iter().take(STACKS_SHOWN) {
        writeln!(w)?;
        writeln!(
            w,
            "  {} in thread {} at {}: {}, stack at entry:",
            escape(&o.function),
            o.tid,
            utc(o.start_unix_ns),
            duration(o.duration_ns)
        )?;
        let mut frames = o.stack.clone();
        frames.iter_mut().for_each(super::text::escape_frame);
        let mut out: &mut dyn Write = &mut *w;
        super::stack::write(&frames, None, "    ", &mut out)?;
    }
    if slowest.len() > STACKS_SHOWN {
        writeln!(
            w,
            "\n  (the stacks of the {STACKS_SHOWN} slowest; --json has every outlier's)"
        )?;
    }
    Ok(())
}

/// Outliers whose stacks the text view shows, slowest first.
const STACKS_SHOWN: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bucket, Frame, ProcessInfo, calls::SlowCall};

    fn report() -> CallsReport {
        let bounds = Bounds {
            lo_ns: 2_200_000,
            hi_ns: 2_621_440,
        };
        CallsReport {
            schema: crate::model::SCHEMA_VERSION,
            process: ProcessInfo {
                pid: 42,
                exe: Some("/srv/app".into()),
                comm: Some("app".into()),
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            window_ns: 2_000_000_000,
            outlier_rule: Some(OutlierRule::SlowerThan {
                threshold_ns: 10_000_000,
            }),
            functions: vec![FunctionCalls {
                function: "work\x1b".into(),
                module: "/srv/app".into(),
                module_offset: 0x1390,
                calls: 10,
                timed: 10,
                min_ns: Some(2_200_000),
                mean_ns: Some(4_000_000),
                p50: Some(bounds),
                p99: Some(bounds),
                max_ns: Some(20_000_000),
                histogram: vec![
                    Bucket {
                        lo_ns: 1 << 21,
                        hi_ns: 1 << 22,
                        count: 9,
                    },
                    Bucket {
                        lo_ns: 1 << 22,
                        hi_ns: 1 << 23,
                        count: 0,
                    },
                    Bucket {
                        lo_ns: 1 << 23,
                        hi_ns: 1 << 24,
                        count: 0,
                    },
                    Bucket {
                        lo_ns: 1 << 24,
                        hi_ns: 1 << 25,
                        count: 1,
                    },
                ],
                threshold_ns: Some(10_000_000),
                outliers: 1,
            }],
            outliers: vec![SlowCall {
                function: "work\x1b".into(),
                tid: 43,
                start_unix_ns: 1_795_853_265_120_000_000,
                duration_ns: 20_000_000,
                caller: Frame {
                    function: Some("main".into()),
                    file: Some("app.c".into()),
                    line: Some(40),
                    ..Frame::default()
                },
                stack: vec![
                    Frame {
                        addr: 0x1000,
                        function: Some("work\x1b".into()),
                        ..Frame::default()
                    },
                    Frame {
                        addr: 0x2000,
                        function: Some("main".into()),
                        file: Some("app.c".into()),
                        line: Some(40),
                        ..Frame::default()
                    },
                ],
            }],
            outliers_omitted: 0,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn table_histogram_and_outliers() {
        let mut out = Vec::new();
        calls_text(&report(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "pid 42 (app) /srv/app: 1 function probed, calls counted for 2.0s"
        );
        assert!(lines[2].starts_with("FUNCTION"), "{text}");
        assert_eq!(
            lines[3],
            "work\\x1b         10         10    2.2ms    4.0ms     2.2ms–2.6ms     2.2ms–2.6ms     20ms"
        );
        assert!(
            text.contains("work\\x1b: latency of 10 timed calls, ns\n"),
            "{text}"
        );
        assert!(
            text.contains("\n  [2M, 4M)               9 |@@@@"),
            "{text}"
        );
        assert!(
            text.contains("\n  [4M, 8M)               0 |    "),
            "{text}"
        );
        assert!(
            text.contains("OUTLIERS: 1 calls slower than 10ms\n"),
            "{text}"
        );
        assert!(
            text.contains("2026-11-28T08:07:45.120Z       43 work\\x1b"),
            "{text}"
        );
        assert!(text.contains("20ms  app.c:40 main\n"), "{text}");
        // The slowest outliers' stacks at entry follow the table.
        assert!(
            text.trim_end().ends_with(
                "  work\\x1b in thread 43 at 2026-11-28T08:07:45.120Z: 20ms, stack at entry:\n    \
                 #0  0x1000         work\\x1b\n    #1  0x2000         main at app.c:40"
            ),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "escaped: {text}");
    }
}
