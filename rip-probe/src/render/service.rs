//! The text of a report of several processes: a header naming each
//! process by its title, the threads grouped across the processes (each
//! group with every process's share), then each process's own report.

use std::io::{self, Write};

use super::{
    stack,
    text::{escape, escape_frame, group_sentence, live_cut},
    words::{ids, plural},
};
use crate::{
    model::{
        Group, Report,
        cgroup::{ServiceGroup, ServiceReport},
    },
    util::timefmt::duration,
};

/// Processes listed by name in a group's line before the rest are
/// counted; JSON has them all.
const MAX_SHARES: usize = 8;

/// How a process is named in the text: its pid, and its title (or its
/// comm when it has none), escaped.
fn who(r: &Report) -> String {
    let p = &r.process;
    match p.title.as_ref().or(p.comm.as_ref()) {
        Some(t) => format!("pid {} \"{}\"", p.pid, escape(t)),
        None => format!("pid {}", p.pid),
    }
}

/// A cross-process group as a [`Group`], for the sentence the
/// single-process summary uses.
fn as_group(g: &ServiceGroup) -> Group {
    let mut location = g.location.clone();
    if let Some(f) = &mut location {
        escape_frame(f);
    }
    Group {
        origin: None,
        count: g.count,
        ids: Vec::new(),
        state: g.state,
        wait: g.wait.as_deref().map(escape),
        min_ns: g.min_ns,
        lower_bound: g.lower_bound,
        location,
        source: g.source,
        frames: g.frames.clone(),
        stack_samples: None,
        max_ns: None,
        created_by: None,
        waits_on: Vec::new(),
        labels: Default::default(),
    }
}

/// The report of several processes: header, groups across processes,
/// then each process's report (its THREADS table cut after `max_rows`
/// rows, `None`: every thread).
pub fn service(
    r: &ServiceReport,
    max_rows: Option<usize>,
    mut w: &mut dyn Write,
) -> io::Result<()> {
    let threads: usize = r.processes.iter().map(|p| p.threads.len()).sum();
    // Snapshots have no window: nothing was recorded before them. With
    // one, each process was observed from its own attach to its own
    // report: the header says the span of those, not the longest alone.
    let shortest = r
        .processes
        .iter()
        .map(|p| p.window_ns)
        .filter(|&ns| ns > 0)
        .min();
    let window = match (r.window_ns, shortest) {
        (0, _) => "snapshots (no window)".to_string(),
        (ns, Some(least)) if duration(least) != duration(ns) => format!(
            "observed {}–{} (each process from its attach to its report)",
            duration(least),
            duration(ns)
        ),
        (ns, _) => format!("observed {}", duration(ns)),
    };
    writeln!(
        w,
        "{} ({}): {}, {window}",
        plural(r.processes.len(), "process", "processes"),
        escape(&r.targets.join(" ")),
        plural(threads, "thread", "threads"),
    )?;
    for p in &r.processes {
        let deadlocks = if p.deadlocks.is_empty() {
            String::new()
        } else {
            format!(", {}", plural(p.deadlocks.len(), "DEADLOCK", "DEADLOCKS"))
        };
        let gone = if p.process.alive { "" } else { ", exited" };
        writeln!(
            w,
            "  {}: {}{deadlocks}{gone}",
            who(p),
            plural(p.threads.len(), "thread", "threads")
        )?;
    }
    for wrn in &r.warnings {
        writeln!(w, "warning: {}", escape(wrn))?;
    }
    writeln!(w)?;
    writeln!(w, "ACROSS PROCESSES")?;
    let by_pid: std::collections::HashMap<u32, &Report> =
        r.processes.iter().map(|p| (p.process.pid, p)).collect();
    for g in &r.groups {
        let mut line = group_sentence(&as_group(g));
        if let Some(max) = g.max_ns.filter(|&m| Some(m) != g.min_ns) {
            line.push_str(&format!(" (longest {})", duration(max)));
        }
        if let Some(lock) = &g.lock {
            line.push_str(&format!(", waiting for lock {}", escape(lock)));
        }
        writeln!(w, "  {line}")?;
        for s in g.processes.iter().take(MAX_SHARES) {
            let name = by_pid
                .get(&s.pid)
                .map_or_else(|| format!("pid {}", s.pid), |p| who(p));
            writeln!(w, "      {name}: {} (tids {})", s.count, ids(&s.tids))?;
        }
        if g.processes.len() > MAX_SHARES {
            let rest = &g.processes[MAX_SHARES..];
            writeln!(
                w,
                "      … {} more ({}): --json has them all",
                plural(rest.len(), "process", "processes"),
                plural(rest.iter().map(|s| s.count).sum(), "thread", "threads")
            )?;
        }
        let mut frames = g.frames.to_vec();
        frames.iter_mut().for_each(escape_frame);
        stack::write(&frames, None, "      ", &mut w)?;
    }
    for p in &r.processes {
        writeln!(w)?;
        writeln!(w, "=== {} ===", who(p))?;
        live_cut(p, max_rows, &mut *w)?;
    }
    Ok(())
}
