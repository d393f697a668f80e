//! Text views: the live report (summary, tasks, then thread table), the
//! grouped dump view, and per-thread history. The tasks part is in
//! [`super::tasks`].

use std::io::{self, Write};

use super::tasks;
use crate::{
    decode::duration,
    model::{Group, Location, LocationSource, Mode, Report, Thread, ThreadState},
};

/// Tids listed in a group line before eliding; JSON has them all.
const MAX_IDS: usize = 12;
/// Kernel frames shown per thread in the table.
const KSTACK_FRAMES: usize = 6;

pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(super) fn ids(v: &[u64]) -> String {
    let mut s: Vec<String> = v.iter().take(MAX_IDS).map(u64::to_string).collect();
    if v.len() > MAX_IDS {
        s.push(format!("… (+{})", v.len() - MAX_IDS));
    }
    s.join(" ")
}

pub(super) fn source_word(s: Option<LocationSource>) -> &'static str {
    match s {
        Some(LocationSource::Ring) | None => "last snap",
        Some(LocationSource::Uprobe) => "last entered",
        Some(LocationSource::UserPc) => "user pc",
    }
}

fn blocked_text(ns: u64, lower_bound: bool) -> String {
    format!("{}{}", if lower_bound { "≥" } else { "" }, duration(ns))
}

fn header(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let p = &r.process;
    let mut line = format!("pid {}", p.pid);
    if let Some(c) = &p.comm {
        line.push_str(&format!(" ({c})"));
    }
    if let Some(e) = &p.exe {
        line.push_str(&format!(" {e}"));
    }
    line.push_str(&format!(
        ": {}",
        plural(r.threads.len(), "thread", "threads")
    ));
    if !r.tasks.is_empty() {
        line.push_str(&format!(", {}", plural(r.tasks.len(), "task", "tasks")));
    }
    if r.mode == Mode::Pid {
        line.push_str(&format!(", observed {}", duration(r.window_ns)));
    } else if !p.alive {
        line.push_str(", process not running");
    }
    writeln!(w, "{line}")?;
    for ring in &r.rings {
        writeln!(
            w,
            "ring {} (layout v{}, depth {})",
            ring.path, ring.version, ring.depth
        )?;
    }
    if r.rings.is_empty() && r.mode == Mode::Pid {
        writeln!(
            w,
            "no ring: locations are the user pc at kernel entry (or --uprobe hits)"
        )?;
    }
    if let Some(lost) = &p.lost {
        writeln!(w, "warning: {lost}")?;
    }
    for wrn in &r.warnings {
        writeln!(w, "warning: {wrn}")?;
    }
    Ok(())
}

/// A group of threads as one sentence, e.g. "37 threads blocked in
/// futex_wait for ≥4.2s — last snap src/pool.rs:88 Pool::take".
pub fn group_sentence(g: &Group) -> String {
    let mut s = plural(g.count, "thread", "threads");
    match (g.state.as_str(), &g.wait) {
        ("sleeping", Some(wait)) => s.push_str(&format!(" blocked in {wait}")),
        ("uninterruptible", Some(wait)) => {
            s.push_str(&format!(" blocked uninterruptibly in {wait}"))
        }
        (state, Some(wait)) => s.push_str(&format!(" {state} in {wait}")),
        ("unknown", None) => s.push_str(" last seen"),
        (state, None) => s.push_str(&format!(" {state}")),
    }
    if let Some(ns) = g.min_ns {
        s.push_str(&format!(
            " for {}",
            blocked_text(ns, g.lower_bound || g.count > 1)
        ));
    }
    if let Some(loc) = &g.location {
        if g.state == "unknown" {
            s.push_str(&format!(" at {loc}"));
        } else {
            s.push_str(&format!(" — {} {loc}", source_word(g.source)));
        }
    }
    s
}

pub(super) fn location_text(l: &Option<Location>) -> String {
    match l {
        Some(l) => {
            let mut s = l.frame.describe();
            if l.source != LocationSource::Ring {
                s.push_str(&format!(" [{}]", source_word(Some(l.source))));
            }
            if let Some(ago) = l.ago_ns {
                s.push_str(&format!(" ({} ago)", duration(ago)));
            }
            s
        }
        None => "-".into(),
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// The live report: header, grouped summary, tasks, then one row per
/// thread with its kernel stack.
pub fn live(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    header(r, &mut w)?;
    writeln!(w)?;
    writeln!(w, "SUMMARY")?;
    for g in &r.groups {
        writeln!(w, "  {}", group_sentence(g))?;
        writeln!(w, "      tids: {}", ids(&g.ids))?;
    }
    tasks::section(r, &mut w)?;
    writeln!(w)?;
    writeln!(w, "THREADS")?;
    writeln!(
        w,
        "  {:<8} {:<16} {:<15} {:>9}  {:<48} LOCATION",
        "TID", "NAME", "STATE", "BLOCKED", "SYSCALL"
    )?;
    for t in &r.threads {
        thread_row(t, &mut w)?;
    }
    Ok(())
}

fn thread_row(t: &Thread, w: &mut impl Write) -> io::Result<()> {
    let blocked = t
        .blocked
        .map(|b| blocked_text(b.ns, !b.exact))
        .unwrap_or_else(|| "-".into());
    let sys = t.syscall.as_ref().map(|s| s.text.as_str()).unwrap_or("-");
    let task = t
        .polling_task
        .map(|id| format!(" [polling task {id}]"))
        .unwrap_or_default();
    writeln!(
        w,
        "  {:<8} {:<16} {:<15} {:>9}  {:<48} {}{task}",
        t.tid,
        truncate(&t.name, 16),
        t.state.as_str(),
        blocked,
        truncate(sys, 48),
        location_text(&t.location)
    )?;
    if !t.kernel_stack.is_empty() {
        let frames: Vec<String> = t
            .kernel_stack
            .iter()
            .take(KSTACK_FRAMES)
            .map(|f| {
                f.function
                    .clone()
                    .unwrap_or_else(|| format!("{:#x}", f.addr))
            })
            .collect();
        let more = if t.kernel_stack.len() > KSTACK_FRAMES {
            " ← …"
        } else {
            ""
        };
        writeln!(w, "  {:<8} kernel: {}{more}", "", frames.join(" ← "))?;
    }
    Ok(())
}

/// The grouped dump view (like the original `read_rip`): each location
/// with how many threads were last seen there and their tids, most
/// populated first; then tasks the same way.
pub fn grouped(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    header(r, &mut w)?;
    writeln!(w)?;
    writeln!(w, "{:>7}  LOCATION (threads last seen there)", "THREADS")?;
    for g in &r.groups {
        let loc = g.location.as_deref().unwrap_or("(no snap yet)");
        let state = if g.state == "exited" { " [exited]" } else { "" };
        writeln!(w, "{:>7}  {loc}{state}", g.count)?;
        writeln!(w, "         tids: {}", ids(&g.ids))?;
    }
    tasks::section(r, &mut w)
}

/// Per-thread (and per-task) history, oldest to newest, with counters.
pub fn history(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    header(r, &mut w)?;
    for t in &r.threads {
        writeln!(w)?;
        let snaps = t.snaps.map(|n| format!(", {n} snaps")).unwrap_or_default();
        let state = match t.state {
            // A dump has no kernel view: a slot is live or exited.
            ThreadState::Unknown => "live",
            s => s.as_str(),
        };
        writeln!(w, "tid {} {:?} {state}{snaps}", t.tid, t.name)?;
        entries(&t.history, &t.location, &mut w)?;
    }
    for t in &r.tasks {
        writeln!(w)?;
        writeln!(
            w,
            "task {} {:?} {} ({}), {} polls",
            t.id,
            t.name,
            tasks::state(t, &r.threads),
            tasks::for_text(t),
            t.polls
        )?;
        entries(&t.history, &t.location, &mut w)?;
    }
    Ok(())
}

fn entries(hist: &[Location], last: &Option<Location>, w: &mut impl Write) -> io::Result<()> {
    if last.is_none() {
        return writeln!(w, "    (no snaps)");
    }
    for l in hist.iter().chain(last) {
        let seq = l.seq.map(|s| format!("#{s}")).unwrap_or_default();
        writeln!(w, "  {seq:>8}  {}", l.frame.describe())?;
    }
    Ok(())
}
