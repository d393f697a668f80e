//! Text views: the live report (summary, tasks, then thread table), the
//! grouped dump view, and per-thread history. The tasks part is in
//! [`super::tasks`].

use std::{
    collections::HashMap,
    io::{self, Write},
};

use super::{
    stack, tasks,
    words::{ids, location_text, plural, source_word, truncate},
};
use crate::{
    model::{Frame, Group, Location, Mode, Report, Thread, ThreadState, rewrite_shared},
    util::timefmt::duration,
};

/// `s` with every control character (C0, DEL, C1) escaped: `\n`, `\t`,
/// `\r`, `\xNN`, `\u{NN}`. Names, paths and symbols come from the target
/// process, its ring and its binaries; written raw, an ESC or a C1 CSI
/// would let them drive the reader's terminal.
pub fn escape(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn escape_in_place(s: &mut String) {
    if s.chars().any(char::is_control) {
        *s = escape(s);
    }
}

/// Escapes the target's strings in a frame (see [`escape`]).
pub(super) fn escape_frame(f: &mut Frame) {
    for s in [&mut f.function, &mut f.file, &mut f.module, &mut f.label]
        .into_iter()
        .flatten()
    {
        escape_in_place(s);
    }
    for i in &mut f.inlined {
        escape_in_place(&mut i.function);
        if let Some(file) = &mut i.file {
            escape_in_place(file);
        }
    }
}

fn escape_locations(last: &mut Option<Location>, hist: &mut [Location]) {
    for l in last.iter_mut().chain(hist.iter_mut()) {
        escape_frame(&mut l.frame);
    }
}

fn escape_group(g: &mut Group) {
    escape_in_place(&mut g.state);
    for s in [&mut g.wait, &mut g.location].into_iter().flatten() {
        escape_in_place(s);
    }
}

/// The text views' one boundary with the outside: a copy of the report
/// with every string that came from the target, its ring, its binaries or
/// /proc escaped (see [`escape`]). JSON renders the report as it is.
fn terminal_safe(r: &Report) -> Report {
    let mut r = r.clone();
    let p = &mut r.process;
    for s in [&mut p.exe, &mut p.comm, &mut p.lost].into_iter().flatten() {
        escape_in_place(s);
    }
    for ring in &mut r.rings {
        escape_in_place(&mut ring.path);
        if let Some(n) = &mut ring.namespace {
            escape_in_place(n);
        }
    }
    r.warnings.iter_mut().for_each(escape_in_place);
    // Each shared stack once.
    r.map_kernel_frames(escape_frame);
    rewrite_shared(
        r.threads
            .iter_mut()
            .map(|t| &mut t.frames)
            .chain(r.groups.iter_mut().map(|g| &mut g.frames)),
        escape_frame,
    );
    for t in &mut r.threads {
        escape_in_place(&mut t.name);
        if let Some(sys) = &mut t.syscall {
            escape_in_place(&mut sys.name);
            escape_in_place(&mut sys.text);
            for a in &mut sys.args {
                escape_in_place(&mut a.text);
            }
        }
        escape_locations(&mut t.location, &mut t.history);
        if let Some(w) = &mut t.waits_for {
            for s in [&mut w.symbol, &mut w.owner_state].into_iter().flatten() {
                escape_in_place(s);
            }
            if let crate::model::Owner::Unknown { reason }
            | crate::model::Owner::NotRecorded { reason } = &mut w.owner
            {
                escape_in_place(reason);
            }
        }
    }
    for t in &mut r.tasks {
        escape_in_place(&mut t.name);
        escape_locations(&mut t.location, &mut t.history);
    }
    r.groups.iter_mut().for_each(escape_group);
    r.task_groups.iter_mut().for_each(escape_group);
    r
}

/// Kernel frames shown per thread in the table.
const KSTACK_FRAMES: usize = 6;

fn blocked_text(ns: u64, lower_bound: bool) -> String {
    format!("{}{}", if lower_bound { "≥" } else { "" }, duration(ns))
}

fn header(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let p = &r.process;
    let mut line = format!("pid {}", p.pid);
    match p.ns_pid {
        Some(n) if n != p.pid => line.push_str(&format!(" (pid {n} in its namespace)")),
        // The writer of a dumped ring is gone: only its namespace's pid is known.
        Some(_) => line.push_str(" (of its own pid namespace)"),
        None => {}
    }
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
    } else if !p.alive && p.lost.is_none() {
        line.push_str(", process not running");
    }
    writeln!(w, "{line}")?;
    for ring in &r.rings {
        writeln!(
            w,
            "ring {} (layout v{}, depth {})",
            ring.path, ring.version, ring.depth
        )?;
        if let Some(n) = &ring.namespace {
            writeln!(w, "  {n}")?;
        }
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
pub(crate) fn group_sentence(g: &Group) -> String {
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

/// The live report: header, grouped summary, tasks, then one row per
/// thread with its kernel stack.
pub fn live(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    let r = &terminal_safe(r);
    header(r, &mut w)?;
    let by_tid = crate::analyze::waits::by_tid(r);
    deadlocks(r, &by_tid, &mut w)?;
    writeln!(w)?;
    writeln!(w, "SUMMARY")?;
    for g in &r.groups {
        writeln!(w, "  {}", group_sentence(g))?;
        writeln!(w, "      tids: {}", ids(&g.ids))?;
        stack::write(&g.frames, g.stack_samples, "      ", &mut w)?;
    }
    locks(r, &by_tid, &mut w)?;
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

/// Each deadlock, first thing after the header: every thread and lock in
/// the cycle.
fn deadlocks(r: &Report, by_tid: &HashMap<u64, &Thread>, w: &mut impl Write) -> io::Result<()> {
    for cycle in &r.deadlocks {
        let Some(&first) = by_tid.get(&u64::from(cycle[0])) else {
            continue;
        };
        let who: Vec<String> = cycle
            .iter()
            .filter_map(|&tid| by_tid.get(&u64::from(tid)))
            .map(|t| format!("{} ({})", t.tid, t.name))
            .collect();
        writeln!(w)?;
        writeln!(
            w,
            "DEADLOCK: {} threads wait for each other: {}",
            cycle.len(),
            who.join(", ")
        )?;
        if let Some(s) = crate::analyze::waits::chain_sentence(by_tid, first) {
            writeln!(w, "  {} ({}) waits for {s}", first.tid, first.name)?;
        }
    }
    Ok(())
}

/// Who holds the locks the threads wait for: one sentence per lock,
/// following its owner's own waits, with the waiters' tids.
fn locks(r: &Report, by_tid: &HashMap<u64, &Thread>, w: &mut impl Write) -> io::Result<()> {
    // Threads in a deadlock were shown at the top.
    let in_cycle: std::collections::HashSet<u64> = r
        .deadlocks
        .iter()
        .flatten()
        .map(|&t| u64::from(t))
        .collect();
    let mut by_lock: std::collections::BTreeMap<u64, Vec<&Thread>> = Default::default();
    for t in &r.threads {
        if let Some(l) = &t.waits_for
            && !in_cycle.contains(&t.tid)
        {
            by_lock.entry(l.lock).or_default().push(t);
        }
    }
    if by_lock.is_empty() {
        return Ok(());
    }
    // Most waiters first, then by lock address.
    let mut locks: Vec<Vec<&Thread>> = by_lock.into_values().collect();
    locks.sort_by_key(|w| std::cmp::Reverse(w.len()));
    writeln!(w)?;
    writeln!(w, "LOCKS")?;
    for waiters in &locks {
        let Some(s) = crate::analyze::waits::chain_sentence(by_tid, waiters[0]) else {
            continue;
        };
        let tids: Vec<u64> = waiters.iter().map(|t| t.tid).collect();
        let who = if waiters.len() == 1 {
            format!("{} ({})", waiters[0].tid, waiters[0].name)
        } else {
            format!("{} threads", waiters.len())
        };
        writeln!(
            w,
            "  {who} wait{} for {s}",
            if waiters.len() == 1 { "s" } else { "" }
        )?;
        if waiters.len() > 1 {
            writeln!(w, "      tids: {}", ids(&tids))?;
        }
    }
    Ok(())
}

/// A thread's id, with its id in the process's own pid namespace beside
/// it when that namespace is not ours: `4711 (ns 3)`.
fn tid_text(t: &Thread) -> String {
    match t.ns_tid {
        Some(n) if n != t.tid => format!("{} (ns {n})", t.tid),
        _ => t.tid.to_string(),
    }
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
        tid_text(t),
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
    let r = &terminal_safe(r);
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
    let r = &terminal_safe(r);
    header(r, &mut w)?;
    for t in &r.threads {
        writeln!(w)?;
        let snaps = t.snaps.map(|n| format!(", {n} snaps")).unwrap_or_default();
        let state = match t.state {
            // A dump has no kernel view: a slot not marked exited is live
            // while its process runs, and gone with it once it does not.
            ThreadState::Unknown if r.process.alive => "live",
            ThreadState::Unknown if r.process.lost.is_some() => "live or gone (unknown)",
            ThreadState::Unknown => "gone (its process is not running)",
            s => s.as_str(),
        };
        writeln!(w, "tid {} {:?} {state}{snaps}", tid_text(t), t.name)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("worker-1 ✓"), "worker-1 ✓");
        assert_eq!(escape("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
        assert_eq!(
            escape("a\nb\tc\r\x7f\u{9b}2J"),
            "a\\nb\\tc\\r\\x7f\\u{9b}2J"
        );
    }
}
