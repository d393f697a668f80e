//! Threads grouped by (state, wait reason, location, user stack). The
//! keys are typed: a [`ThreadState`], a [`Wait`] (a futex wait kind, a
//! syscall number or a kernel function), a [`Place`] (source line,
//! function, module and offset, or address) and a [`StackKey`] (the
//! stack's addresses), so two places that happen to print alike stay two
//! groups, and the rendered words are made once per group.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
};

use crate::model::{Frame, Group, GroupState, StackSamples, Thread, ThreadState};

/// What a group of threads waits in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Wait {
    /// futex(2), by operation (waits, PI locks, requeue waits and others).
    Futex(&'static str),
    /// Another syscall, by number.
    Syscall(i64),
    /// No syscall: the innermost kernel function.
    Kernel(String),
}

impl Wait {
    /// The wait reason of a thread: the syscall (futex split by
    /// wait/lock/wake), else the innermost kernel function.
    pub(crate) fn of(t: &Thread) -> Option<Wait> {
        if let Some(s) = &t.syscall {
            if s.name == "futex"
                && let Some(op) = s.args.get(1)
            {
                return Some(Wait::Futex(futex_wait_name(op.raw as u32)));
            }
            return Some(Wait::Syscall(s.nr));
        }
        t.kernel_stack
            .first()
            .and_then(|f| f.function.clone())
            .map(Wait::Kernel)
    }
}

/// What a futex(2) caller waits for, by operation: the plain and bitset
/// waits are both `futex_wait`.
fn futex_wait_name(op: u32) -> &'static str {
    match op & 0x7f {
        0 | 9 => "futex_wait",
        6 | 8 | 13 => "futex_lock_pi",
        11 => "futex_wait_requeue_pi",
        _ => "futex",
    }
}

/// Where members are, as an identity: what [`Frame::describe`] is made
/// from, before it is shortened to text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Place {
    /// A source position: from DWARF, or a snap's site table (which gives
    /// the column and label too, and may name no function).
    Line {
        /// Source file (full path).
        file: String,
        /// Line.
        line: u32,
        /// Column (site tables of Rust snaps).
        column: Option<u32>,
        /// Function.
        function: Option<String>,
        /// The snap's label.
        label: Option<String>,
    },
    /// A function without line information, in a module, at an offset in
    /// it when known: two closures of one demangled name stay apart.
    Function {
        /// Function.
        name: String,
        /// Offset in the function.
        offset: Option<u64>,
        /// The module it is in.
        module: Option<String>,
    },
    /// A module and an offset in it (no symbols).
    ModuleOffset(String, u64),
    /// A bare address.
    Addr(u64),
}

impl Place {
    /// The identity of a frame's best position (see [`Frame::best`]).
    pub(crate) fn of(f: &Frame) -> Place {
        match f.best() {
            (func, Some(file), Some(line)) => Place::Line {
                file: file.to_string(),
                line,
                column: f.column,
                function: func.map(str::to_string),
                label: f.label.clone(),
            },
            (Some(func), _, _) => Place::Function {
                name: func.to_string(),
                offset: f.function_offset,
                module: f.module.clone(),
            },
            _ => match (&f.module, f.module_offset) {
                (Some(m), Some(off)) => Place::ModuleOffset(m.clone(), off),
                _ => Place::Addr(f.addr),
            },
        }
    }
}

/// A user stack as an identity: its addresses, innermost first. Two
/// threads stopped at the same instructions through the same calls have
/// the same addresses (code does not move), whatever their stacks' own
/// addresses; an empty stack is a stack too (none was taken).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StackKey<'a>(&'a [Frame]);

impl PartialEq for StackKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        // A Python frame's address is its code object's: its line tells
        // the places in it apart.
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(other.0)
                .all(|(a, b)| a.addr == b.addr && (!a.python || a.line == b.line))
    }
}

impl Eq for StackKey<'_> {}

impl Hash for StackKey<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.len().hash(h);
        for f in self.0 {
            f.addr.hash(h);
            if f.python {
                f.line.hash(h);
            }
        }
    }
}

/// The key threads are grouped on.
type ThreadKey<'a> = (ThreadState, Option<Wait>, Option<Place>, StackKey<'a>);

/// Groups threads by (state, wait reason, location, user stack), most
/// populated first, then longest blocked. Runs after symbolization so that
/// locations with different addresses on the same line group together.
pub fn group_threads(threads: &[Thread]) -> Vec<Group> {
    let mut map: HashMap<ThreadKey<'_>, Group> = HashMap::new();
    for t in threads {
        let place = t.location.as_ref().map(|l| Place::of(&l.frame));
        let key = (t.state, Wait::of(t), place, StackKey(&t.frames));
        let g = map.entry(key).or_insert_with(|| Group {
            origin: None,
            count: 0,
            ids: Vec::new(),
            state: GroupState::Thread(t.state),
            wait: wait_text(t),
            min_ns: None,
            lower_bound: false,
            location: t.location.as_ref().map(|l| l.frame.clone()),
            source: t.location.as_ref().map(|l| l.source),
            frames: t.frames.clone(),
            stack_samples: None,
            max_ns: None,
            created_by: None,
            waits_on: Vec::new(),
            labels: Default::default(),
        });
        g.count += 1;
        g.ids.push(t.tid);
        if let Some(s) = t.stack_samples {
            let sum = g.stack_samples.get_or_insert_with(StackSamples::default);
            sum.count += s.count;
            sum.total += s.total;
        }
        if let Some(b) = t.blocked {
            g.min_ns = Some(g.min_ns.map_or(b.ns, |m| m.min(b.ns)));
            g.lower_bound |= !b.exact;
        }
    }
    // Ties below are broken in the order the groups' words sort in (what
    // the text-keyed grouping did), then by members.
    let mut v: Vec<(Option<String>, Group)> = map
        .into_values()
        .map(|g| (g.location.as_ref().map(Frame::describe), g))
        .collect();
    v.sort_by(|(la, a), (lb, b)| {
        (a.state.as_str(), &a.wait, la, &a.ids).cmp(&(b.state.as_str(), &b.wait, lb, &b.ids))
    });
    sorted(v.into_iter().map(|(_, g)| g).collect())
}

/// The words for a thread's wait reason (made once per group).
pub(crate) fn wait_text(t: &Thread) -> Option<String> {
    Wait::of(t).map(|w| match w {
        Wait::Futex(name) => name.to_string(),
        Wait::Syscall(_) => t
            .syscall
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        Wait::Kernel(f) => f,
    })
}

/// Orders groups most populated first, then longest blocked (or idle),
/// then by first member; the sort is stable, so groups tied on all three
/// keep the order they come in.
pub(crate) fn sorted(mut v: Vec<Group>) -> Vec<Group> {
    for g in &mut v {
        g.ids.sort_unstable();
    }
    v.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(b.min_ns.cmp(&a.min_ns))
            .then(a.ids.first().cmp(&b.ids.first()))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Blocked, BlockedSource, Location, LocationSource};

    fn thread(tid: u64, state: ThreadState, loc: Option<&str>, ns: u64) -> Thread {
        Thread {
            tid,
            ns_tid: None,
            name: "w".into(),
            name_source: "comm",
            state,
            syscall: None,
            blocked: Some(Blocked {
                ns,
                exact: true,
                source: BlockedSource::Switch,
            }),
            kernel_stack: [Frame {
                addr: 1,
                function: Some("pipe_read".into()),
                ..Default::default()
            }]
            .into(),
            location: loc.map(|f| Location {
                source: LocationSource::Ring,
                seq: None,
                ago_ns: None,
                frame: Frame {
                    addr: 2,
                    function: Some(f.into()),
                    ..Default::default()
                },
            }),
            history: vec![],
            snaps: None,
            polling_task: None,
            waits_for: None,
            exited: false,
            frames: Default::default(),
            stack_samples: None,
            python: None,
        }
    }

    #[test]
    fn groups_most_populated_first() {
        let ts = vec![
            thread(1, ThreadState::Sleeping, Some("a"), 5),
            thread(2, ThreadState::Sleeping, Some("b"), 7),
            thread(3, ThreadState::Sleeping, Some("b"), 3),
            thread(4, ThreadState::Running, Some("b"), 3),
        ];
        let g = group_threads(&ts);
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].count, g[0].ids.clone()), (2, vec![2, 3]));
        assert_eq!(g[0].min_ns, Some(3));
        assert_eq!(g[0].wait.as_deref(), Some("pipe_read"));
        assert_eq!(
            g[0].location.as_ref().map(Frame::describe).as_deref(),
            Some("b")
        );
    }

    #[test]
    fn places_that_print_alike_are_distinct_groups() {
        // Same last three path components, different files.
        let mut a = thread(1, ThreadState::Sleeping, Some("f"), 1);
        let mut b = thread(2, ThreadState::Sleeping, Some("f"), 1);
        for (t, file) in [(&mut a, "/x/a/b/c.rs"), (&mut b, "/y/a/b/c.rs")] {
            let f = &mut t.location.as_mut().unwrap().frame;
            f.file = Some(file.into());
            f.line = Some(3);
        }
        let g = group_threads(&[a, b]);
        assert_eq!(g.len(), 2);
        let d = |g: &Group| g.location.as_ref().map(Frame::describe);
        assert_eq!(d(&g[0]), d(&g[1]), "they print alike");
    }

    /// Two closures with one demangled name and no line information are
    /// two places (their offsets differ); two copies of one snap site (its
    /// table gives file, line and column, inlined twice) are one.
    #[test]
    fn sites_and_same_named_functions_by_identity() {
        let closure = "app::main::{{closure}}";
        let mut a = thread(1, ThreadState::Sleeping, Some(closure), 1);
        let mut b = thread(2, ThreadState::Sleeping, Some(closure), 1);
        a.location.as_mut().unwrap().frame.function_offset = Some(0x10);
        b.location.as_mut().unwrap().frame.function_offset = Some(0x48);
        assert_eq!(group_threads(&[a, b]).len(), 2);

        let site = |tid, addr, label: Option<&str>| {
            let mut t = thread(tid, ThreadState::Sleeping, None, 1);
            t.location = Some(Location {
                source: LocationSource::Ring,
                seq: None,
                ago_ns: None,
                frame: Frame {
                    addr,
                    file: Some("src/main.rs".into()),
                    line: Some(50),
                    column: Some(9),
                    label: label.map(str::to_string),
                    site: true,
                    ..Default::default()
                },
            });
            t
        };
        let g = group_threads(&[site(3, 0x1000, Some("w")), site(4, 0x2000, Some("w"))]);
        assert_eq!(g.len(), 1, "one site, inlined twice");
        assert_eq!(
            g[0].location.as_ref().map(Frame::describe).as_deref(),
            Some("src/main.rs:50 — \"w\"")
        );
        let g = group_threads(&[site(3, 0x1000, Some("w")), site(4, 0x1000, Some("v"))]);
        assert_eq!(g.len(), 2, "two labels are two sites");
    }
}
