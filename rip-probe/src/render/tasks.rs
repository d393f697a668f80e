//! The tasks part of the text views: one sentence per group of tasks
//! ("812 tasks idle ≥30s — last snap src/conn.rs:120 read_frame"), then a
//! table of the tasks stuck longest, and each task's line in the history
//! view.

use std::io::{self, Write};

use super::words::{ids, location_text, plural, source_word, truncate};
use crate::{
    model::{Coroutine, CoroutineState, Frame, Group, Report, Thread},
    util::timefmt::{duration, utc},
};

/// Rows of the task table; JSON (and `--min-idle`) have the rest.
const MAX_ROWS: usize = 100;

/// The TASKS section: groups, then the table (nothing without tasks).
pub(super) fn section(r: &Report, w: &mut impl Write) -> io::Result<()> {
    if r.tasks.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(w, "TASKS")?;
    for g in &r.task_groups {
        writeln!(w, "  {}", group_sentence(g))?;
        writeln!(w, "      ids: {}", ids(&g.ids))?;
    }
    table(r, w)
}

/// A group of tasks as one sentence, e.g. "812 tasks idle ≥30s — last
/// snap src/conn.rs:120 read_frame" (≥: the shortest of several, or a
/// post-mortem lower bound).
pub(crate) fn group_sentence(g: &Group) -> String {
    let mut s = format!("{} {}", plural(g.count, "task", "tasks"), g.state.as_str());
    // A zero lower bound says nothing.
    if let Some(ns) = g.min_ns.filter(|&ns| ns > 0 || !g.lower_bound) {
        if g.count > 1 || g.lower_bound {
            s.push_str(&format!(" ≥{}", duration(ns)));
        } else {
            s.push_str(&format!(" for {}", duration(ns)));
        }
    }
    match g.location.as_ref().map(Frame::describe) {
        Some(loc) => s.push_str(&format!(" — {} {loc}", source_word(g.source))),
        None => s.push_str(" — no snap yet"),
    }
    s
}

/// One row per task, polling ones first, then the longest idle.
fn table(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let mut rows: Vec<&Coroutine> = r.tasks.iter().collect();
    rows.sort_by_key(|t| {
        let stuck = t.polling_ns.or(t.idle_ns).unwrap_or(0);
        (t.state, std::cmp::Reverse(stuck), t.id)
    });
    writeln!(w)?;
    writeln!(
        w,
        "  {:<8} {:<20} {:<46} {:>9} {:>7}  LOCATION",
        "ID", "NAME", "STATE", "FOR", "POLLS"
    )?;
    for t in rows.iter().take(MAX_ROWS) {
        writeln!(
            w,
            "  {:<8} {:<20} {:<46} {:>9} {:>7}  {}",
            t.id,
            truncate(&t.name, 20),
            truncate(&state(t, &r.threads), 46),
            for_text(t),
            t.polls,
            location_text(&t.location)
        )?;
    }
    let more = rows.len().saturating_sub(MAX_ROWS);
    if more > 0 {
        let what = if more == 1 { "task" } else { "tasks" };
        writeln!(
            w,
            "  … {more} more {what} (all in --json; --min-idle DUR lists the longest idle)"
        )?;
    }
    Ok(())
}

/// "polling on thread T" (with the syscall the thread is blocked in, when
/// the kernel says it is), "idle since <UTC time>", or "exited".
pub(super) fn state(t: &Coroutine, threads: &[Thread]) -> String {
    match t.state {
        CoroutineState::Polling => {
            let Some(tid) = t.polling_tid else {
                return "polling".into();
            };
            let mut s = format!("polling on thread {tid}");
            // Threads are sorted by tid (a dump may hold a tid twice: an
            // exited slot and a live one): search, do not scan per task.
            let tid64 = u64::from(tid);
            let from = threads.partition_point(|th| th.tid < tid64);
            if let Some(th) = threads[from..]
                .iter()
                .take_while(|th| th.tid == tid64)
                .find(|th| th.state.is_blocked())
            {
                match &th.syscall {
                    Some(sys) => s.push_str(&format!(" (in {})", sys.name)),
                    None => s.push_str(&format!(" ({})", th.state.as_str())),
                }
            }
            s
        }
        CoroutineState::Idle => match t.since_unix_ns {
            Some(ns) => format!("idle since {}", utc(ns)),
            None => "idle".into(),
        },
        CoroutineState::Exited => "exited".into(),
    }
}

/// How long the task has been in its state: since its last poll (idle)
/// or since its current poll started (polling); `≥` post-mortem.
pub(super) fn for_text(t: &Coroutine) -> String {
    match t.idle_ns.or(t.polling_ns) {
        Some(0) if t.lower_bound => "-".into(),
        Some(ns) if t.lower_bound => format!("≥{}", duration(ns)),
        Some(ns) => duration(ns),
        None => "-".into(),
    }
}
