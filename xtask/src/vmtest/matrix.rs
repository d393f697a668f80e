//! The results: rip-vmcheck's lines parsed per machine, and the kernel ×
//! check matrix printed and written as markdown.

use std::{collections::BTreeMap, fmt::Write};

/// The checks rip-vmcheck runs, in its order (the matrix's columns).
pub const CHECKS: &[&str] = &[
    "pid", "dump", "uprobe", "calls", "locks", "offcpu", "switch", "bounds", "foreign", "pidns",
    "cleanup", "bulk", "leaks", "sampler", "dmesg",
];

/// What one machine (the host or a guest) reported.
#[derive(Default)]
pub struct Row {
    /// `host` or the kernel's name.
    pub name: String,
    /// The Debian package the kernel came from (empty for the host).
    pub package: String,
    /// `uname -r` as the suite saw it.
    pub release: Option<String>,
    /// check → (passed, detail).
    pub checks: BTreeMap<String, (bool, String)>,
    /// rip-probe's stderr lines, by check, deduplicated.
    pub notes: Vec<String>,
    /// Why the run as a whole failed (no boot, timeout, no RIPDONE).
    pub error: Option<String>,
    /// Wall time of the run, in seconds.
    pub seconds: f64,
}

impl Row {
    /// Parses rip-vmcheck's output (a guest's serial log or the host's
    /// stdout); sets `error` when the suite did not run to its end.
    pub fn parse(&mut self, log: &str) {
        let mut done = false;
        for line in log.lines() {
            // The serial console ends lines with \r, and kernel messages
            // may precede a line on the same row.
            let line = line.trim_end_matches('\r');
            let Some(at) = ["RIPCHECK ", "RIPNOTE ", "RIPINFO ", "RIPDONE"]
                .iter()
                .filter_map(|k| line.find(k))
                .min()
            else {
                continue;
            };
            let line = &line[at..];
            let mut w = line.splitn(4, ' ');
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some("RIPCHECK"), Some(check), Some(res), detail) => {
                    self.checks.insert(
                        check.to_string(),
                        (res == "PASS", detail.unwrap_or("").to_string()),
                    );
                }
                (Some("RIPNOTE"), Some(check), Some(a), b) => {
                    let note = format!("{check}: {a} {}", b.unwrap_or(""))
                        .trim()
                        .to_string();
                    if !self.notes.contains(&note) {
                        self.notes.push(note);
                    }
                }
                (Some("RIPINFO"), Some("kernel"), Some(r), _) => self.release = Some(r.to_string()),
                (Some("RIPDONE"), ..) => done = true,
                _ => {}
            }
        }
        if !done && self.error.is_none() {
            self.error = Some("the suite did not finish (no RIPDONE)".into());
        }
    }

    /// Whether every check passed and the run completed.
    pub fn ok(&self) -> bool {
        self.error.is_none()
            && CHECKS
                .iter()
                .all(|c| self.checks.get(*c).is_some_and(|(p, _)| *p))
    }

    fn cell(&self, check: &str) -> &'static str {
        match self.checks.get(check) {
            Some((true, _)) => "PASS",
            Some((false, _)) => "FAIL",
            None => "—",
        }
    }
}

/// The matrix as a markdown table followed by the failures and notes.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = write!(s, "| kernel | release |");
    for c in CHECKS {
        let _ = write!(s, " {c} |");
    }
    let _ = writeln!(s, " time |");
    let _ = write!(s, "| --- | --- |");
    for _ in CHECKS {
        let _ = write!(s, " --- |");
    }
    let _ = writeln!(s, " ---: |");
    for r in rows {
        let release = r.release.as_deref().unwrap_or("?");
        let _ = write!(s, "| {} | {release} |", r.name);
        for c in CHECKS {
            let _ = write!(s, " {} |", r.cell(c));
        }
        let _ = writeln!(s, " {:.0}s |", r.seconds);
    }
    let mut details = String::new();
    for r in rows {
        let pkg = if r.package.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.package)
        };
        let mut lines = Vec::new();
        if let Some(e) = &r.error {
            lines.push(format!("run: {e}"));
        }
        for c in CHECKS {
            if let Some((false, d)) = r.checks.get(*c) {
                lines.push(format!("{c} FAIL: {d}"));
            }
        }
        // A note that is also a failure's reason (rip-probe's error line)
        // is said once.
        let failures = lines.join("\n");
        lines.extend(
            r.notes
                .iter()
                .filter(|n| {
                    !n.split_once(": ")
                        .is_some_and(|(_, t)| failures.contains(t))
                })
                .map(|n| format!("note {n}")),
        );
        if !lines.is_empty() {
            let _ = writeln!(details, "\n**{}**{pkg}\n", r.name);
            for l in lines {
                let _ = writeln!(details, "- {l}");
            }
        }
    }
    s + &details
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_serial_log() {
        let log = "[    1.0] boot\r\nRIPBOOT\r\nRIPINFO kernel 6.1.0-40-amd64\r\n\
                   RIPCHECK pid PASS 4 roles\r\nRIPNOTE pid note: no stacks\r\n\
                   [ 3.2] x RIPCHECK dump FAIL slot 3 missing\r\nRIPDONE\r\n";
        let mut r = Row {
            name: "6.1".into(),
            ..Row::default()
        };
        r.parse(log);
        assert_eq!(r.release.as_deref(), Some("6.1.0-40-amd64"));
        assert_eq!(r.checks["pid"], (true, "4 roles".into()));
        assert_eq!(r.checks["dump"], (false, "slot 3 missing".into()));
        assert_eq!(r.notes, ["pid: note: no stacks"]);
        assert!(r.error.is_none());
        assert!(!r.ok(), "a failed check fails the row");
        let md = markdown(&[r]);
        assert!(
            md.contains("| 6.1 | 6.1.0-40-amd64 | PASS | FAIL | — | — | — |"),
            "{md}"
        );
        assert!(md.contains("- dump FAIL: slot 3 missing"), "{md}");
    }

    #[test]
    fn a_cut_log_is_an_error() {
        let mut r = Row::default();
        r.parse("RIPCHECK pid PASS x\n");
        assert!(r.error.is_some());
        assert!(!r.ok());
        let mut all = Row::default();
        all.parse(
            &CHECKS
                .iter()
                .map(|c| format!("RIPCHECK {c} PASS\n"))
                .collect::<String>(),
        );
        assert!(!all.ok(), "no RIPDONE");
    }
}
