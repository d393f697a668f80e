//! CPython, read from outside: `_PyRuntime` found by its dynamic symbol
//! (in the executable, as in Debian's stripped static build, or in
//! `libpython3.x.so`), its interpreters, their thread states and each
//! thread's chain of interpreter frames, all with `process_vm_readv`
//! while the interpreter runs (3.8–3.10: their chains of frame objects).
//! Layouts per version live in [`offsets`]; the byte formats of names and
//! line tables in [`decode`].
//!
//! What is read is a copy taken while the target moves: each thread's
//! chain is read until two reads agree, else it is marked as changing.

pub(crate) mod asyncio;
pub(crate) use asyncio::Asyncio;
pub mod decode;
pub(crate) mod locks;
mod objects;
mod offsets;

use std::collections::{HashMap, HashSet};

use librip::reader::open_mapped;
use object::{Object, ObjectSegment, ObjectSymbol};

use self::offsets::{Entry, FrameState, GcAt, Gil, Legacy, Lines, Offsets};
use crate::{
    collect::memory::{Memory, ProcessMemory},
    discover::maps::ProcessMaps,
};

/// Most interpreters, threads and frames walked: a chain longer than
/// this is a cycle read from a moving target.
const MAX_INTERPRETERS: usize = 64;
const MAX_THREADS: usize = 1 << 20;
const MAX_FRAMES: usize = 4096;
/// How often a thread's frame chain is read before it is called changing.
const READS: usize = 4;

/// A CPython interpreter found in a process.
#[derive(Debug)]
pub(crate) struct Python {
    /// `major.minor`, e.g. `3.11`.
    pub(crate) version: String,
    runtime: u64,
    offsets: Offsets,
}

/// One Python thread state, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PyThread {
    /// The kernel's thread id (`native_thread_id`).
    pub(crate) tid: u64,
    /// `threading`'s ident (`pthread_self()`).
    pub(crate) ident: u64,
    /// Address of the thread state (what the GIL's `last_holder` names).
    pub(crate) tstate: u64,
    /// Frames, innermost first; `None` when two reads never agreed.
    pub(crate) frames: Option<Vec<PyFrame>>,
    /// Its name in `threading` (`Thread.name`), when it is one of its
    /// threads.
    pub(crate) name: Option<String>,
}

/// One Python frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PyFrame {
    /// Address of the interpreter frame (a coroutine's is inside the
    /// coroutine object).
    pub(crate) frame: u64,
    /// Address of its code object (what tells functions apart).
    pub(crate) code: u64,
    /// The code's qualified name (`Class.method`).
    pub(crate) function: Option<String>,
    /// The code's file.
    pub(crate) file: Option<String>,
    /// The line running (for an outer frame: of the call).
    pub(crate) line: Option<u32>,
    /// The outermost frame of one native evaluation call
    /// (`_PyEval_EvalFrameDefault`): the next frame out is run by the next
    /// such native frame.
    pub(crate) entry: bool,
}

/// What the GIL said, read twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GilState {
    /// Locked by this thread state both times.
    Held(u64),
    /// Unlocked both times.
    Free,
    /// The two reads differ (it changed hands), or it was unreadable.
    Changing,
}

/// What the cyclic garbage collector's `collecting` flag said, read
/// twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GcState {
    /// Set both times: a collection runs.
    Running,
    /// Clear both times.
    Idle,
    /// The two reads differ (a collection started or ended between them),
    /// or one could not be read or held no flag.
    Changing,
}

/// Everything read of the interpreter at one moment.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    /// `major.minor`.
    pub(crate) version: String,
    /// Thread states of every interpreter.
    pub(crate) threads: Vec<PyThread>,
    /// The main interpreter's GIL.
    pub(crate) gil: GilState,
    /// The GIL's hand-over count (`switch_number`) was the same at both
    /// reads of the GIL: whoever held it at both held it all the time in
    /// between.
    pub(crate) gil_kept: bool,
    /// The main interpreter's cyclic garbage collector, read twice
    /// between the two reads of the GIL.
    pub(crate) gc: GcState,
    /// Where a thread waiting to take the main interpreter's GIL sleeps:
    /// the addresses of its condition variable and mutex (`take_gil`
    /// waits on them), when the GIL was found.
    pub(crate) gil_waits: Option<std::ops::Range<u64>>,
    /// The main interpreter's asyncio tasks, when it imported asyncio.
    pub(crate) asyncio: Option<asyncio::Tasks>,
    /// The `threading` locks the threads asleep on a futex wait on, each
    /// read twice.
    pub(crate) locks: Vec<locks::LockWait>,
    /// The waits of `locks` a cycle could run through, looked at again a
    /// moment later ([`Python::look_again`]; empty until then).
    pub(crate) locks_again: Vec<locks::LockAgain>,
}

impl Snapshot {
    /// Renames every thread id read (as the target's own pid namespace
    /// numbers its threads: `native_thread_id`, glibc's descriptor,
    /// `threading`'s `_native_id`) with `ours` (its id → ours). A thread
    /// `ours` does not know (gone, or too new to be in the map) gets no
    /// tid (0) and its lock wait is dropped: never another thread's id.
    pub(crate) fn map_tids(&mut self, ours: impl Fn(u64) -> Option<u64>) {
        for t in &mut self.threads {
            t.tid = ours(t.tid).unwrap_or(0);
        }
        self.locks.retain_mut(|w| match ours(w.tid) {
            Some(tid) => {
                w.tid = tid;
                true
            }
            None => false,
        });
    }
}

impl Python {
    /// The CPython interpreter of the process whose files are seen
    /// through `/proc/VIEW` and whose memory `maps` lists, if it runs one.
    /// `Err` says why a CPython found is not read (its version).
    pub(crate) fn detect(view: u32, maps: &ProcessMaps) -> Option<Result<Python, String>> {
        let files = maps.file_backed().ok()?;
        let mut seen = HashSet::new();
        for m in files.iter().filter(|m| m.offset == 0) {
            let base = m.name.rsplit('/').next().unwrap_or("");
            if !(base.starts_with("python") || base.starts_with("libpython"))
                || !seen.insert(&m.name)
            {
                continue;
            }
            let Some((runtime, version)) = symbols(view, m) else {
                continue;
            };
            let mem = ProcessMemory::new(view);
            return Some(
                Self::offsets(&mem, runtime, version, version_in_name(base)).map(
                    |(version, offsets)| Python {
                        version,
                        runtime,
                        offsets,
                    },
                ),
            );
        }
        None
    }

    /// The version (`major.minor`) and offsets of the CPython whose
    /// `_PyRuntime` and `Py_Version` are at `runtime` and `version`, in a
    /// file whose name says `named` (`python3.9`, `libpython3.10.so`): a
    /// table for 3.8 to 3.12, `_Py_DebugOffsets` from 3.13. Before 3.11
    /// nothing in memory says the version: the file's name does, and the
    /// first thread state must point back to its interpreter where that
    /// version's table says.
    fn offsets(
        mem: &impl Memory,
        runtime: u64,
        version: Option<u64>,
        named: Option<(u8, u8)>,
    ) -> Result<(String, Offsets), String> {
        // Py_Version: PY_VERSION_HEX (3.11 and later).
        let hex = version.and_then(|a| mem.read_u32(a).ok());
        if let Some(hex) = hex {
            let (major, minor) = ((hex >> 24) as u8, (hex >> 16) as u8);
            if let Some(o) = offsets::for_version(major, minor) {
                return Ok((format!("{major}.{minor}"), o));
            }
            if (major, minor) < (3, 13) {
                return Err(format!(
                    "CPython {major}.{minor}: not read (rip reads 3.8 to 3.13)"
                ));
            }
        }
        let mut debug = [0u8; offsets::DEBUG_OFFSETS_3_13];
        if mem.read(runtime, &mut debug).is_err() {
            return Err("CPython: its _PyRuntime could not be read: not read".into());
        }
        if hex.is_none() && &debug[..8] != b"xdebugpy" {
            let Some((major, minor)) = named else {
                return Err(
                    "a CPython older than 3.11 (no Py_Version) whose file name does not say its version: not read"
                        .into(),
                );
            };
            return match offsets::for_version(major, minor) {
                Some(o) if o.legacy.is_some() => {
                    legacy_layout(mem, runtime, &o, (major, minor))?;
                    Ok((format!("{major}.{minor}"), o))
                }
                _ => Err(format!(
                    "CPython {major}.{minor} (so its file is named) has no Py_Version: not read (rip reads 3.8 to 3.13)"
                )),
            };
        }
        let o = offsets::parse_debug(&debug, hex)?;
        let hex = u32::from_le_bytes(debug[8..12].try_into().expect("4 bytes"));
        Ok((format!("{}.{}", hex >> 24, (hex >> 16) & 0xff), o))
    }

    /// Reads every thread state and its frames, and the GIL before and
    /// after; and the lock each thread of `futex` (tid → the futex address
    /// the kernel says it sleeps on) waits on.
    pub(crate) fn read(&self, mem: &impl Memory, futex: &HashMap<u64, u64>) -> Snapshot {
        let (gil, gil_at, switches) = self.gil(mem);
        let collecting = self.collecting(mem);
        let mut names = Names::default();
        let mut threads = Vec::new();
        for tstate in self.thread_states(mem) {
            let o = &self.offsets;
            let Ok(ident) = mem.read_u64(tstate + o.tstate_thread_id) else {
                continue;
            };
            // Before 3.11: from the C library's thread descriptor, else
            // (0 until then) from `threading` below.
            let tid = match o.tstate_native_thread_id {
                Some(at) => match mem.read_u64(tstate + at) {
                    Ok(tid) => tid,
                    Err(_) => continue,
                },
                None => pthread_tid(mem, ident).unwrap_or(0),
            };
            let mut last = None;
            let mut frames = None;
            for _ in 0..READS {
                let now = self.frames(mem, tstate, &mut names);
                if now.is_some() && now == last {
                    frames = now;
                    break;
                }
                last = now;
            }
            threads.push(PyThread {
                tid,
                ident,
                tstate,
                frames,
                name: None,
            });
        }
        let interp = mem
            .read_u64(self.runtime + self.offsets.runtime_interpreters_head)
            .ok()
            .filter(|&i| i != 0);
        let mut heap = objects::Heap::new(mem, &self.offsets);
        if let Some(by_ident) = interp.and_then(|i| thread_names(&mut heap, i)) {
            for t in &mut threads {
                let Some(known) = by_ident.get(&t.ident) else {
                    continue;
                };
                t.name = known.name.clone();
                if t.tid == 0 {
                    t.tid = known.native_id.unwrap_or(0);
                }
            }
        }
        heap.pass(false);
        let asyncio = interp.and_then(|i| heap.asyncio_tasks(i, &mut names));
        // Fresh reads: what asyncio's pass cached is of another moment.
        heap.pass(false);
        let locks = locks::read(&mut heap, &self.version, &threads, futex);
        let collecting_again = self.collecting(mem);
        let (again, _, switches_again) = self.gil(mem);
        Snapshot {
            version: self.version.clone(),
            threads,
            asyncio,
            locks,
            locks_again: Vec::new(),
            gil_kept: switches.is_some() && switches == switches_again,
            gc: match (collecting, collecting_again) {
                (Some(true), Some(true)) => GcState::Running,
                (Some(false), Some(false)) => GcState::Idle,
                _ => GcState::Changing,
            },
            gil_waits: gil_at.map(|at| at + offsets::GIL_TAKE.start..at + offsets::GIL_TAKE.end),
            gil: if gil == again {
                gil
            } else {
                GilState::Changing
            },
        }
    }

    /// The second look at the lock waits of `snap` a cycle of waits could
    /// run through ([`locks::chained`]; `futex` as for [`Self::read`]):
    /// when there are any, after `pause`, each waiter's futex wait now
    /// (from `now_of`) and its lock's owner are read once more, into
    /// `snap.locks_again`. Nothing is waited for when there are none.
    pub(crate) fn look_again(
        &self,
        mem: &impl Memory,
        snap: &mut Snapshot,
        futex: &HashMap<u64, u64>,
        pause: std::time::Duration,
        now_of: &mut crate::collect::locks::WaitsNow<'_>,
    ) {
        let chained = locks::chained(&snap.locks, &snap.threads, futex);
        if chained.is_empty() {
            return;
        }
        std::thread::sleep(pause);
        let mut heap = objects::Heap::new(mem, &self.offsets);
        snap.locks_again = locks::again(&mut heap, &self.version, &chained, now_of);
    }

    /// Each thread's frame chain alone, by tid (`None`: two reads never
    /// agreed): what a window that takes stacks as threads go off the CPU
    /// reads beside each stack.
    pub(crate) fn thread_frames(&self, mem: &impl Memory) -> HashMap<u64, Option<Vec<PyFrame>>> {
        let mut names = Names::default();
        let o = &self.offsets;
        let mut out = HashMap::new();
        for tstate in self.thread_states(mem) {
            // Before 3.11, from the C library's thread descriptor only:
            // `threading`'s names are not read here.
            let tid = match o.tstate_native_thread_id {
                Some(at) => mem.read_u64(tstate + at).ok(),
                None => mem
                    .read_u64(tstate + o.tstate_thread_id)
                    .ok()
                    .and_then(|ident| pthread_tid(mem, ident)),
            };
            let Some(tid) = tid.filter(|&t| t != 0) else {
                continue;
            };
            let mut last = None;
            let mut frames = None;
            for _ in 0..READS {
                let now = self.frames(mem, tstate, &mut names);
                if now.is_some() && now == last {
                    frames = now;
                    break;
                }
                last = now;
            }
            out.insert(tid, frames);
        }
        out
    }

    /// The thread states of every interpreter.
    fn thread_states(&self, mem: &impl Memory) -> Vec<u64> {
        let o = &self.offsets;
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut interp = mem
            .read_u64(self.runtime + o.runtime_interpreters_head)
            .unwrap_or(0);
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 {
                break;
            }
            let mut t = mem.read_u64(interp + o.interp_threads_head).unwrap_or(0);
            while t != 0 && out.len() < MAX_THREADS && seen.insert(t) {
                out.push(t);
                t = mem.read_u64(t + o.tstate_next).unwrap_or(0);
            }
            interp = mem.read_u64(interp + o.interp_next).unwrap_or(0);
        }
        out
    }

    /// One read of a thread's frame chain, innermost first.
    fn frames(&self, mem: &impl Memory, tstate: u64, names: &mut Names) -> Option<Vec<PyFrame>> {
        let o = &self.offsets;
        if let Some(l) = &o.legacy {
            return legacy_frames(mem, o, l, tstate, names);
        }
        let cframe = match o.tstate_cframe {
            Some(at) => mem.read_u64(tstate + at).ok()?,
            None => tstate,
        };
        if cframe == 0 {
            return Some(Vec::new());
        }
        let mut frame = mem.read_u64(cframe + o.cframe_current_frame).ok()?;
        let mut out: Vec<PyFrame> = Vec::new();
        let mut seen = HashSet::new();
        while frame != 0 {
            if out.len() >= MAX_FRAMES || !seen.insert(frame) {
                return None;
            }
            let mut head = [0u8; 80];
            mem.read(frame, &mut head).ok()?;
            let word = |off: u64| {
                let off = off as usize;
                u64::from_le_bytes(head[off..off + 8].try_into().expect("8 bytes"))
            };
            let owner = head[o.frame_owner as usize];
            match o.entry {
                Entry::CStackOwner(cstack) if owner == cstack => {
                    // The shim below the frames of one native call.
                    if let Some(last) = out.last_mut() {
                        last.entry = true;
                    }
                }
                _ => {
                    let code = word(o.frame_code);
                    let instr = word(o.frame_prev_instr);
                    let info = names.code(mem, o, code)?;
                    let offset = instr.checked_sub(code + o.code_adaptive);
                    let line = offset.and_then(|off| line(o, &info, off as i64));
                    let entry = match o.entry {
                        Entry::IsEntry(at) => head[at as usize] != 0,
                        Entry::CStackOwner(_) => false,
                    };
                    out.push(PyFrame {
                        frame,
                        code,
                        function: info.name.clone(),
                        file: info.file.clone(),
                        line,
                        entry,
                    });
                }
            }
            frame = word(o.frame_previous);
        }
        // The outermost frame is always run by a native call of its own.
        if let Some(last) = out.last_mut() {
            last.entry = true;
        }
        Some(out)
    }

    /// Whether the main interpreter's cyclic GC is collecting, read once
    /// (`None`: unreadable, or not a flag).
    fn collecting(&self, mem: &impl Memory) -> Option<bool> {
        let gc = self.offsets.gc;
        let state = match gc.at {
            GcAt::Runtime(at) => self.runtime + at,
            GcAt::Interpreter(at) => {
                let interp = mem
                    .read_u64(self.runtime + self.offsets.runtime_interpreters_head)
                    .ok()
                    .filter(|&i| i != 0)?;
                interp + at
            }
        };
        match mem.read_u32(state + gc.collecting).ok()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// The GIL: who holds it, read once, where its state is, and its
    /// hand-over count.
    fn gil(&self, mem: &impl Memory) -> (GilState, Option<u64>, Option<u64>) {
        let o = &self.offsets;
        let at = match o.gil {
            Gil::Runtime {
                locked,
                last_holder,
            } => Some((self.runtime + locked, self.runtime + last_holder)),
            Gil::Interpreter {
                pointer,
                locked,
                last_holder,
            } => mem
                .read_u64(self.runtime + o.runtime_interpreters_head)
                .and_then(|i| mem.read_u64(i + pointer))
                .ok()
                .filter(|&g| g != 0)
                .map(|g| (g + locked, g + last_holder)),
        };
        let Some((locked, holder)) = at else {
            return (GilState::Changing, None, None);
        };
        // The hand-over count before the state: a hand-over between the
        // two reads changes the count read next time.
        let base = holder.checked_sub(offsets::GIL_LAST_HOLDER);
        let switches = base.and_then(|b| mem.read_u64(b + offsets::GIL_SWITCH_NUMBER).ok());
        let state = match (mem.read_u32(locked), mem.read_u64(holder)) {
            (Ok(0), Ok(_)) => GilState::Free,
            (Ok(_), Ok(h)) if h != 0 => GilState::Held(h),
            _ => GilState::Changing,
        };
        (state, base, switches)
    }
}

/// What `threading` says of one of its threads.
struct Known {
    /// `Thread._name`.
    name: Option<String>,
    /// `Thread._native_id` (3.8+): the kernel's tid, set by the thread
    /// itself when it started.
    native_id: Option<u64>,
}

/// `threading`'s threads by ident, from `threading._active` (ident →
/// `Thread`, its `_name` and `_native_id`); `None` when `threading` is
/// not imported or its dict could not be read.
fn thread_names<M: Memory>(
    heap: &mut objects::Heap<'_, M>,
    interp: u64,
) -> Option<HashMap<u64, Known>> {
    let modules = heap.word(interp + heap.o.objects.interp_modules)?;
    let threading = heap.dict_get(modules, "threading")?;
    let dict = heap.word(threading + objects::MODULE_DICT)?;
    let active = heap.dict_get(dict, "_active")?;
    let mut out = HashMap::new();
    // Through one copy of each page read, the threads' objects (and
    // what precedes them: where their attributes are) read ahead.
    heap.pass(true);
    let items = heap.dict_items(active)?;
    heap.prefetch(
        items
            .iter()
            .flat_map(|&(ident, t)| [(ident, 32), (t.wrapping_sub(32), 64)]),
    );
    for (ident, thread) in items {
        let Some(ident) = heap.int(ident) else {
            continue;
        };
        let name = heap.attribute(thread, "_name").and_then(|n| heap.string(n));
        let native_id = heap
            .attribute(thread, "_native_id")
            .filter(|&n| heap.type_name(n).as_deref() == Some("int"))
            .and_then(|n| heap.int(n));
        out.insert(ident, Known { name, native_id });
    }
    Some(out)
}

/// The kernel's id of the thread whose glibc thread descriptor is at
/// `pthread` (a thread state's `thread_id`), when the descriptor points
/// to itself where glibc's does.
fn pthread_tid(mem: &impl Memory, pthread: u64) -> Option<u64> {
    if mem.read_u64(pthread + offsets::PTHREAD_SELF).ok()? != pthread {
        return None;
    }
    let tid = mem.read_u32(pthread + offsets::PTHREAD_TID).ok()?;
    (tid as i32 > 0).then_some(u64::from(tid))
}

/// One read of a 3.8–3.10 thread's chain of frame objects, innermost
/// first: each frame is run by a native evaluation call of its own.
fn legacy_frames(
    mem: &impl Memory,
    o: &Offsets,
    l: &Legacy,
    tstate: u64,
    names: &mut Names,
) -> Option<Vec<PyFrame>> {
    let mut frame = mem.read_u64(tstate + l.tstate_frame).ok()?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    while frame != 0 {
        if out.len() >= MAX_FRAMES || !seen.insert(frame) {
            return None;
        }
        let f = LegacyFrame::read(mem, o, l, frame, names)?;
        out.push(f.frame);
        frame = f.back;
    }
    Some(out)
}

/// A 3.8–3.10 frame object, read.
struct LegacyFrame {
    /// What it runs.
    frame: PyFrame,
    /// `f_back`.
    back: u64,
    /// `f_lasti` in bytes (negative before the first instruction).
    lasti: i64,
    /// It has not started (a coroutine not yet run).
    created: bool,
    /// It runs now.
    running: bool,
    /// It is done (3.10's `f_state` past `FRAME_EXECUTING`).
    done: bool,
    /// The whole head read (the value stack's fields are in it).
    head: [u8; LEGACY_FRAME_READ],
}

/// What is read of a 3.8–3.10 frame object: its fields up to `f_state` /
/// `f_executing`.
const LEGACY_FRAME_READ: usize = 120;

impl LegacyFrame {
    fn read(
        mem: &impl Memory,
        o: &Offsets,
        l: &Legacy,
        frame: u64,
        names: &mut Names,
    ) -> Option<LegacyFrame> {
        let mut head = [0u8; LEGACY_FRAME_READ];
        mem.read(frame, &mut head).ok()?;
        let word = |off: u64| {
            let off = off as usize;
            u64::from_le_bytes(head[off..off + 8].try_into().expect("8 bytes"))
        };
        let at = l.f_lasti as usize;
        let lasti = i64::from(i32::from_le_bytes(
            head[at..at + 4].try_into().expect("4 bytes"),
        ));
        let lasti = if l.lasti_units { lasti * 2 } else { lasti };
        let (created, running, done) = match l.state {
            FrameState::Executing(at) => (lasti < 0, head[at as usize] != 0, false),
            FrameState::State(at) => {
                let s = head[at as usize] as i8;
                (s == -2, s == 0, s > 0)
            }
        };
        let code = word(l.f_code);
        let info = names.code(mem, o, code)?;
        Some(LegacyFrame {
            frame: PyFrame {
                frame,
                code,
                function: info.name.clone(),
                file: info.file.clone(),
                line: line(o, &info, lasti),
                entry: true,
            },
            back: word(l.f_back),
            lasti,
            created,
            running,
            done,
            head,
        })
    }
}

/// Whether the 3.8–3.10 table `o` fits the interpreter at `runtime`: its
/// first thread state points back to the interpreter it was found in
/// (what nothing else in memory says before 3.11, a wrong table reads
/// elsewhere).
fn legacy_layout(
    mem: &impl Memory,
    runtime: u64,
    o: &Offsets,
    (major, minor): (u8, u8),
) -> Result<(), String> {
    let l = o.legacy.as_ref().expect("a legacy table");
    let interp = mem
        .read_u64(runtime + o.runtime_interpreters_head)
        .map_err(|_| {
            format!("CPython {major}.{minor}: its _PyRuntime could not be read: not read")
        })?;
    let tstate = mem.read_u64(interp + o.interp_threads_head).unwrap_or(0);
    if interp == 0 || tstate == 0 {
        // Starting or ending: nothing to read, nothing to check.
        return Ok(());
    }
    if mem.read_u64(tstate + l.tstate_interp).ok() != Some(interp) {
        return Err(format!(
            "CPython {major}.{minor} (so its file is named): its thread state does not point back \
             to its interpreter where {major}.{minor}'s layout says (a build of another layout): not read"
        ));
    }
    Ok(())
}

/// The `major.minor` a CPython file's name says: `python3.9`,
/// `libpython3.10.so.1.0`.
fn version_in_name(base: &str) -> Option<(u8, u8)> {
    let rest = base
        .strip_prefix("libpython")
        .or_else(|| base.strip_prefix("python"))?;
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The line of the instruction at byte `offset` of the code `info`, by
/// the line table of `o`'s version.
fn line(o: &Offsets, info: &Code, offset: i64) -> Option<u32> {
    match o.lines {
        Lines::Locations => decode::line_at(
            &info.linetable,
            info.first_line,
            u64::try_from(offset).ok()?,
        ),
        Lines::Lnotab => decode::line_at_lnotab(&info.linetable, info.first_line, offset),
        Lines::Pairs => decode::line_at_3_10(&info.linetable, info.first_line, offset),
    }
}

/// `_PyRuntime` and `Py_Version` of the binary mapped by `m` (its first
/// mapping), as addresses in the process.
fn symbols(pid: u32, m: &librip::reader::MapsLine) -> Option<(u64, Option<u64>)> {
    let file = open_mapped(pid, m)?;
    let f = std::fs::File::open(file.proc_path()).ok()?;
    let cache = object::read::ReadCache::new(f);
    let elf = object::File::parse(&cache).ok()?;
    let base_va = elf
        .segments()
        .filter(|s| s.file_range().0 == 0)
        .map(|s| s.address())
        .min()
        .unwrap_or(0);
    let bias = m.start.checked_sub(base_va)?;
    let mut runtime = None;
    let mut version = None;
    for s in elf.dynamic_symbols() {
        match s.name() {
            Ok("_PyRuntime") => runtime = Some(s.address() + bias),
            Ok("Py_Version") => version = Some(s.address() + bias),
            _ => {}
        }
    }
    Some((runtime?, version))
}

/// What a code object says, read once per snapshot.
struct Code {
    name: Option<String>,
    file: Option<String>,
    first_line: i32,
    linetable: Vec<u8>,
}

/// Code objects and strings already read, by address.
#[derive(Default)]
struct Names {
    code: foldhash::HashMap<u64, std::rc::Rc<Code>>,
}

/// Longest line table read.
const MAX_LINETABLE: u64 = 1 << 20;

impl Names {
    fn code(&mut self, mem: &impl Memory, o: &Offsets, addr: u64) -> Option<std::rc::Rc<Code>> {
        if let Some(c) = self.code.get(&addr) {
            return Some(c.clone());
        }
        let mut head = vec![0u8; o.code_adaptive as usize];
        mem.read(addr, &mut head).ok()?;
        let word = |off: u64| {
            let off = off as usize;
            u64::from_le_bytes(head[off..off + 8].try_into().expect("8 bytes"))
        };
        let fl = o.code_firstlineno as usize;
        let first_line = i32::from_le_bytes(head[fl..fl + 4].try_into().expect("4 bytes"));
        let table = word(o.code_linetable);
        // A bytes object: ob_size at 16, the bytes at 32.
        let len = mem.read_u64(table + 16).ok()?;
        if len > MAX_LINETABLE {
            return None;
        }
        let mut linetable = vec![0u8; len as usize];
        mem.read(table + 32, &mut linetable).ok()?;
        let code = std::rc::Rc::new(Code {
            name: string(mem, o, word(o.code_qualname)),
            file: string(mem, o, word(o.code_filename)),
            first_line,
            linetable,
        });
        self.code.insert(addr, code.clone());
        Some(code)
    }
}

/// The `str` object at `addr`.
fn string(mem: &impl Memory, o: &Offsets, addr: u64) -> Option<String> {
    // ob_refcnt, ob_type, length, hash, state.
    let mut head = [0u8; 40];
    mem.read(addr, &mut head).ok()?;
    let length = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    let state = u32::from_le_bytes(head[32..36].try_into().expect("4 bytes"));
    let h = decode::StrHeader::new(length, state);
    let mut data = vec![0u8; h.byte_len()? as usize];
    let at = if h.ascii {
        o.ascii_size
    } else {
        o.compact_size
    };
    mem.read(addr + at, &mut data).ok()?;
    h.decode(&data)
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// Memory of a few regions, by start address; elsewhere unreadable.
    #[derive(Default)]
    struct Fake(Vec<(u64, Vec<u8>)>);

    impl Fake {
        fn put(&mut self, at: u64, bytes: &[u8]) {
            self.0.push((at, bytes.to_vec()));
        }
        fn word(&mut self, at: u64, w: u64) {
            self.put(at, &w.to_le_bytes());
        }
        fn int(&mut self, at: u64, v: i32) {
            self.put(at, &v.to_le_bytes());
        }
    }

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            'byte: for (i, b) in buf.iter_mut().enumerate() {
                let a = addr + i as u64;
                // The last write of a byte wins.
                for (at, bytes) in self.0.iter().rev() {
                    if a >= *at && a < at + bytes.len() as u64 {
                        *b = bytes[(a - at) as usize];
                        continue 'byte;
                    }
                }
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            Ok(())
        }
    }

    #[test]
    fn ids_from_another_pid_namespace_are_renamed_ours_or_dropped() {
        let thread = |tid| PyThread {
            tid,
            ident: 0x60 + tid,
            tstate: 0x5000 + tid,
            frames: None,
            name: None,
        };
        let wait = |tid| locks::LockWait {
            tid,
            futex: 0x1000,
            lock: locks::PyLock {
                addr: 0xa0,
                kind: locks::LockType::Lock,
                reads: [None, None],
            },
            through: None,
            name: None,
        };
        let mut snap = Snapshot {
            version: "3.11".into(),
            threads: vec![thread(1), thread(2), thread(3)],
            gil: GilState::Free,
            gil_kept: true,
            gc: GcState::Idle,
            gil_waits: None,
            asyncio: None,
            locks: vec![wait(1), wait(3)],
            locks_again: Vec::new(),
        };
        let ours = HashMap::from([(1u64, 101u64), (2, 102)]);
        snap.map_tids(|t| ours.get(&t).copied());
        let tids: Vec<u64> = snap.threads.iter().map(|t| t.tid).collect();
        assert_eq!(tids, [101, 102, 0]);
        // Thread 3 left its namespace's map: its wait names no thread.
        let waits: Vec<u64> = snap.locks.iter().map(|w| w.tid).collect();
        assert_eq!(waits, [101]);
    }

    #[test]
    fn the_version_a_file_name_says() {
        assert_eq!(version_in_name("python3.9"), Some((3, 9)));
        assert_eq!(version_in_name("libpython3.10.so.1.0"), Some((3, 10)));
        assert_eq!(version_in_name("libpython3.8.so"), Some((3, 8)));
        assert_eq!(version_in_name("python3"), None);
        assert_eq!(version_in_name("python"), None);
        assert_eq!(version_in_name("python3.x"), None);
    }

    const RUNTIME: u64 = 0x10_0000;
    const INTERP: u64 = 0x20_0000;
    const TSTATE: u64 = 0x30_0000;

    /// A 3.9 runtime whose one thread state points back to `back`.
    fn runtime(back: u64) -> Fake {
        let o = offsets::for_version(3, 9).unwrap();
        let mut m = Fake::default();
        // No _Py_DebugOffsets cookie.
        m.put(RUNTIME, &[0u8; offsets::DEBUG_OFFSETS_3_13]);
        m.word(RUNTIME + o.runtime_interpreters_head, INTERP);
        m.put(INTERP, &[0u8; 64]);
        m.word(INTERP + o.interp_threads_head, TSTATE);
        m.put(TSTATE, &[0u8; 256]);
        m.word(TSTATE + o.legacy.unwrap().tstate_interp, back);
        m
    }

    #[test]
    fn before_3_11_the_file_name_says_the_version_and_the_layout_must_fit() {
        let ok = runtime(INTERP);
        let (version, o) = Python::offsets(&ok, RUNTIME, None, Some((3, 9))).unwrap();
        assert_eq!(version, "3.9");
        assert_eq!(o, offsets::for_version(3, 9).unwrap());
        let refusals = [
            (
                Python::offsets(&runtime(0x1234), RUNTIME, None, Some((3, 9))),
                "does not point back to its interpreter",
            ),
            (
                Python::offsets(&ok, RUNTIME, None, None),
                "whose file name does not say its version",
            ),
            (
                Python::offsets(&ok, RUNTIME, None, Some((3, 7))),
                "CPython 3.7 (so its file is named) has no Py_Version: not read (rip reads 3.8 to 3.13)",
            ),
            (
                // A 3.11 file without Py_Version is not what it says.
                Python::offsets(&ok, RUNTIME, None, Some((3, 11))),
                "CPython 3.11 (so its file is named) has no Py_Version",
            ),
        ];
        for (got, why) in refusals {
            let e = got.unwrap_err();
            assert!(e.contains(why), "{e} does not say {why}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_tid_from_glibcs_thread_descriptor_that_points_to_itself() {
        let mut m = Fake::default();
        let pthread = 0x7000_0000;
        m.put(pthread, &[0u8; 1024]);
        m.word(pthread + offsets::PTHREAD_SELF, pthread);
        m.int(pthread + offsets::PTHREAD_TID, 4711);
        assert_eq!(pthread_tid(&m, pthread), Some(4711));
        // Not a descriptor (its self pointer is elsewhere), or unreadable.
        m.word(pthread + offsets::PTHREAD_SELF, pthread + 8);
        assert_eq!(pthread_tid(&m, pthread), None);
        assert_eq!(pthread_tid(&m, 0x9000_0000), None);
    }

    /// A 3.10 `str` object at `at` holding ASCII `s`.
    fn str_at(m: &mut Fake, at: u64, s: &str) {
        let mut b = vec![0u8; 48];
        b[16..24].copy_from_slice(&(s.len() as u64).to_le_bytes());
        // compact, ascii, kind 1.
        b[32..36].copy_from_slice(&0b110_0100u32.to_le_bytes());
        b.extend_from_slice(s.as_bytes());
        m.put(at, &b);
    }

    /// A 3.10 code object at `at` named `name`, from line `first`, whose
    /// line table is `table`.
    fn code_at(m: &mut Fake, o: &Offsets, at: u64, name: &str, first: i32, table: &[u8]) {
        m.put(at, &vec![0u8; o.code_adaptive as usize]);
        m.int(at + o.code_firstlineno, first);
        m.word(at + o.code_qualname, at + 0x1000);
        str_at(m, at + 0x1000, name);
        m.word(at + o.code_filename, at + 0x2000);
        str_at(m, at + 0x2000, "app.py");
        m.word(at + o.code_linetable, at + 0x3000);
        let mut bytes = vec![0u8; 32];
        bytes[16..24].copy_from_slice(&(table.len() as u64).to_le_bytes());
        bytes.extend_from_slice(table);
        m.put(at + 0x3000, &bytes);
    }

    #[test]
    fn a_3_10_chain_of_frame_objects_with_their_lines() {
        let o = offsets::for_version(3, 10).unwrap();
        let l = o.legacy.unwrap();
        let mut m = Fake::default();
        // inner (line 5 at byte 4: instruction 2) called from outer (line
        // 10 before its first instruction: f_lasti -1).
        let (inner, outer) = (0x40_0000u64, 0x50_0000u64);
        code_at(&mut m, &o, 0x60_0000, "inner", 4, &[4, 0, 4, 1]);
        code_at(&mut m, &o, 0x70_0000, "outer", 10, &[4, 0]);
        for (f, code, back, lasti) in [(inner, 0x60_0000, outer, 2), (outer, 0x70_0000, 0, -1)] {
            m.put(f, &[0u8; LEGACY_FRAME_READ]);
            m.word(f + l.f_code, code);
            m.word(f + l.f_back, back);
            m.int(f + l.f_lasti, lasti);
        }
        m.word(TSTATE + l.tstate_frame, inner);
        let mut names = Names::default();
        let frames = legacy_frames(&m, &o, &l, TSTATE, &mut names).unwrap();
        let got: Vec<_> = frames
            .iter()
            .map(|f| (f.function.as_deref(), f.file.as_deref(), f.line, f.entry))
            .collect();
        assert_eq!(
            got,
            [
                (Some("inner"), Some("app.py"), Some(5), true),
                (Some("outer"), Some("app.py"), Some(10), true)
            ]
        );
        // A chain that comes back on itself is a torn read: no frames.
        m.word(outer + l.f_back, inner);
        assert_eq!(legacy_frames(&m, &o, &l, TSTATE, &mut names), None);
    }
}
