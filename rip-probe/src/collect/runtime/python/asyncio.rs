//! asyncio's tasks, read from outside: the `_asyncio` module found in
//! `sys.modules`, its sets of live tasks (3.11's `_all_tasks`, 3.12's
//! `_scheduled_tasks` weak sets and `_eager_tasks` set), and for each C
//! task (`_asyncio.Task`) its name, its future state, the future it
//! awaits (`task_fut_waiter`) and its await chain: the task's coroutine,
//! the coroutine (or generator) on top of its frame's value stack while
//! it is suspended in an `await`, and so on down to the awaited future's
//! iterator (`_asyncio.FutureIter`). Each task is read until two reads
//! agree, else it is marked as changing.
//!
//! Tasks of the pure-Python `asyncio.Task` (used only when `_asyncio`
//! cannot be imported) are not read.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{
    LegacyFrame, Names,
    objects::Heap,
    offsets::{Awaiting, Legacy, Stack, YIELD_FROM},
};
use crate::{
    collect::{
        memory::Memory,
        runtime::{Clock, Process, Runtime},
    },
    model::{
        AsyncioState, Coroutine, CoroutineState, Frame, GoWaitKind, GoWaitsOn, Location,
        LocationSource, Origin, PythonTask,
    },
};

/// Longest await chain followed.
const MAX_CHAIN: usize = 256;
/// How often a task is read before it is called changing.
const READS: usize = 4;

/// The largest `TaskObj` read (its layout per version is in the offsets).
const TASK_SIZE: usize = 256;
/// `futureiterobject.future`.
const FUTURE_ITER_FUTURE: u64 = 16;
/// `PyWeakReference.wr_object`.
const WEAKREF_OBJECT: u64 = 16;
/// `_PyGenObject`'s frame state of a running coroutine (that of one not
/// started yet is in the offsets).
const FRAME_EXECUTING: i8 = 0;

/// A future's state (`fut_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FutureState {
    /// Not done.
    Pending,
    /// Cancelled.
    Cancelled,
    /// Done, with a result or an exception.
    Finished,
}

/// What a task awaits, as the task records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Awaited {
    /// The future's address.
    pub(crate) addr: u64,
    /// It is a task (another task's completion is awaited).
    pub(crate) task: bool,
    /// That task's name.
    pub(crate) name: Option<String>,
}

/// One asyncio task, read.
#[derive(Clone, Debug)]
pub(crate) struct RawTask {
    /// The task object's address (what `id(task)` says).
    pub(crate) addr: u64,
    /// Its name (`Task-7` when none was given).
    pub(crate) name: Option<String>,
    /// Its future state.
    pub(crate) state: FutureState,
    /// Its coroutine runs on a thread now (`FRAME_EXECUTING`).
    pub(crate) running: bool,
    /// The frame of its coroutine that runs, when it runs: the thread
    /// whose frame chain holds it polls the task.
    pub(crate) running_frame: Option<u64>,
    /// The await chain's frames, innermost first (empty for a task done);
    /// tasks awaiting at one place share one list.
    pub(crate) frames: Arc<[Frame]>,
    /// The future it awaits, when it awaits one.
    pub(crate) awaits: Option<Awaited>,
    /// Two reads never agreed: only its address is kept.
    pub(crate) changing: bool,
}

/// What was read of the process's asyncio tasks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tasks {
    /// Every task found, by address.
    pub(crate) tasks: Vec<RawTask>,
    /// Why tasks could not be read, when `_asyncio` was imported but its
    /// sets could not be followed.
    pub(crate) note: Option<String>,
}

/// An await chain as read, outermost first: each frame's code object and
/// line.
type Chain = Vec<(u64, Option<u32>)>;

/// One read of tasks: the words each read depended on (its trace), and,
/// when decoding, what the task says. Two reads of a task whose traces
/// agree say the same: the trace holds every field read, every object's
/// address and type, and what each string or code object decoded is
/// named by (its address: a `str` or a code object does not change while
/// a task points to it; the names read are cached by address, as they
/// always were).
struct Reading<'n> {
    names: &'n mut Names,
    /// Await chains made into frames, each distinct one once.
    chains: foldhash::HashMap<Chain, Arc<[Frame]>>,
    /// The line of each (code object, instruction) a chain was found at
    /// (tasks waiting at one place share them).
    lines: foldhash::HashMap<(u64, u64), Option<u32>>,
    /// Decode the task (names, lines, frames), not only trace it.
    decode: bool,
    trace: Vec<u64>,
    /// The chain being read.
    chain: Chain,
    /// The head of the coroutine being read (its frame's fixed part).
    head: Vec<u8>,
}

impl<'n> Reading<'n> {
    fn new(names: &'n mut Names) -> Self {
        Reading {
            names,
            chains: Default::default(),
            lines: Default::default(),
            decode: true,
            trace: Vec::new(),
            chain: Vec::new(),
            head: Vec::new(),
        }
    }

    /// The chain read, innermost first, as frames shared by the tasks
    /// awaiting at the same place.
    fn frames<M: Memory>(&mut self, heap: &Heap<'_, M>) -> Arc<[Frame]> {
        if let Some(f) = self.chains.get(&self.chain) {
            return f.clone();
        }
        let frames: Arc<[Frame]> = self
            .chain
            .iter()
            .rev()
            .map(|&(code, line)| {
                let info = self.names.code(heap, heap.o, code);
                Frame {
                    addr: code,
                    function: info.as_ref().and_then(|i| i.name.clone()),
                    file: info.as_ref().and_then(|i| i.file.clone()),
                    line,
                    python: true,
                    ..Frame::default()
                }
            })
            .collect();
        self.chains.insert(self.chain.clone(), frames.clone());
        frames
    }
}

impl<M: Memory> Heap<'_, M> {
    /// Every task of the interpreter at `interp`; `None` when asyncio's C
    /// module is not imported (no task can exist).
    pub(super) fn asyncio_tasks(&mut self, interp: u64, names: &mut Names) -> Option<Tasks> {
        let ob = &self.o.objects;
        let modules = self.read_u64(interp + ob.interp_modules).ok()?;
        let module = self.dict_get(modules, "_asyncio")?;
        let mut out = Tasks::default();
        let Some(dict) = self.word(module + super::objects::MODULE_DICT) else {
            out.note = Some("the _asyncio module could not be read".into());
            return Some(out);
        };
        // The sets and the tasks they hold through one copy of the pages
        // they are on, read a few thousand pages per system call; the
        // first pass over the tasks reads the same copy.
        self.pass(true);
        let mut addrs = Vec::new();
        let mut seen = HashSet::new();
        for &registry in ob.registries {
            let Some(set) = self.dict_get(dict, registry) else {
                out.note = Some(format!("_asyncio.{registry} could not be read"));
                continue;
            };
            let weak = self.type_name(set).as_deref() == Some("WeakSet");
            let set = if weak {
                match self.attribute(set, "data") {
                    Some(s) => s,
                    None => {
                        out.note = Some(format!("_asyncio.{registry}.data could not be read"));
                        continue;
                    }
                }
            } else {
                set
            };
            let Some(members) = self.set_members(set) else {
                out.note = Some(format!("the set of _asyncio.{registry} could not be read"));
                continue;
            };
            let members: Vec<u64> = if weak {
                self.prefetch(members.iter().map(|&m| (m + WEAKREF_OBJECT, 8)));
                members
                    .iter()
                    .filter_map(|&m| self.word(m + WEAKREF_OBJECT))
                    .collect()
            } else {
                members
            };
            self.prefetch(members.iter().map(|&t| (t, self.o.objects.task.size)));
            for task in members {
                if self.is_task(task) && seen.insert(task) {
                    addrs.push(task);
                }
            }
        }
        addrs.sort_unstable();
        // What the tasks point to first (their coroutines, names and the
        // futures they await), read ahead.
        let layout = self.o.objects.task;
        let head = (ob.gen_iframe + ob.frame_localsplus) as usize;
        let mut ahead = Vec::with_capacity(3 * addrs.len());
        for &a in &addrs {
            let mut t = [0u8; TASK_SIZE];
            let Some(t) = t.get_mut(..layout.size) else {
                continue;
            };
            if self.read(a, t).is_ok() {
                let word = |off: usize| u64::from_le_bytes(t[off..off + 8].try_into().expect("8"));
                ahead.push((word(layout.coro), head));
                ahead.push((word(layout.name), 64));
                ahead.push((word(layout.fut_waiter), 32));
            }
        }
        self.prefetch(ahead);
        // Two passes over every task, each through its own copy of the
        // pages it reads (the second reads again, at once, every page the
        // first did). The first decodes each task and keeps what it was
        // read from: the pages it touched, and the words it depended on
        // (its trace). A task none of whose pages changed in between reads
        // the same bytes again and says the same; one that touched a page
        // that changed is read again from the second copy, and the two
        // agree when their traces do. A task the two disagree on is read
        // again, alone, until two reads agree.
        let mut r = Reading::new(names);
        let mut first: Vec<Option<RawTask>> = Vec::with_capacity(addrs.len());
        let mut traces: Vec<u64> = Vec::with_capacity(24 * addrs.len());
        let mut ends = Vec::with_capacity(addrs.len());
        let mut pages: Vec<u64> = Vec::with_capacity(8 * addrs.len());
        let mut page_ends = Vec::with_capacity(addrs.len());
        self.record(true);
        for &a in &addrs {
            first.push(self.task(a, &mut r));
            traces.extend_from_slice(&r.trace);
            ends.push(traces.len());
            pages.extend(self.touched());
            page_ends.push(pages.len());
        }
        self.record(false);
        let changed = self.pass_again();
        r.decode = false;
        let mut agree = Vec::with_capacity(addrs.len());
        let (mut from, mut pages_from) = (0, 0);
        for ((&a, &end), &pages_end) in addrs.iter().zip(&ends).zip(&page_ends) {
            let same = pages[pages_from..pages_end]
                .iter()
                .all(|p| !changed.contains(p));
            let agreed = first[agree.len()].is_some()
                && (same || (self.task(a, &mut r).is_some() && r.trace == traces[from..end]));
            agree.push(agreed);
            from = end;
            pages_from = pages_end;
        }
        self.pass(false);
        r.decode = true;
        out.tasks = first
            .into_iter()
            .zip(addrs)
            .zip(agree)
            .map(|((first, addr), agreed)| match (first, agreed) {
                (Some(t), true) => t,
                _ => self.task_alone(addr, &mut r),
            })
            .collect();
        Some(out)
    }

    /// The task at `addr` read alone, from the process, until two reads
    /// agree; marked as changing when they never do.
    fn task_alone(&mut self, addr: u64, r: &mut Reading<'_>) -> RawTask {
        let mut last = None;
        for _ in 0..READS {
            let now = self.task(addr, r).map(|t| (t, r.trace.clone()));
            if let (Some((t, trace)), Some(before)) = (&now, &last)
                && trace == before
            {
                return t.clone();
            }
            last = now.map(|(_, trace)| trace);
        }
        RawTask {
            addr,
            name: None,
            state: FutureState::Pending,
            running: false,
            running_frame: None,
            frames: Arc::from([]),
            awaits: None,
            changing: true,
        }
    }

    /// One read of the task at `addr`: its trace in `r.trace`, and (when
    /// `r.decode`) what it says; `None` when it could not be read whole.
    fn task(&mut self, addr: u64, r: &mut Reading<'_>) -> Option<RawTask> {
        r.trace.clear();
        r.chain.clear();
        let layout = self.o.objects.task;
        let mut t = [0u8; TASK_SIZE];
        let t = t.get_mut(..layout.size)?;
        self.read(addr, t).ok()?;
        let t = &*t;
        let word = |off: usize| u64::from_le_bytes(t[off..off + 8].try_into().expect("8 bytes"));
        let at = layout.state;
        let state = match u32::from_le_bytes(t[at..at + 4].try_into().ok()?) {
            0 => FutureState::Pending,
            1 => FutureState::Cancelled,
            2 => FutureState::Finished,
            _ => return None,
        };
        r.trace.push(state as u64);
        let name = self.task_name(word(layout.name), r);
        let waiter = word(layout.fut_waiter);
        let waiter_type = if waiter == 0 {
            None
        } else {
            self.type_of(waiter)
        };
        r.trace
            .extend([waiter, waiter_type.as_ref().map_or(0, |t| t.0)]);
        let awaits = match waiter_type {
            _ if waiter == 0 => None,
            Some((_, n)) if &*n == "NoneType" => None,
            _ => Some(self.awaited(waiter, r)),
        };
        let mut task = RawTask {
            addr,
            name,
            state,
            running: false,
            running_frame: None,
            frames: Arc::from([]),
            awaits,
            changing: false,
        };
        if state == FutureState::Pending {
            self.chain(word(layout.coro), &mut task, r)?;
            if r.decode {
                task.frames = r.frames(self);
            }
        }
        r.trace
            .extend([task.running as u64, task.running_frame.unwrap_or(0)]);
        Some(task)
    }

    /// Follows the await chain from the coroutine `coro` into `r.chain`
    /// (and what the task awaits into `task`, when the task itself does
    /// not say).
    fn chain(&mut self, obj: u64, task: &mut RawTask, r: &mut Reading<'_>) -> Option<()> {
        let o = self.o;
        if let Some(l) = &o.legacy {
            return self.legacy_chain(l, obj, task, r);
        }
        let ob = &o.objects;
        let mut head = std::mem::take(&mut r.head);
        head.resize((ob.gen_iframe + ob.frame_localsplus) as usize, 0);
        let walked = self.walk_chain(obj, &mut head, task, r);
        r.head = head;
        walked
    }

    /// [`Self::chain`] from 3.11 on, reading each coroutine's head into
    /// `head`.
    fn walk_chain(
        &mut self,
        mut obj: u64,
        head: &mut [u8],
        task: &mut RawTask,
        r: &mut Reading<'_>,
    ) -> Option<()> {
        let o = self.o;
        let ob = &o.objects;
        for _ in 0..MAX_CHAIN {
            let ty = self.type_of(obj);
            r.trace.extend([obj, ty.as_ref().map_or(0, |t| t.0)]);
            match ty.as_ref().map(|t| &*t.1) {
                Some("coroutine" | "generator") => {}
                Some("_asyncio.FutureIter") => {
                    if task.awaits.is_none() {
                        let future = self.word(obj + FUTURE_ITER_FUTURE)?;
                        task.awaits = Some(self.awaited(future, r));
                    }
                    return Some(());
                }
                _ => return Some(()),
            }
            let frame = obj + ob.gen_iframe;
            self.read(obj, head).ok()?;
            let state = head[ob.gen_frame_state as usize] as i8;
            r.trace.push(state as u64);
            if state == ob.frame_created || state > FRAME_EXECUTING {
                // Not started yet, or done: no frame of its own runs.
                return Some(());
            }
            let f = &head[ob.gen_iframe as usize..];
            let word = |off: u64| {
                let off = off as usize;
                u64::from_le_bytes(f[off..off + 8].try_into().expect("8 bytes"))
            };
            let code = word(o.frame_code);
            let instr = word(o.frame_prev_instr);
            r.trace.extend([code, instr]);
            let line = if !r.decode {
                None
            } else if let Some(&line) = r.lines.get(&(code, instr)) {
                line
            } else {
                let info = r.names.code(&*self, o, code)?;
                let line = instr
                    .checked_sub(code + o.code_adaptive)
                    .and_then(|off| super::decode::line_at(&info.linetable, info.first_line, off));
                r.lines.insert((code, instr), line);
                line
            };
            r.chain.push((code, line));
            if state == FRAME_EXECUTING {
                task.running = true;
                task.running_frame = Some(frame);
                return Some(());
            }
            // Suspended: in an await when the next instruction resumes
            // one (RESUME with an argument of 2 or more), or (3.13) when
            // its state says so; what it awaits is then on top of its
            // value stack.
            match ob.awaiting {
                Awaiting::Resume(resume) => {
                    let mut next = [0u8; 2];
                    self.read(instr + 2, &mut next).ok()?;
                    r.trace.push(u64::from(u16::from_le_bytes(next)));
                    if !resume.contains(&next[0]) || next[1] < 2 {
                        return Some(());
                    }
                }
                Awaiting::State(s) if state != s => return Some(()),
                Awaiting::State(_) => {}
            }
            let top = i32::from_le_bytes(
                f[ob.frame_stacktop as usize..ob.frame_stacktop as usize + 4]
                    .try_into()
                    .ok()?,
            );
            if top < 1 {
                return Some(());
            }
            obj = self.word(frame + ob.frame_localsplus + 8 * (top as u64 - 1))?;
        }
        None
    }

    /// [`Self::chain`] through 3.8–3.10's coroutines: each points to its
    /// frame object (`gi_frame`, null once done); a suspended one waits in
    /// an `await` when the instruction after its last is `YIELD_FROM`,
    /// what it awaits on top of its value stack (`_PyGen_yf`).
    fn legacy_chain(
        &mut self,
        l: &Legacy,
        mut obj: u64,
        task: &mut RawTask,
        r: &mut Reading<'_>,
    ) -> Option<()> {
        let o = self.o;
        for _ in 0..MAX_CHAIN {
            let ty = self.type_of(obj);
            r.trace.extend([obj, ty.as_ref().map_or(0, |t| t.0)]);
            match ty.as_ref().map(|t| &*t.1) {
                Some("coroutine" | "generator") => {}
                Some("_asyncio.FutureIter") => {
                    if task.awaits.is_none() {
                        let future = self.word(obj + FUTURE_ITER_FUTURE)?;
                        task.awaits = Some(self.awaited(future, r));
                    }
                    return Some(());
                }
                _ => return Some(()),
            }
            let Some(frame) = self.word(obj + l.gen_frame) else {
                // Done: its frame is gone.
                return Some(());
            };
            let f = LegacyFrame::read(&*self, o, l, frame, r.names)?;
            r.trace.extend([
                frame,
                f.frame.code,
                f.lasti as u64,
                u64::from(f.created) | u64::from(f.running) << 1 | u64::from(f.done) << 2,
            ]);
            if f.created || f.done {
                return Some(());
            }
            r.chain.push((f.frame.code, f.frame.line));
            if f.running {
                task.running = true;
                task.running_frame = Some(frame);
                return Some(());
            }
            let bytes = self.word(f.frame.code + l.code_code)?;
            let len = self.read_u64(bytes + 16).ok()?;
            let next = u64::try_from(f.lasti + 2).ok()?;
            if next >= len {
                return Some(());
            }
            let mut op = [0u8; 1];
            self.read(bytes + 32 + next, &mut op).ok()?;
            r.trace.push(u64::from(op[0]));
            if op[0] != YIELD_FROM {
                return Some(());
            }
            let word = |off: u64| {
                let off = off as usize;
                u64::from_le_bytes(f.head[off..off + 8].try_into().expect("8 bytes"))
            };
            let top = match l.stack {
                Stack::Top(at) => word(at)
                    .checked_sub(8)
                    .filter(|&t| t >= word(l.f_valuestack))?,
                Stack::Depth(at) => {
                    let at = at as usize;
                    let depth = i32::from_le_bytes(f.head[at..at + 4].try_into().ok()?);
                    if depth < 1 {
                        return Some(());
                    }
                    word(l.f_valuestack) + 8 * (depth as u64 - 1)
                }
            };
            obj = self.word(top)?;
        }
        None
    }

    /// The future at `addr`, as something awaited.
    fn awaited(&mut self, addr: u64, r: &mut Reading<'_>) -> Awaited {
        let task = self.is_task(addr);
        let name = if task {
            let at = self.word(addr + self.o.objects.task.name as u64);
            r.trace.push(at.unwrap_or(0));
            at.and_then(|n| self.task_name(n, r))
        } else {
            None
        };
        r.trace.extend([addr, u64::from(task)]);
        Awaited { addr, task, name }
    }

    /// A task's name: a `str`, or (3.12, until asked) the number of its
    /// default name `Task-N`. Traced by the object's address and type
    /// (and a number's value); decoded only when `r.decode`.
    fn task_name(&mut self, obj: u64, r: &mut Reading<'_>) -> Option<String> {
        let ty = self.type_of(obj);
        r.trace.extend([obj, ty.as_ref().map_or(0, |t| t.0)]);
        match ty.as_ref().map(|t| &*t.1) {
            // Not kept among the strings read: no two tasks share one.
            Some("str") => r
                .decode
                .then(|| super::string(&*self, self.o, obj))
                .flatten(),
            Some("int") => {
                let n = self.int(obj);
                r.trace.push(n.unwrap_or(u64::MAX));
                n.filter(|_| r.decode).map(|n| format!("Task-{n}"))
            }
            _ => None,
        }
    }
}

/// A process's asyncio tasks, read, for the seam.
pub(crate) struct Asyncio<'a> {
    snap: &'a super::Snapshot,
    tasks: &'a Tasks,
}

impl<'a> Runtime<'a> for Asyncio<'a> {
    fn detect(process: Process<'a>) -> Option<Self> {
        let snap = process.python?;
        Some(Asyncio {
            snap,
            tasks: snap.asyncio.as_ref()?,
        })
    }

    fn coroutines(&self, _clock: Clock, _history: bool) -> Vec<Coroutine> {
        // The thread running a task: the one whose frame chain holds its
        // coroutine's running frame.
        let mut on: HashMap<u64, u64> = HashMap::new();
        for t in &self.snap.threads {
            for f in t.frames.iter().flatten() {
                on.insert(f.frame, t.tid);
            }
        }
        self.tasks.tasks.iter().map(|t| coroutine(t, &on)).collect()
    }

    fn native_addrs(_: &Coroutine) -> Vec<u64> {
        // Python frames are named when read.
        Vec::new()
    }

    fn name_frames(_: &mut Coroutine, _: &HashMap<u64, Frame>) {}
}

/// One task in the model.
fn coroutine(t: &RawTask, on: &HashMap<u64, u64>) -> Coroutine {
    let frames = t.frames.clone();
    let state = match (t.changing, t.state, t.running) {
        (true, ..) => CoroutineState::Idle,
        (_, FutureState::Pending, true) => CoroutineState::Polling,
        (_, FutureState::Pending, false) => CoroutineState::Idle,
        _ => CoroutineState::Exited,
    };
    Coroutine {
        origin: Origin::Asyncio,
        id: t.addr,
        generation: 0,
        name: t.name.clone().unwrap_or_default(),
        state,
        polling_tid: t
            .running_frame
            .and_then(|f| on.get(&f))
            .and_then(|&tid| u32::try_from(tid).ok()),
        polls: 0,
        idle_ns: None,
        polling_ns: None,
        lower_bound: false,
        since_unix_ns: None,
        created_unix_ns: None,
        location: frames.first().map(|f| Location {
            source: LocationSource::Python,
            seq: None,
            ago_ns: None,
            frame: f.clone(),
        }),
        history: Vec::new(),
        go: None,
        python: Some(PythonTask {
            state: match t.state {
                FutureState::Pending => AsyncioState::Pending,
                FutureState::Cancelled => AsyncioState::Cancelled,
                FutureState::Finished => AsyncioState::Finished,
            },
            frames,
            awaits: t.awaits.as_ref().map(|a| GoWaitsOn {
                kind: if a.task {
                    GoWaitKind::Task
                } else {
                    GoWaitKind::Future
                },
                addrs: vec![a.addr],
                name: a.name.clone(),
            }),
            changing: t.changing,
        }),
    }
}
