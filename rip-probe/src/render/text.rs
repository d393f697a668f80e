//! Text views: the live report (summary, tasks, then thread table), the
//! grouped dump view, and per-thread history. The tasks part is in
//! [`super::tasks`].

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
    io::{self, Write},
    sync::Arc,
};

use super::{
    stack, tasks,
    words::{doing, ids, location_text, plural, source_word, truncate},
};
use crate::{
    model::{
        Frame, GoLabel, Group, GroupState, Location, LockChange, LockKind, Mode, Owner, Report,
        RuntimeWait, Thread, ThreadState, WaitsFor, rewrite_shared,
    },
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
    for s in [&mut g.wait, &mut g.created_by].into_iter().flatten() {
        escape_in_place(s);
    }
    if !g.labels.is_empty() {
        g.labels = g
            .labels
            .iter()
            .map(|l| GoLabel {
                key: escape(&l.key),
                value: escape(&l.value),
            })
            .collect();
    }
    if let Some(f) = &mut g.location {
        escape_frame(f);
    }
}

/// Whether `s` holds a control character [`escape`] would escape.
fn unsafe_str(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn unsafe_frame(f: &Frame) -> bool {
    [&f.function, &f.file, &f.module, &f.label]
        .into_iter()
        .flatten()
        .any(|s| unsafe_str(s))
        || f.inlined
            .iter()
            .any(|i| unsafe_str(&i.function) || i.file.as_deref().is_some_and(unsafe_str))
}

fn unsafe_locations(last: &Option<Location>, hist: &[Location]) -> bool {
    last.iter().chain(hist).any(|l| unsafe_frame(&l.frame))
}

fn unsafe_group(g: &Group) -> bool {
    [&g.wait, &g.created_by]
        .into_iter()
        .flatten()
        .any(|s| unsafe_str(s))
        || g.labels
            .iter()
            .any(|l| unsafe_str(&l.key) || unsafe_str(&l.value))
        || g.location.as_ref().is_some_and(unsafe_frame)
}

/// Whether every string [`terminal_safe`] escapes is already safe: the
/// same strings, only looked at (each shared stack once). A report of
/// 100,000 goroutines then needs no copy.
fn already_safe(r: &Report) -> bool {
    let p = &r.process;
    let mut seen: HashSet<*const Frame> = HashSet::new();
    let mut stack_safe = |s: &Arc<[Frame]>| !seen.insert(s.as_ptr()) || !s.iter().any(unsafe_frame);
    let process = [&p.exe, &p.comm, &p.lost, &p.title]
        .into_iter()
        .flatten()
        .all(|s| !unsafe_str(s));
    let rings = r
        .rings
        .iter()
        .all(|g| !unsafe_str(&g.path) && !g.namespace.as_deref().is_some_and(unsafe_str));
    let warnings = !r.warnings.iter().any(|w| unsafe_str(w));
    let stacks = r
        .threads
        .iter()
        .flat_map(|t| [&t.kernel_stack, &t.frames])
        .chain(r.groups.iter().map(|g| &g.frames))
        .chain(r.task_groups.iter().map(|g| &g.frames))
        .all(&mut stack_safe);
    let threads = r.threads.iter().all(|t| {
        !unsafe_str(&t.name)
            && !t.syscall.as_ref().is_some_and(|sys| {
                unsafe_str(&sys.name)
                    || unsafe_str(&sys.text)
                    || sys.args.iter().any(|a| unsafe_str(&a.text))
            })
            && !unsafe_locations(&t.location, &t.history)
            && !t.waits_for.as_ref().is_some_and(|w| {
                w.symbol.as_deref().is_some_and(unsafe_str)
                    || match &w.owner {
                        crate::model::Owner::Unknown { reason }
                        | crate::model::Owner::NotRecorded { reason } => unsafe_str(reason),
                        _ => false,
                    }
            })
    });
    let tasks = r
        .tasks
        .iter()
        .all(|t| !unsafe_str(&t.name) && !unsafe_locations(&t.location, &t.history));
    let groups = !r.groups.iter().chain(&r.task_groups).any(unsafe_group);
    process && rings && warnings && stacks && threads && tasks && groups
}

/// The text views' one boundary with the outside: the report with every
/// string that came from the target, its ring, its binaries or /proc
/// escaped (see [`escape`]): itself when none needs it (the usual case,
/// checked without a copy), else a copy. JSON renders the report as it
/// is.
fn terminal_safe(r: &Report) -> Cow<'_, Report> {
    if already_safe(r) {
        return Cow::Borrowed(r);
    }
    Cow::Owned(escaped(r))
}

/// A copy of `r` with every string [`terminal_safe`] escapes escaped.
fn escaped(r: &Report) -> Report {
    let mut r = r.clone();
    let p = &mut r.process;
    for s in [&mut p.exe, &mut p.comm, &mut p.lost, &mut p.title]
        .into_iter()
        .flatten()
    {
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
            .chain(r.groups.iter_mut().map(|g| &mut g.frames))
            .chain(r.task_groups.iter_mut().map(|g| &mut g.frames)),
        escape_frame,
    );
    for t in &mut r.threads {
        escape_in_place(&mut t.name);
        // A call shared by many threads is copied only when it needs
        // escaping.
        if let Some(sys) = t.syscall.as_mut().filter(|s| {
            std::iter::once(&s.name)
                .chain([&s.text])
                .chain(s.args.iter().map(|a| &a.text))
                .any(|x| x.chars().any(char::is_control))
        }) {
            let sys = std::sync::Arc::make_mut(sys);
            escape_in_place(&mut sys.name);
            escape_in_place(&mut sys.text);
            for a in &mut sys.args {
                escape_in_place(&mut a.text);
            }
        }
        escape_locations(&mut t.location, &mut t.history);
        if let Some(w) = &mut t.waits_for {
            if let Some(s) = &mut w.symbol {
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
    // The title tells apart the processes of one program (a checkpointer
    // from a backend): shown when it says more than the executable.
    if let Some(t) = p.title.as_ref().filter(|t| Some(*t) != p.exe.as_ref()) {
        line.push_str(&format!(" \"{t}\""));
    }
    line.push_str(&format!(
        ": {}",
        plural(r.threads.len(), "thread", "threads")
    ));
    if !r.tasks.is_empty() {
        line.push_str(&format!(", {}", plural(r.tasks.len(), "task", "tasks")));
    }
    if r.mode == Mode::Pid && r.window_ns == 0 {
        // Nothing was recorded before the task iterator read the threads.
        line.push_str(", snapshot (no window)");
    } else if r.mode == Mode::Pid {
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
    if let Some(py) = &r.python {
        let gil = match (py.gil.as_str(), py.gil_holder) {
            ("held", Some(tid)) if py.gc_thread == Some(tid) => format!(
                "the GIL is held by tid {tid}, which runs the cyclic GC (collecting at both reads, \
                 the GIL held throughout)"
            ),
            ("held", Some(tid)) => format!("the GIL is held by tid {tid}"),
            ("free", _) => "the GIL is free".to_string(),
            _ => "the GIL is changing hands (two reads differ): no holder claimed".to_string(),
        };
        let gil = gil
            + match (py.gc.as_str(), py.gc_thread) {
                ("running", None) => {
                    "; the cyclic GC is collecting (at both reads), on no thread claimed: the GIL \
                     changed hands or its holder's frames moved between the reads"
                }
                ("changing", _) => {
                    "; the cyclic GC's two reads differ (or one failed): it is not claimed running"
                }
                _ => "",
            };
        let waiters = match py.gil_waiters.len() {
            0 => String::new(),
            n => format!(
                "; {n} thread{} wait{} for it (tids {})",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" },
                py.gil_waiters
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        };
        let gil = gil + &waiters;
        writeln!(
            w,
            "python {}: threads and frames read from the interpreter; {gil}",
            py.version
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
    // A bound of 0 says nothing (a thread seen going to sleep this very
    // moment, or one whose clocks gave no bound that holds): no time.
    let at_least = g.lower_bound || g.count > 1;
    if let Some(ns) = g.min_ns.filter(|&ns| ns > 0 || !at_least) {
        s.push_str(&format!(" for {}", blocked_text(ns, at_least)));
    }
    if let Some(loc) = g.location.as_ref().map(Frame::describe) {
        if g.state == GroupState::Thread(ThreadState::Unknown) {
            s.push_str(&format!(" at {loc}"));
        } else {
            s.push_str(&format!(" — {} {loc}", source_word(g.source)));
        }
    }
    s
}

/// The live report: header, deadlocks, grouped summary, locks, tasks,
/// then one row per thread.
pub fn live(r: &Report, w: &mut dyn Write) -> io::Result<()> {
    live_cut(r, None, w)
}

/// [`live`] with the thread table cut after `max_rows` rows (`None`: every
/// thread). What comes before the table — deadlocks, the summary of every
/// group, locks — is whole: at 100,000 threads it says what they do in a
/// screenful, and the line that ends a cut table says how to see the rest.
pub fn live_cut(r: &Report, max_rows: Option<usize>, mut w: &mut dyn Write) -> io::Result<()> {
    let safe = terminal_safe(r);
    let r = &*safe;
    header(r, &mut w)?;
    let by_tid = by_tid(r);
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
    let shown = max_rows.unwrap_or(usize::MAX).min(r.threads.len());
    for t in &r.threads[..shown] {
        thread_row(t, &mut w)?;
    }
    let hidden = r.threads.len() - shown;
    if hidden > 0 {
        writeln!(
            w,
            "  … {} not shown (the summary above counts them): --all lists every thread, --json has them all",
            plural(hidden, "more thread", "more threads")
        )?;
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
        if cycle.len() == 1 {
            writeln!(w, "DEADLOCK: 1 thread waits for itself: {}", who.join(""))?;
        } else {
            writeln!(
                w,
                "DEADLOCK: {} threads wait for each other: {}",
                cycle.len(),
                who.join(", ")
            )?;
        }
        if let Some(s) = chain_sentence(by_tid, first) {
            writeln!(w, "  {} ({}) waits for {s}", first.tid, first.name)?;
        }
    }
    Ok(())
}

/// Condition variables in anonymous memory with one waiter each listed one
/// per line, up to this many; more are one line (a JVM parks each thread
/// on its own).
const SINGLE_CONDVARS: usize = 3;

/// Who holds the locks the threads wait for: one sentence per lock,
/// following its owner's own waits, with the waiters' tids. Then the
/// idle waits, which are no contention: one line per condition variable
/// with its waiter count (those with one waiter each folded into one line
/// past [`SINGLE_CONDVARS`]), one line per kind of parked thread.
fn locks(r: &Report, by_tid: &HashMap<u64, &Thread>, w: &mut impl Write) -> io::Result<()> {
    // Threads in a deadlock were shown at the top.
    let in_cycle: std::collections::HashSet<u64> = r
        .deadlocks
        .iter()
        .flatten()
        .map(|&t| u64::from(t))
        .collect();
    // One line per lock and sentence: waiters of one lock may be judged
    // apart (one still waits, another's wait ended while it was read).
    let mut by_lock: std::collections::BTreeMap<(u64, String), Vec<&Thread>> = Default::default();
    let mut by_condvar: std::collections::BTreeMap<u64, Vec<&Thread>> = Default::default();
    let mut parked: std::collections::BTreeMap<String, Vec<&Thread>> = Default::default();
    // A runtime's locks, by the runtime's wait, then by lock.
    type ByLock<'a> = std::collections::BTreeMap<u64, Vec<&'a Thread>>;
    let mut runtime: std::collections::BTreeMap<&'static str, ByLock> = Default::default();
    for t in &r.threads {
        let Some(l) = &t.waits_for else { continue };
        if in_cycle.contains(&t.tid) {
            continue;
        }
        match (l.kind, l.runtime) {
            (LockKind::Condvar, _) => by_condvar.entry(l.lock).or_default().push(t),
            (LockKind::Runtime, Some(rt)) => runtime
                .entry(runtime_words(rt))
                .or_default()
                .entry(l.lock)
                .or_default()
                .push(t),
            (LockKind::Parked, Some(rt)) => parked
                .entry(runtime_words(rt).to_string())
                .or_default()
                .push(t),
            _ => {
                if let Some(s) = chain_sentence(by_tid, t) {
                    by_lock.entry((l.lock, s)).or_default().push(t);
                }
            }
        }
    }
    // Past a few, a runtime's locks with one waiter each are one line (a
    // CPython program's Condition waiters each wait on a lock of its own).
    let mut singles: Vec<(&str, Vec<&Thread>)> = Vec::new();
    for (what, locks) in runtime {
        let mut ones: Vec<&Thread> = locks
            .values()
            .filter(|w| w.len() == 1)
            .map(|w| w[0])
            .collect();
        ones.sort_by_key(|t| t.tid);
        let fold = ones.len() > SINGLE_CONDVARS;
        for waiters in locks.into_values().filter(|w| !fold || w.len() > 1) {
            for t in waiters {
                if let Some(s) = chain_sentence(by_tid, t) {
                    by_lock
                        .entry((t.waits_for.as_ref().map_or(0, |l| l.lock), s))
                        .or_default()
                        .push(t);
                }
            }
        }
        if fold {
            singles.push((what, ones));
        }
    }
    if !by_lock.is_empty() || !singles.is_empty() {
        // Most waiters first, then by lock address.
        let mut locks: Vec<((u64, String), Vec<&Thread>)> = by_lock.into_iter().collect();
        locks.sort_by_key(|(_, w)| std::cmp::Reverse(w.len()));
        writeln!(w)?;
        writeln!(w, "LOCKS")?;
        for ((_, s), waiters) in &locks {
            writeln!(w, "  {} for {s}", waiters_words(waiters))?;
            tids_line(waiters, w)?;
        }
        for (what, waiters) in &singles {
            writeln!(
                w,
                "  {} threads wait, each on a lock of its own: {what}, which records no owner",
                waiters.len()
            )?;
            tids_line(waiters, w)?;
        }
    }
    if by_condvar.is_empty() && parked.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(
        w,
        "IDLE WAITS (waiting to be signalled or unparked, not for a lock)"
    )?;
    let mut condvars: Vec<(u64, Vec<&Thread>)> = by_condvar.into_iter().collect();
    condvars.sort_by_key(|(_, w)| std::cmp::Reverse(w.len()));
    // Only those named by their memory (`heap 0x…`) fold: a global one's
    // name says which it is.
    let anonymous = |w: &[&Thread]| {
        w.len() == 1
            && w[0]
                .waits_for
                .as_ref()
                .and_then(|l| l.symbol.as_deref())
                .is_none_or(|s| s.starts_with("heap ") || s.starts_with("stack "))
    };
    let singles = condvars.iter().filter(|(_, w)| anonymous(w)).count();
    let fold = singles > SINGLE_CONDVARS;
    for (_, waiters) in condvars.iter().filter(|(_, w)| !fold || !anonymous(w)) {
        let Some(l) = waiters[0].waits_for.as_ref() else {
            continue;
        };
        writeln!(w, "  {} on {}", waiters_words(waiters), lock_words(l))?;
        tids_line(waiters, w)?;
    }
    if fold {
        let mut waiters: Vec<&Thread> = condvars
            .iter()
            .filter(|(_, w)| anonymous(w))
            .map(|(_, w)| w[0])
            .collect();
        waiters.sort_by_key(|t| t.tid);
        writeln!(
            w,
            "  {singles} threads wait, each on a condition variable of its own"
        )?;
        tids_line(&waiters, w)?;
    }
    for (what, waiters) in &parked {
        let who = match waiters.as_slice() {
            [one] => format!("{} ({})", one.tid, one.name),
            _ => format!("{} threads", waiters.len()),
        };
        writeln!(w, "  {who}: {what}")?;
        tids_line(waiters, w)?;
    }
    Ok(())
}

/// `12 (worker-2) waits`, `3 threads wait`.
fn waiters_words(waiters: &[&Thread]) -> String {
    match waiters {
        [one] => format!("{} ({}) waits", one.tid, one.name),
        _ => format!("{} threads wait", waiters.len()),
    }
}

/// The waiters' tids, when there are several.
fn tids_line(waiters: &[&Thread], w: &mut impl Write) -> io::Result<()> {
    if waiters.len() > 1 {
        let tids: Vec<u64> = waiters.iter().map(|t| t.tid).collect();
        writeln!(w, "      tids: {}", ids(&tids))?;
    }
    Ok(())
}

/// The report's threads by id, for [`chain_sentence`].
pub fn by_tid(report: &Report) -> HashMap<u64, &Thread> {
    report.threads.iter().map(|t| (t.tid, t)).collect()
}

/// One sentence for a lock's chain of waits, from the waiter's lock on:
/// `mutex g_a held by 12 (worker-2), which waits for mutex g_b held by 13
/// (worker-3), sleeping in read(…) for ≥4.1s`; a join is `thread 13
/// (worker-3) to exit`. A chain that comes back to a thread already in it
/// ends with `… held by 12 (worker-2): deadlock`.
/// `by_tid` is [`by_tid`] of the report: built once for all sentences.
pub fn chain_sentence(by_tid: &HashMap<u64, &Thread>, start: &Thread) -> Option<String> {
    let mut out = String::new();
    let mut seen = std::collections::BTreeSet::from([start.tid]);
    let mut at = start;
    loop {
        let w = at.waits_for.as_ref()?;
        if at.tid != start.tid {
            out.push_str(", which waits for ");
        }
        let owner = w.owner_tid.and_then(|o| by_tid.get(&u64::from(o)).copied());
        let Some(owner) = owner else {
            out.push_str(&lock_words(w));
            out.push_str(&format!(": {}", owner_words(&w.owner)));
            return Some(out);
        };
        if w.kind == LockKind::ThreadExit {
            // A join: the thread it waits for is what it waits on.
            out.push_str(&format!("thread {} ({}) to exit", owner.tid, owner.name));
        } else if owner.tid == at.tid {
            // Confirmed by analyze: only a normal mutex blocks a relock.
            out.push_str(&lock_words(w));
            out.push_str(
                " that it holds itself: a relock of a normal mutex waits forever (an error-checking \
                 mutex would have returned EDEADLK): deadlock",
            );
            return Some(out);
        } else {
            out.push_str(&lock_words(w));
            out.push_str(&format!(" held by {} ({})", owner.tid, owner.name));
        }
        if !seen.insert(owner.tid) {
            out.push_str(": deadlock");
            return Some(out);
        }
        if owner.waits_for.is_none() {
            out.push_str(&format!(", {}", doing(owner)));
            return Some(out);
        }
        at = owner;
    }
}

/// `mutex g_table_lock`, `rwlock heap 0x…`, `Go runtime: idle M … (futex
/// heap 0x…)`.
fn lock_words(w: &WaitsFor) -> String {
    let name = w.symbol.clone().unwrap_or_else(|| format!("{:#x}", w.lock));
    match w.runtime {
        // A CPython waiter whose `threading` object was found is named by
        // it (`threading.RLock rlock at 0x…`), not by its futex.
        Some(RuntimeWait::PythonLock) if w.lock != w.futex => name,
        Some(rt) => format!("{} (futex {name})", runtime_words(rt)),
        None => format!("{} {name}", w.kind.as_str()),
    }
}

/// What a wait inside a language runtime is.
pub(crate) fn runtime_words(rt: RuntimeWait) -> &'static str {
    match rt {
        RuntimeWait::GoIdleM => "Go runtime: idle M (no goroutine to run), parked on its note",
        RuntimeWait::GoTimedNote => "Go runtime: M asleep on a note with a timeout",
        RuntimeWait::GoNote => "Go runtime: M asleep on a note",
        RuntimeWait::GoRuntimeLock => "Go runtime: runtime-internal lock",
        RuntimeWait::GoFutex => "Go runtime: futex sleep",
        RuntimeWait::RustPark => "Rust thread::park: parked until unparked",
        RuntimeWait::PythonLock => "CPython threading lock (or Condition.wait)",
        RuntimeWait::JavaPark => "Java LockSupport.park: parked until unparked",
    }
}

/// Why no owner is named.
fn owner_words(o: &Owner) -> String {
    match o {
        Owner::Thread { tid } => format!("held by {tid}"),
        Owner::OtherProcess { tid, pid } => format!("held by thread {tid} of process {pid}"),
        Owner::Exited { tid, robust: true } => {
            format!("its owner {tid} exited (robust mutex: the next locker gets EOWNERDEAD)")
        }
        Owner::Exited { tid, robust: false } => {
            format!("its owner {tid} exited without unlocking it")
        }
        Owner::Readers { count } => {
            format!("held by {count} reader(s), which an rwlock does not record")
        }
        Owner::NotRecorded { reason } => reason.clone(),
        Owner::Changing { cause } => format!(
            "unconfirmed, lock changing hands ({})",
            match cause {
                LockChange::ReadsDisagree => "two reads a moment apart named different owners",
                LockChange::WaitEnded => "the wait ended while it was read",
                LockChange::OwnerWaitsForIt =>
                    "the owner read was itself queued for the lock: it had released it",
                LockChange::CycleGone =>
                    "a cycle of waits seen once was gone a few milliseconds later",
            }
        ),
        Owner::Unknown { reason } => format!("owner unknown: {reason}"),
    }
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
    if let Some(py) = &t.python {
        python_line(py, w)?;
    }
    Ok(())
}

/// A Python thread's line under its row: whether it holds the GIL, and
/// its Python frames when they are not in its stack (why not, then).
fn python_line(py: &crate::model::PythonThread, w: &mut impl Write) -> io::Result<()> {
    let gil = match (&py.gil_wait, py.holds_gil) {
        (_, true) if py.runs_gc => " [holds the GIL, runs the cyclic GC]".to_string(),
        (_, true) => " [holds the GIL]".to_string(),
        (Some(why), _) => format!(" [waits for the GIL: {why}]"),
        _ => String::new(),
    };
    if py.merged && gil.is_empty() {
        return Ok(());
    }
    let frames: Vec<String> = if py.merged {
        Vec::new()
    } else {
        py.frames
            .iter()
            .map(|f| {
                let name = f.function.as_deref().unwrap_or("??");
                match (&f.file, f.line) {
                    (Some(file), Some(line)) => {
                        format!("{name} ({}:{line})", crate::model::short_path(file))
                    }
                    _ => name.to_string(),
                }
            })
            .collect()
    };
    let note = py
        .note
        .as_ref()
        .map(|n| format!(" — not in the stack above: {n}"))
        .unwrap_or_default();
    let frames = frames.join(" ← ");
    // A line that says only the GIL ends there (no space for frames it
    // does not have).
    let sep = if frames.is_empty() { "" } else { " " };
    writeln!(w, "  {:<8} python:{gil}{sep}{frames}{note}", "")
}

/// The grouped dump view (like the original `read_rip`): each location
/// with how many threads were last seen there and their tids, most
/// populated first; then tasks the same way.
pub fn grouped(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    let safe = terminal_safe(r);
    let r = &*safe;
    header(r, &mut w)?;
    writeln!(w)?;
    writeln!(w, "{:>7}  LOCATION (threads last seen there)", "THREADS")?;
    for g in &r.groups {
        let loc = g.location.as_ref().map(Frame::describe);
        let loc = loc.as_deref().unwrap_or("(no snap yet)");
        let state = if g.state.as_str() == "exited" {
            " [exited]"
        } else {
            ""
        };
        writeln!(w, "{:>7}  {loc}{state}", g.count)?;
        writeln!(w, "         tids: {}", ids(&g.ids))?;
    }
    tasks::section(r, &mut w)
}

/// Per-thread (and per-task) history, oldest to newest, with counters.
pub fn history(r: &Report, mut w: &mut dyn Write) -> io::Result<()> {
    let safe = terminal_safe(r);
    let r = &*safe;
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

    /// A report that needs no escaping is not copied; one string that
    /// needs it, wherever the escaping looks, makes a copy in which it is
    /// escaped.
    #[test]
    fn only_a_report_with_a_control_character_is_copied() {
        use crate::model::{
            Coroutine, CoroutineState, GroupState, Origin, ProcessInfo, StackTable, Syscall,
            SyscallArg,
        };
        let frame = |name: &str| Frame {
            addr: 1,
            function: Some(name.into()),
            file: Some("f.c".into()),
            ..Frame::default()
        };
        let stack: Arc<[Frame]> = vec![frame("main")].into();
        let mut thread = Thread::new(7, "w".into(), "comm", ThreadState::Sleeping);
        thread.frames = stack.clone();
        thread.kernel_stack = stack.clone();
        thread.syscall = Some(Arc::new(Syscall {
            nr: 0,
            name: "read".into(),
            args: vec![SyscallArg {
                name: "fd",
                raw: 3,
                text: "3".into(),
            }],
            text: "read(3)".into(),
        }));
        let group = Group {
            origin: None,
            count: 1,
            ids: vec![7],
            state: GroupState::Thread(ThreadState::Sleeping),
            wait: Some("w".into()),
            min_ns: None,
            lower_bound: false,
            location: Some(frame("main")),
            source: None,
            frames: stack.clone(),
            stack_samples: None,
            max_ns: None,
            created_by: Some("c".into()),
            waits_on: Vec::new(),
            labels: vec![GoLabel {
                key: "k".into(),
                value: "v".into(),
            }]
            .into(),
        };
        let task = Coroutine {
            origin: Origin::Asyncio,
            id: 1,
            generation: 0,
            name: "t".into(),
            state: CoroutineState::Idle,
            polling_tid: None,
            polls: 0,
            idle_ns: None,
            polling_ns: None,
            lower_bound: false,
            since_unix_ns: None,
            created_unix_ns: None,
            location: Some(Location {
                source: crate::model::LocationSource::Python,
                seq: None,
                ago_ns: None,
                frame: frame("wait"),
            }),
            history: Vec::new(),
            go: None,
            python: None,
        };
        let clean = Report {
            schema: crate::model::SCHEMA_VERSION,
            mode: Mode::Pid,
            process: ProcessInfo {
                exe: Some("/bin/x".into()),
                comm: Some("x".into()),
                ..ProcessInfo::default()
            },
            rings: Vec::new(),
            window_ns: 0,
            stacks: StackTable,
            threads: vec![thread],
            tasks: vec![task],
            groups: vec![group.clone()],
            task_groups: vec![group],
            warnings: vec!["w".into()],
            deadlocks: Vec::new(),
            python: None,
        };
        assert!(matches!(terminal_safe(&clean), Cow::Borrowed(_)));
        const BAD: &str = "\x1b[2J";
        type Dirty<'a> = Box<dyn Fn(&mut Report) + 'a>;
        let dirty: Vec<Dirty<'_>> = vec![
            Box::new(|r| r.process.exe = Some(BAD.to_string())),
            Box::new(|r| r.process.comm = Some(BAD.to_string())),
            Box::new(|r| r.warnings.push(BAD.to_string())),
            Box::new(|r| r.threads[0].name = BAD.to_string()),
            Box::new(|r| {
                Arc::make_mut(r.threads[0].syscall.as_mut().unwrap()).text = BAD.to_string()
            }),
            Box::new(|r| {
                Arc::make_mut(r.threads[0].syscall.as_mut().unwrap()).args[0].text = BAD.to_string()
            }),
            Box::new(|r| r.threads[0].kernel_stack = vec![frame(BAD)].into()),
            Box::new(|r| r.threads[0].frames = vec![frame(BAD)].into()),
            Box::new(|r| r.tasks[0].name = BAD.to_string()),
            Box::new(|r| r.tasks[0].location.as_mut().unwrap().frame.file = Some(BAD.to_string())),
            Box::new(|r| r.groups[0].wait = Some(BAD.to_string())),
            Box::new(|r| r.task_groups[0].created_by = Some(BAD.to_string())),
            Box::new(|r| {
                r.task_groups[0].labels = vec![GoLabel {
                    key: "k".into(),
                    value: BAD.to_string(),
                }]
                .into()
            }),
            Box::new(|r| r.task_groups[0].frames = vec![frame(BAD)].into()),
        ];
        for (i, make) in dirty.iter().enumerate() {
            let mut r = clean.clone();
            make(&mut r);
            let safe = terminal_safe(&r);
            assert!(matches!(safe, Cow::Owned(_)), "case {i}");
            let mut text = Vec::new();
            serde_json::to_writer(&mut text, &*safe).unwrap();
            let text = String::from_utf8(text).unwrap();
            assert!(!text.contains("\\u001b"), "case {i}: {text}");
        }
    }

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
