//! The tasks part of the text views: one sentence per group of tasks
//! ("812 tasks idle ≥30s — last snap src/conn.rs:120 read_frame"), then a
//! table of the tasks stuck longest, and each task's line in the history
//! view.

use std::collections::HashMap;
use std::io::{self, Write};

use super::words::{ids, location_text, plural, source_word, truncate};
use crate::{
    model::{
        Coroutine, CoroutineState, Frame, GoLabel, GoWaitKind, Group, GroupState, Origin, Report,
        Thread, WaitedOn,
    },
    util::timefmt::{duration, utc},
};

/// Rows of the task table; JSON (and `--min-idle`) have the rest.
const MAX_ROWS: usize = 100;

/// The TASKS section: groups, then the table (nothing without tasks);
/// then the GOROUTINES section.
pub(super) fn section(r: &Report, w: &mut impl Write) -> io::Result<()> {
    goroutines(r, w)?;
    asyncio(r, w)?;
    if !r.tasks.iter().any(|t| t.go.is_none() && t.python.is_none()) {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(w, "TASKS")?;
    for g in r
        .task_groups
        .iter()
        .filter(|g| !matches!(g.origin, Some(Origin::Go | Origin::Asyncio)))
    {
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

/// A section's groups, and its coroutines by id.
type RuntimeSection<'a> = (Vec<&'a Group>, HashMap<u64, &'a Coroutine>);

/// The groups of `origin`'s coroutines and its coroutines by id, after
/// the section's heading ("GOROUTINES (12, read from the Go runtime
/// without stopping it)"); `None`, and nothing written, without any.
fn runtime_section<'a>(
    r: &'a Report,
    origin: Origin,
    title: &str,
    read_from: &str,
    w: &mut impl Write,
) -> io::Result<Option<RuntimeSection<'a>>> {
    let groups: Vec<&Group> = r
        .task_groups
        .iter()
        .filter(|g| g.origin == Some(origin))
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    let n: usize = groups.iter().map(|g| g.count).sum();
    let by_id = r
        .tasks
        .iter()
        .filter(|t| t.origin == origin)
        .map(|t| (t.id, t))
        .collect();
    writeln!(w)?;
    writeln!(
        w,
        "{title} ({n}, read from {read_from} without stopping it)"
    )?;
    Ok(Some((groups, by_id)))
}

/// The GOROUTINES section, grouped as Go's own traceback groups them:
/// count, status and wait reason, how long (at least) they have waited,
/// what they wait on, the stack, and the `go` statement that made them.
fn goroutines(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let Some((groups, by_id)) = runtime_section(r, Origin::Go, "GOROUTINES", "the Go runtime", w)?
    else {
        return Ok(());
    };
    for g in groups {
        writeln!(w, "  {}", goroutine_sentence(g))?;
        for o in &g.waits_on {
            writeln!(
                w,
                "      {}",
                waited_on_words(o, g.count, g.wait.as_deref())
            )?;
        }
        writeln!(w, "      goroutines: {}", ids(&g.ids))?;
        if !g.labels.is_empty() {
            writeln!(w, "      labels: {}", labels_words(&g.labels))?;
        }
        let unread: Vec<&str> = g
            .ids
            .iter()
            .filter_map(|id| by_id.get(id)?.go.as_ref()?.labels_note.as_deref())
            .collect();
        if let Some(why) = unread.first() {
            writeln!(
                w,
                "      (labels of {} not read: {why})",
                plural(unread.len(), "goroutine", "goroutines")
            )?;
        }
        for id in g.ids.iter().take(MAX_ON_THREAD) {
            if let Some(t) = by_id.get(id).filter(|t| t.polling_tid.is_some()) {
                writeln!(w, "      goroutine {id} {}", on_thread(t, &r.threads))?;
            }
        }
        super::stack::write(&g.frames, None, "      ", w)?;
        if let Some(note) = by_id
            .get(&g.ids[0])
            .and_then(|t| t.go.as_ref()?.stack_note.as_deref())
        {
            writeln!(w, "      (stack: {note})")?;
        }
        if let Some(c) = &g.created_by {
            writeln!(w, "      created by {c}")?;
        }
    }
    Ok(())
}

/// A goroutine's pprof labels, by key: `job=resize, worker=7`.
pub(crate) fn labels_words(labels: &[GoLabel]) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|l| format!("{}={}", l.key, l.value))
        .collect();
    pairs.join(", ")
}

/// The ASYNCIO TASKS section: CPython's asyncio tasks grouped by state
/// and await chain ("3 tasks awaiting app.py:9 wait_for_order →
/// locks.py:213 Event.wait"), the futures they await, their ids, the chain
/// innermost first.
fn asyncio(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let Some((groups, by_id)) =
        runtime_section(r, Origin::Asyncio, "ASYNCIO TASKS", "the interpreter", w)?
    else {
        return Ok(());
    };
    for g in groups {
        writeln!(w, "  {}", asyncio_sentence(g))?;
        let lone = g.waits_on.iter().filter(|o| o.count == 1).count();
        if g.waits_on.len() > MAX_AWAITED && lone == g.waits_on.len() {
            writeln!(
                w,
                "      each awaits a future of its own ({} futures)",
                g.waits_on.len()
            )?;
        } else {
            for o in g.waits_on.iter().take(MAX_AWAITED) {
                writeln!(w, "      {}", waited_on_words(o, g.count, None))?;
            }
            if g.waits_on.len() > MAX_AWAITED {
                writeln!(
                    w,
                    "      … {} more futures awaited",
                    g.waits_on.len() - MAX_AWAITED
                )?;
            }
        }
        let shown: Vec<String> = g
            .ids
            .iter()
            .take(MAX_TASK_IDS)
            .map(|id| match by_id.get(id).map(|t| t.name.as_str()) {
                Some(name) if !name.is_empty() => format!("{id:#x} {name}"),
                _ => format!("{id:#x}"),
            })
            .collect();
        let more = g.ids.len().saturating_sub(MAX_TASK_IDS);
        let more = if more > 0 {
            format!(", … (+{more})")
        } else {
            String::new()
        };
        writeln!(w, "      tasks: {}{more}", shown.join(", "))?;
        for id in g.ids.iter().take(MAX_ON_THREAD) {
            if let Some(t) = by_id.get(id).filter(|t| t.polling_tid.is_some()) {
                writeln!(w, "      task {id:#x} {}", on_thread(t, &r.threads))?;
            }
        }
        super::stack::write(&g.frames, None, "      ", w)?;
    }
    Ok(())
}

/// Futures of a group of asyncio tasks listed one by one.
const MAX_AWAITED: usize = 5;
/// Task ids listed per group.
const MAX_TASK_IDS: usize = 8;

/// "3 tasks awaiting app.py:9 wait_for_order → …/locks.py:213 Event.wait"
/// (the chain outermost first, as the code reads), "1 task running …",
/// "2 tasks done", "1 task changing (read differently each time)".
pub(crate) fn asyncio_sentence(g: &Group) -> String {
    let n = plural(g.count, "task", "tasks");
    let chain: Vec<String> = g.frames.iter().rev().map(Frame::describe).collect();
    let chain = chain.join(" → ");
    match g.state {
        GroupState::Coroutine(CoroutineState::Polling) => format!("{n} running — in {chain}"),
        GroupState::Coroutine(CoroutineState::Exited) => format!("{n} done"),
        _ if g.frames.is_empty() => {
            format!("{n} pending, not awaiting (not started, or read differently each time)")
        }
        _ => format!("{n} awaiting {chain}"),
    }
}

/// Goroutines of a group whose thread is shown.
const MAX_ON_THREAD: usize = 8;

/// "on thread 4711 (sleeping in read)": the thread a running or
/// in-syscall goroutine is on, and what the kernel says of it.
fn on_thread(t: &Coroutine, threads: &[Thread]) -> String {
    let Some(tid) = t.polling_tid else {
        return String::new();
    };
    let mut s = format!("on thread {tid}");
    let tid64 = u64::from(tid);
    let from = threads.partition_point(|th| th.tid < tid64);
    if let Some(th) = threads[from..]
        .iter()
        .take_while(|th| th.tid == tid64)
        .last()
    {
        match &th.syscall {
            Some(sys) if th.state.is_blocked() => {
                s.push_str(&format!(" ({} in {})", th.state.as_str(), sys.text))
            }
            _ => s.push_str(&format!(" ({})", th.state.as_str())),
        }
    }
    s
}

/// "7 goroutines waiting (chan receive) ≥1m30s, longest 2m — main.receiver
/// goroutines.go:29".
pub(crate) fn goroutine_sentence(g: &Group) -> String {
    let mut s = format!(
        "{} {}",
        plural(g.count, "goroutine", "goroutines"),
        g.state.as_str()
    );
    if let Some(why) = &g.wait {
        s.push_str(&format!(" ({why})"));
    }
    match (g.min_ns, g.max_ns) {
        (Some(min), Some(max)) if max > min => {
            s.push_str(&format!(" ≥{}, longest ≥{}", duration(min), duration(max)))
        }
        (Some(min), _) => s.push_str(&format!(" ≥{}", duration(min))),
        _ => {}
    }
    if let Some(loc) = &g.location {
        s.push_str(&format!(" — in {}", loc.describe()));
    }
    s
}

/// "on channel 0xc000012345 (7 of them)", "on semaphore 0x5f8a10 (main.mu)
/// (3 of them): sync.Mutex records no owner".
fn waited_on_words(o: &WaitedOn, of: usize, wait: Option<&str>) -> String {
    let what = match o.object.kind {
        GoWaitKind::Channel if o.object.addrs.len() > 1 => "channels",
        GoWaitKind::Channel => "channel",
        GoWaitKind::Semaphore => "semaphore",
        GoWaitKind::Cond => "sync.Cond",
        GoWaitKind::Future => "future",
        GoWaitKind::Task => "task",
    };
    let addrs: Vec<String> = o.object.addrs.iter().map(|a| format!("{a:#x}")).collect();
    let mut s = format!("on {what} {}", addrs.join(", "));
    if let Some(n) = &o.object.name {
        s.push_str(&format!(" ({n})"));
    }
    if o.count == of {
        s.push_str(if of == 1 { "" } else { " (all of them)" });
    } else {
        s.push_str(&format!(" ({} of them)", o.count));
    }
    if o.object.kind == GoWaitKind::Semaphore {
        s.push_str(": Go's sync primitives record no owner");
    }
    if let (Some(p), Some(why)) = (&o.channel_peers, wait) {
        let other = if why.starts_with("chan send") {
            "receive"
        } else {
            "send"
        };
        match (p.other_side, p.in_select) {
            (0, 0) => s.push_str(&format!(
                "; no goroutine waits to {other} on it (of those read: code not running now \
                 may still {other})"
            )),
            (0, n) => s.push_str(&format!(
                "; no goroutine waits to {other} on it, {} in a select with a case on it",
                plural(n, "goroutine", "goroutines")
            )),
            (n, _) => s.push_str(&format!(
                "; {} to {other} on it",
                plural(n, "goroutine waits", "goroutines wait")
            )),
        }
    }
    s
}

/// One row per task, polling ones first, then the longest idle.
fn table(r: &Report, w: &mut impl Write) -> io::Result<()> {
    let mut rows: Vec<&Coroutine> = r
        .tasks
        .iter()
        .filter(|t| t.go.is_none() && t.python.is_none())
        .collect();
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
