//! `rip-probe serve`'s metrics as OpenMetrics text (what Prometheus
//! scrapes with `Accept: application/openmetrics-text`): one family per
//! number, labelled by process (`pid`, `comm`) and, for threads, `state`;
//! never by thread or address, so the series stay as few as the
//! processes. Ends with `# EOF`.

use std::io::{self, Write};

use crate::model::serve::{ProcessMetrics, ServeMetrics};

/// The content type of [`openmetrics`]'s text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A label value as OpenMetrics quotes it: `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Seconds from nanoseconds, as a metric value.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A threshold's label value: its seconds, shortest form (`30`, `0.5`).
fn threshold(ns: u64) -> String {
    format!("{}", secs(ns))
}

/// One family: its `# TYPE`, `# HELP` and a sample per process that has
/// a value.
fn family(
    w: &mut dyn Write,
    name: &str,
    kind: &str,
    help: &str,
    processes: &[ProcessMetrics],
    mut samples: impl FnMut(&ProcessMetrics, &str, &mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    writeln!(w, "# TYPE {name} {kind}")?;
    writeln!(w, "# HELP {name} {help}")?;
    for p in processes {
        let labels = format!("pid=\"{}\",comm=\"{}\"", p.pid, label(&p.comm));
        samples(p, &labels, w)?;
    }
    Ok(())
}

/// Writes `m` as OpenMetrics text.
pub fn openmetrics(m: &ServeMetrics, w: &mut dyn Write) -> io::Result<()> {
    let ps = &m.processes;
    family(
        w,
        "rip_threads",
        "gauge",
        "Threads of the process by state, at its last snapshot.",
        ps,
        |p, l, w| {
            for (state, n) in p.health.iter().flat_map(|h| &h.by_state) {
                writeln!(w, "rip_threads{{{l},state=\"{state}\"}} {n}")?;
            }
            Ok(())
        },
    )?;
    family(
        w,
        "rip_longest_blocked_seconds",
        "gauge",
        "How long the process's longest-blocked thread has been blocked (0: none blocked).",
        ps,
        |p, l, w| match &p.health {
            Some(h) => writeln!(
                w,
                "rip_longest_blocked_seconds{{{l}}} {}",
                secs(h.longest_blocked_ns.unwrap_or(0))
            ),
            None => Ok(()),
        },
    )?;
    family(
        w,
        "rip_threads_blocked_over",
        "gauge",
        "Threads blocked at least threshold_seconds (a lower bound).",
        ps,
        |p, l, w| {
            for (t, n) in p.health.iter().flat_map(|h| &h.blocked_over) {
                writeln!(
                    w,
                    "rip_threads_blocked_over{{{l},threshold_seconds=\"{}\"}} {n}",
                    threshold(*t)
                )?;
            }
            Ok(())
        },
    )?;
    family(
        w,
        "rip_lock_waiters",
        "gauge",
        "Threads waiting for a lock (mutex, rwlock, PI futex, runtime lock), not for a condition.",
        ps,
        |p, l, w| match &p.health {
            Some(h) => writeln!(w, "rip_lock_waiters{{{l}}} {}", h.lock_waiters),
            None => Ok(()),
        },
    )?;
    family(
        w,
        "rip_deadlocks",
        "gauge",
        "Deadlocks (cycles of lock waits, confirmed by a second look) at the last snapshot.",
        ps,
        |p, l, w| match &p.health {
            Some(h) => writeln!(w, "rip_deadlocks{{{l}}} {}", h.deadlocks),
            None => Ok(()),
        },
    )?;
    family(
        w,
        "rip_snapshot_duration_seconds",
        "gauge",
        "How long the process's last snapshot took.",
        ps,
        |p, l, w| {
            writeln!(
                w,
                "rip_snapshot_duration_seconds{{{l}}} {}",
                secs(p.snapshot_ns)
            )
        },
    )?;
    family(
        w,
        "rip_snapshot_errors",
        "counter",
        "Snapshots of the process that failed.",
        ps,
        |p, l, w| writeln!(w, "rip_snapshot_errors_total{{{l}}} {}", p.errors),
    )?;
    family(
        w,
        "rip_incidents",
        "counter",
        "Incident reports written for the process (a thread stuck, a deadlock).",
        ps,
        |p, l, w| writeln!(w, "rip_incidents_total{{{l}}} {}", p.incidents),
    )?;
    family(
        w,
        "rip_incident",
        "info",
        "The process's latest incident report (JSON; the text beside it ends in .txt).",
        ps,
        |p, l, w| match &p.incident_path {
            Some(path) => writeln!(w, "rip_incident_info{{{l},path=\"{}\"}} 1", label(path)),
            None => Ok(()),
        },
    )?;
    for (name, kind, help, value) in [
        (
            "rip_serve_targets",
            "gauge",
            "Processes serve observes (found at the last listing).",
            m.targets as f64,
        ),
        (
            "rip_serve_passes",
            "counter",
            "Snapshot passes over the targets completed.",
            m.passes as f64,
        ),
        (
            "rip_serve_deferred",
            "counter",
            "Targets left to a later pass when a pass reached its bound.",
            m.deferred as f64,
        ),
        (
            "rip_serve_pass_duration_seconds",
            "gauge",
            "How long the last pass took.",
            secs(m.pass_ns),
        ),
        (
            "rip_otlp_batches_sent",
            "counter",
            "OTLP log batches delivered.",
            m.otlp_sent as f64,
        ),
        (
            "rip_otlp_batches_dropped",
            "counter",
            "OTLP log batches dropped: the queue was full, or every retry failed.",
            m.otlp_dropped as f64,
        ),
        (
            "rip_otlp_failures",
            "counter",
            "OTLP POSTs that failed (each retry counts).",
            m.otlp_failures as f64,
        ),
    ] {
        writeln!(w, "# TYPE {name} {kind}")?;
        writeln!(w, "# HELP {name} {help}")?;
        let suffix = if kind == "counter" { "_total" } else { "" };
        writeln!(w, "{name}{suffix} {value}")?;
    }
    writeln!(w, "# EOF")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::serve::Health;

    /// Every family is typed before its samples, counters end in
    /// `_total`, label values are escaped, and the text ends with `# EOF`.
    #[test]
    fn openmetrics_text_is_well_formed() {
        let mut h = Health {
            longest_blocked_ns: Some(1_500_000_000),
            blocked_over: vec![(30_000_000_000, 2)],
            lock_waiters: 3,
            deadlocks: 1,
            ..Default::default()
        };
        h.by_state.insert("sleeping", 100);
        let m = ServeMetrics {
            processes: vec![ProcessMetrics {
                pid: 42,
                comm: "a\"b\\c\nd".into(),
                health: Some(h),
                snapshot_ns: 2_000_000,
                errors: 1,
                incidents: 1,
                incident_path: Some("/var/lib/rip/42-1.json".into()),
            }],
            passes: 3,
            ..Default::default()
        };
        let mut out = Vec::new();
        openmetrics(&m, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in [
            r#"rip_threads{pid="42",comm="a\"b\\c\nd",state="sleeping"} 100"#,
            r#"rip_longest_blocked_seconds{pid="42",comm="a\"b\\c\nd"} 1.5"#,
            r#"rip_threads_blocked_over{pid="42",comm="a\"b\\c\nd",threshold_seconds="30"} 2"#,
            r#"rip_deadlocks{pid="42",comm="a\"b\\c\nd"} 1"#,
            r#"rip_snapshot_errors_total{pid="42",comm="a\"b\\c\nd"} 1"#,
            r#"rip_incident_info{pid="42",comm="a\"b\\c\nd",path="/var/lib/rip/42-1.json"} 1"#,
            "rip_serve_passes_total 3",
            "# TYPE rip_incident info",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        // No line but the last is blank or EOF.
        assert!(text.lines().all(|l| !l.is_empty()));
    }
}
