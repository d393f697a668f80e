//! The one data model every output is rendered from: the table, the grouped
//! view and `--json` all read these structs, so they cannot disagree.
//!
//! The JSON form is documented in `docs/JSON.md`; [`SCHEMA_VERSION`] changes
//! whenever a field is removed or changes meaning (adding fields does not).

use std::sync::Arc;
pub mod calls;

use schemars::JsonSchema;
use serde::Serialize;

pub mod cgroup;
pub mod contention;
pub mod events;
mod hist;
pub mod leaks;
pub mod list;
pub mod offcpu;
pub mod original;
pub mod serve;
mod stacks;

pub use hist::Bucket;
pub use stacks::StackTable;

/// Version of the JSON schema (`docs/JSON.md`).
pub const SCHEMA_VERSION: u32 = 4;

/// A whole report: one process (live) or one ring file (post-mortem).
///
/// Written whole: its threads' and groups' stacks are written as indexes
/// into [`Report::stacks`], a table made as it is written.
#[derive(Clone, Debug, Serialize, JsonSchema)]
// The derived serializer is `Report::serialize`; the `Serialize` impl
// below makes the stack table current around it. (The schema keeps the
// type's name, which `remote` would make `Self`.)
#[serde(remote = "Self")]
#[schemars(rename = "Report")]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// What produced the report: `"pid"` (live, kernel state joined) or
    /// `"dump"` (ring only).
    pub mode: Mode,
    /// The process the report is about.
    pub process: ProcessInfo,
    /// Ring files the locations came from (empty when none was found).
    pub rings: Vec<RingInfo>,
    /// How long the kernel was observed, in ns (0 for dump).
    pub window_ns: u64,
    /// The distinct stacks of `threads` and `groups`, each once; they
    /// name them by index. Made when the report is written.
    #[schemars(with = "Vec<Vec<Frame>>")]
    pub stacks: StackTable,
    /// Threads, sorted by tid.
    pub threads: Vec<Thread>,
    /// Coroutines and async tasks, of every runtime found in the process
    /// (each says which: [`Coroutine::origin`]).
    pub tasks: Vec<Coroutine>,
    /// Threads grouped by what they are doing and where, most populated
    /// first.
    pub groups: Vec<Group>,
    /// Tasks grouped by state and await location, most populated first.
    pub task_groups: Vec<Group>,
    /// Things the user should know (build-id mismatches, the target
    /// exiting during the window, dropped snaps...).
    pub warnings: Vec<String>,
    /// Threads waiting for each other's locks in a cycle, each cycle once,
    /// smallest tid first, in wait order (`--pid` only).
    pub deadlocks: Vec<Vec<u32>>,
    /// The CPython interpreter the process runs, when rip read it
    /// (`--pid`). Absent from JSON when the process runs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Python>,
}

/// A CPython interpreter read from outside (its threads' Python frames
/// are in their stacks, see [`Thread::python`]).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Python {
    /// `major.minor`, e.g. `3.11`.
    pub version: String,
    /// Who holds the main interpreter's GIL: `held` (by `gil_holder`),
    /// `free`, or `changing` (two reads disagreed, or named no thread
    /// state of the process, so no holder is claimed).
    pub gil: String,
    /// The thread holding the GIL, when two reads agreed that it does.
    pub gil_holder: Option<u64>,
    /// The threads waiting to take the GIL, ascending: each asleep on the
    /// GIL's own condition variable or mutex, or blocked in `take_gil`
    /// (see [`PythonThread::gil_wait`]); never the holder.
    pub gil_waiters: Vec<u64>,
    /// The main interpreter's cyclic garbage collector, by its
    /// `collecting` flag read twice between the GIL's two reads:
    /// `running` (set both times), `idle` (clear both times) or
    /// `changing` (a collection started or ended between the reads, or a
    /// read failed: nothing is claimed). CPython records no start time.
    pub gc: String,
    /// The thread the collection runs on, when `gc` is `running`: the
    /// one that held the GIL throughout (both reads name it and the GIL
    /// changed hands no time between them) with Python frames that held
    /// still (a collection holds the GIL and runs no bytecode, unless a
    /// finalizer it calls runs Python code or gives the GIL up).
    pub gc_thread: Option<u64>,
    /// The `threading` objects threads wait on, each once with its
    /// waiters, most waiters first.
    pub locks: Vec<PythonLock>,
}

/// A `threading` object (a `Lock`, `RLock`, `Condition`, `Semaphore`, …)
/// threads wait on, and who holds it where the object records it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PythonLock {
    /// The object's address (what `id()` says in the program).
    pub object: u64,
    /// Its class: `Lock`, `RLock` (the `_thread` locks), or the
    /// `threading` class the waiters wait in (`Condition`, `Semaphore`,
    /// `BoundedSemaphore`, `Event`, …).
    pub kind: String,
    /// Its global name in the module of the frame that waits on it, when
    /// one names it.
    pub name: Option<String>,
    /// The waiters' tids, ascending.
    pub waiters: Vec<u64>,
    /// Held (a `Lock`, an `RLock`; a `Condition`'s lock), when two reads
    /// agree.
    pub held: Option<bool>,
    /// Who holds it: an `RLock`'s owner (or a `Condition`'s, whose lock
    /// is an `RLock`), when two reads agree on a thread of the
    /// interpreter that does not wait for it; otherwise why not (a `Lock`
    /// records no owner).
    pub owner: Owner,
    /// An owned `RLock`'s recursion count.
    pub count: Option<u64>,
}

/// What CPython says of one thread.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PythonThread {
    /// `threading`'s ident of the thread (`pthread_self()`).
    pub ident: u64,
    /// Its name in `threading` (`Thread.name`, from `threading._active`),
    /// when it is one of `threading`'s threads; the thread's `name` then
    /// (`name_source` `python`), unless its ring slot names it.
    pub name: Option<String>,
    /// Its Python frames, innermost first, read at report time. When
    /// `merged`, they are also in the thread's `frames`, in place of the
    /// native evaluation frames that run them.
    pub frames: Vec<Frame>,
    /// The Python frames are merged into the thread's native stack (it
    /// was unwound at report time and had one `_PyEval_EvalFrameDefault`
    /// per run of Python frames).
    pub merged: bool,
    /// Why they were not merged, or not read.
    pub note: Option<String>,
    /// The thread holds the GIL (two reads agreed).
    pub holds_gil: bool,
    /// The cyclic garbage collector runs on this thread (see
    /// [`Python::gc_thread`]).
    pub runs_gc: bool,
    /// The thread waits to take the GIL, and what says so: asleep in a
    /// futex wait on the GIL's condition variable or mutex (the kernel's
    /// word), or blocked with `take_gil` on its native stack. Absent when
    /// nothing read says it waits for it.
    pub gil_wait: Option<String>,
    /// The `threading` object it waits on (its `object` in
    /// [`Python::locks`]), when it sleeps on one.
    pub waits_on: Option<u64>,
}

/// Rewrites every frame of `stacks` with `f`, once per distinct shared
/// stack: holders of one stack share the rewritten one.
pub(crate) fn rewrite_shared<'a>(
    stacks: impl IntoIterator<Item = &'a mut Arc<[Frame]>>,
    mut f: impl FnMut(&mut Frame),
) {
    // Keyed by address; the original is kept in the map so that its
    // address is not reused while the map lives.
    type Rewritten = (Arc<[Frame]>, Arc<[Frame]>);
    let mut done: std::collections::HashMap<*const Frame, Rewritten, foldhash::fast::RandomState> =
        Default::default();
    for stack in stacks {
        let (_, new) = done.entry(stack.as_ptr()).or_insert_with(|| {
            let mut frames = stack.to_vec();
            frames.iter_mut().for_each(&mut f);
            (stack.clone(), frames.into())
        });
        *stack = new.clone();
    }
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        stacks::with_table(self, || Report::serialize(self, s))
    }
}

impl Report {
    /// Rewrites every frame of the threads' kernel stacks with `f`, once
    /// per distinct shared stack (see [`rewrite_shared`]).
    pub(crate) fn map_kernel_frames(&mut self, f: impl FnMut(&mut Frame)) {
        rewrite_shared(self.threads.iter_mut().map(|t| &mut t.kernel_stack), f);
    }
}

/// How the report was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `rip-probe --pid N`: kernel state joined with ring locations.
    Pid,
    /// `rip-probe dump`: ring locations only.
    Dump,
}

/// The observed process.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Executable path, when known.
    pub exe: Option<String>,
    /// Process name (`comm`), when known.
    pub comm: Option<String>,
    /// Whether the process was alive when the report was taken.
    pub alive: bool,
    /// Set when the process exited, or its pid was reused, during the
    /// observation window.
    pub lost: Option<String>,
    /// The process's pid in its own pid namespace, when that is not
    /// rip-probe's (a container); `pid` is then rip-probe's.
    pub ns_pid: Option<u32>,
    /// The process title (/proc/PID/cmdline, as ps shows it: what the
    /// program set, e.g. `postgres: checkpointer`), bounded and with its
    /// control characters replaced; `None` when not read (a dump, a kernel
    /// thread, a process gone).
    pub title: Option<String>,
}

/// A ring file that contributed locations.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RingInfo {
    /// Path of the ring file.
    pub path: String,
    /// Ring layout version.
    pub version: u32,
    /// Pid that created the ring, in its own pid namespace.
    pub pid: u32,
    /// Set when the ring was read through another process's view of the
    /// files (its mount namespace): `path` is the path that process sees,
    /// and this says which namespace and how the file was reached.
    pub namespace: Option<String>,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// Ring depth (entries kept per slot).
    pub depth: u32,
    /// Snaps of unregistered threads that were dropped (a lower bound).
    pub dropped_snaps: u64,
}

/// Where a thread stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThreadState {
    /// On a CPU.
    Running,
    /// Ready to run, waiting for a CPU (including preempted).
    Runnable,
    /// Interruptible sleep (`S`).
    Sleeping,
    /// Uninterruptible sleep (`D`).
    Uninterruptible,
    /// Uninterruptible but not counted as load (`I`).
    Idle,
    /// Stopped by a signal (`T`).
    Stopped,
    /// Stopped by a tracer (`t`).
    Traced,
    /// Exited (`X`), or a ring slot marked exited.
    Exited,
    /// Parked kernel thread (`P`).
    Parked,
    /// Not known (ring only, no kernel view).
    Unknown,
}

impl ThreadState {
    /// The word used in text output.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadState::Running => "running",
            ThreadState::Runnable => "runnable",
            ThreadState::Sleeping => "sleeping",
            ThreadState::Uninterruptible => "uninterruptible",
            ThreadState::Idle => "idle",
            ThreadState::Stopped => "stopped",
            ThreadState::Traced => "traced",
            ThreadState::Exited => "exited",
            ThreadState::Parked => "parked",
            ThreadState::Unknown => "unknown",
        }
    }

    /// Whether a thread in this state is not making progress on a CPU.
    pub fn is_blocked(self) -> bool {
        matches!(
            self,
            ThreadState::Sleeping
                | ThreadState::Uninterruptible
                | ThreadState::Idle
                | ThreadState::Stopped
                | ThreadState::Traced
        )
    }
}

/// One thread of the process.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Thread {
    /// Thread id (for a ring slot: the id it registered with), as
    /// rip-probe's pid namespace numbers it when the thread is alive.
    pub tid: u64,
    /// The thread's id in the process's own pid namespace, when that is
    /// not rip-probe's (a container). For a thread with no live
    /// counterpart (exited, or the process is gone) `tid` is that id too.
    pub ns_tid: Option<u64>,
    /// Name: the ring slot's name when it has one, else the kernel's comm.
    pub name: String,
    /// Where `name` came from: `"ring"`, `"python"` (`threading`'s name)
    /// or `"comm"`.
    pub name_source: &'static str,
    /// Kernel state ([`ThreadState::Unknown`] in dump mode for live slots).
    pub state: ThreadState,
    /// The syscall the thread is blocked in, decoded. Shared by the
    /// threads blocked in the same call with the same arguments (a pool
    /// waiting on one lock decodes it once).
    pub syscall: Option<Arc<Syscall>>,
    /// How long the thread has been off CPU.
    pub blocked: Option<Blocked>,
    /// Kernel stack, innermost first, symbolized. Shared by the threads
    /// with the same stack (thousands of workers usually wait in one);
    /// in JSON, its index in [`Report::stacks`].
    #[serde(serialize_with = "stacks::stack_id")]
    #[schemars(with = "u32")]
    pub kernel_stack: std::sync::Arc<[Frame]>,
    /// The thread's last known user-space location.
    pub location: Option<Location>,
    /// Older locations, oldest first (dump `--threads` only).
    pub history: Vec<Location>,
    /// Total snaps the thread made (ring only).
    pub snaps: Option<u64>,
    /// The ring slot is marked exited (the thread ended).
    pub exited: bool,
    /// The task (coroutine) this thread is polling right now, if any: its
    /// last snap is then the thread's location.
    pub polling_task: Option<u64>,
    /// For a thread blocked in a futex wait: the lock it waits for and who
    /// holds it (`--pid` only).
    pub waits_for: Option<WaitsFor>,
    /// The thread's user stack, innermost first (`--pid`): unwound from
    /// its saved registers when it is blocked, its hottest sampled stack
    /// when it ran during the window. Empty when none was taken
    /// (`--no-stacks`, a kernel thread, a thread that did not run in the
    /// window). Threads with one stack share one list; in JSON, its
    /// index in [`Report::stacks`].
    #[serde(serialize_with = "stacks::stack_id")]
    #[schemars(with = "u32")]
    pub frames: Arc<[Frame]>,
    /// For a stack sampled on CPU: how many samples had it.
    pub stack_samples: Option<StackSamples>,
    /// What CPython says of the thread, when the process runs a CPython
    /// rip reads and the thread has a thread state. Absent from JSON
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonThread>,
}

impl Thread {
    /// A thread known by its id, name and state and nothing else yet: no
    /// syscall, blocked time, stacks, location or lock. Each stage fills
    /// in what it learns (`Thread { syscall, ..Thread::new(…) }`).
    pub fn new(tid: u64, name: String, name_source: &'static str, state: ThreadState) -> Thread {
        Thread {
            tid,
            ns_tid: None,
            name,
            name_source,
            state,
            syscall: None,
            blocked: None,
            kernel_stack: Default::default(),
            location: None,
            history: Vec::new(),
            snaps: None,
            exited: false,
            polling_task: None,
            waits_for: None,
            frames: Default::default(),
            stack_samples: None,
            python: None,
        }
    }
}

/// How often a running thread's stack was seen in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StackSamples {
    /// Samples whose stack was this one (same functions, outermost to
    /// innermost).
    pub count: u64,
    /// Samples taken of the thread (or of the group's threads) in the
    /// window.
    pub total: u64,
}

/// The lock a blocked thread waits for, read from the target's memory.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WaitsFor {
    /// Address of the lock (the mutex, rwlock or condition variable; the
    /// futex word for other futexes).
    pub lock: u64,
    /// Address of the futex word the thread sleeps on.
    pub futex: u64,
    /// What names the lock: its data symbol (`g_table_lock`,
    /// `table+0x40`), or the memory it lives in (`heap 0x…`).
    pub symbol: Option<String>,
    /// `mutex`, `pi_futex`, `rwlock`, `condvar`, `parked`, `runtime` or
    /// `futex`.
    pub kind: LockKind,
    /// A glibc mutex's flavour.
    pub mutex: Option<MutexFlavor>,
    /// For a wait inside a language runtime (`parked`, `runtime`): which
    /// one, read from the waiter's stack.
    pub runtime: Option<RuntimeWait>,
    /// Who holds it, or why that is not known.
    pub owner: Owner,
    /// The owning thread, when it is a live thread of the process (what
    /// it is doing is its own entry in the report's threads).
    pub owner_tid: Option<u32>,
}

/// A decoded system call.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Syscall {
    /// Syscall number (x86-64).
    pub nr: i64,
    /// Syscall name, e.g. `futex`.
    pub name: String,
    /// Arguments, decoded where we know how.
    pub args: Vec<SyscallArg>,
    /// One-line rendering, e.g. `futex(0x7f..., FUTEX_WAIT_PRIVATE, 0)`.
    pub text: String,
}

/// One decoded syscall argument.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SyscallArg {
    /// Argument name, e.g. `fd`, `op`, `uaddr`.
    pub name: &'static str,
    /// Raw register value.
    pub raw: u64,
    /// Human reading, e.g. `3 (pipe:[1234])`, `FUTEX_WAIT_PRIVATE`, `1.5s`.
    pub text: String,
}

/// How long a thread has been off CPU.
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
pub struct Blocked {
    /// Duration in ns.
    pub ns: u64,
    /// `true` when the switch off the CPU was observed; `false` when `ns`
    /// is a lower bound (see `source`).
    pub exact: bool,
    /// How `ns` was obtained.
    pub source: BlockedSource,
}

/// What a blocked time rests on. Every lower bound is at most the thread's
/// age: a bound that would exceed it is not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BlockedSource {
    /// sched_switch saw the thread leave the CPU and not come back: exact.
    Switch,
    /// No switch of the thread was seen since rip-probe attached: at least
    /// the window.
    Window,
    /// At least the time its own CPU's run-queue task clock moved since the
    /// thread last ran (`se.exec_start`).
    TaskClock,
    /// Nothing supports more than 0: it was on a CPU, or had just left
    /// it, when its state was read, and no clock that could be trusted
    /// says more.
    None,
}

/// A symbolized code location: a function with file and line, and the
/// functions inlined at that address (outermost first).
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct Frame {
    /// The address.
    pub addr: u64,
    /// Function name, demangled.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// Module (executable or shared library) the address belongs to.
    pub module: Option<String>,
    /// Offset of `addr` in `module` (file offset), when known.
    pub module_offset: Option<u64>,
    /// Offset of `addr` from the start of `function`, when the address
    /// has no line (shown as `function+0x1f`, so distinct places stay
    /// distinct). Absent from JSON when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_offset: Option<u64>,
    /// Source column (1-based), from the binary's site table. Absent from
    /// JSON when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// The snap's label (`snap!("…")`, `RIP_SNAP_LABEL("…")`), from the
    /// binary's site table. Absent from JSON when the site has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `file`/`line` (and `label`) come from the binary's site table
    /// (exact for a snap, even without debug information). Absent from
    /// JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub site: bool,
    /// Functions inlined at this address, outermost first; the last one is
    /// where the address really is.
    pub inlined: Vec<InlinedFrame>,
    /// A Python frame (CPython's, read from the interpreter): `function`
    /// is the code's qualified name, `file` and `line` its source; `addr`
    /// is the code object's address. Absent from JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub python: bool,
}

/// A function inlined into a [`Frame`].
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct InlinedFrame {
    /// Function name.
    pub function: String,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
}

/// Where a user-space location came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LocationSource {
    /// A librip ring entry (`snap`).
    Ring,
    /// The last traced function entered (`--uprobe`).
    Uprobe,
    /// The user instruction pointer saved when the thread entered the
    /// kernel (no ring, no uprobe).
    UserPc,
    /// A Python frame read from the CPython interpreter (an asyncio
    /// task's innermost `await`).
    Python,
}

/// A user-space location.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Location {
    /// Where it came from.
    pub source: LocationSource,
    /// Ring entry sequence number (ring only).
    pub seq: Option<u64>,
    /// How long ago the location was recorded, in ns, where known.
    pub ago_ns: Option<u64>,
    /// The symbolized address.
    pub frame: Frame,
}

/// A coroutine or async task, of any runtime: one model, one grouping and
/// one rendering for all, the runtime it comes from being data
/// ([`Origin`]). Each runtime is read by its module in
/// `collect::runtime`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Coroutine {
    /// The runtime it comes from.
    pub origin: Origin,
    /// Its id in that runtime (a librip coroutine id).
    pub id: u64,
    /// Slot generation: distinguishes reuses of the same slot.
    pub generation: u32,
    /// Name given at spawn.
    pub name: String,
    /// `polling` (on a thread now), `idle`, or `exited`.
    pub state: CoroutineState,
    /// Thread polling it now.
    pub polling_tid: Option<u32>,
    /// Polls so far.
    pub polls: u64,
    /// Idle tasks: time since the last poll ended (since creation if never
    /// polled), ns.
    pub idle_ns: Option<u64>,
    /// Polling tasks: time since the current poll started, ns.
    pub polling_ns: Option<u64>,
    /// `idle_ns`/`polling_ns` are lower bounds: the process is gone and
    /// they run up to the last time its ring recorded.
    pub lower_bound: bool,
    /// Wall-clock time the task has been idle (or polling) since, ns since
    /// the Unix epoch.
    pub since_unix_ns: Option<u64>,
    /// Wall-clock time the task was created, ns since the Unix epoch.
    pub created_unix_ns: Option<u64>,
    /// Last snap location (where it awaits).
    pub location: Option<Location>,
    /// Older locations, oldest first (dump `--threads` only).
    pub history: Vec<Location>,
    /// What the Go runtime records of a goroutine (origin `go` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go: Option<Goroutine>,
    /// What CPython's asyncio records of a task (origin `asyncio` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonTask>,
}

/// What CPython's asyncio records of a task (`_asyncio.Task`), read from
/// the interpreter's memory: the [`Coroutine`]'s `id` is the task object's
/// address (`id(task)`), `name` its name, `state` `polling` while its
/// coroutine runs on a thread (`polling_tid`), `idle` while it is
/// suspended, `exited` once it is done. asyncio records no times, so
/// `idle_ns` is absent.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PythonTask {
    /// The future state: `pending`, `cancelled` or `finished`.
    pub state: AsyncioState,
    /// The await chain, innermost first: the frame of each coroutine the
    /// task awaits through, from the innermost `await` out to the task's
    /// own coroutine (empty for a task done, or changing). Tasks awaiting
    /// at one place share one list; in JSON, its index in
    /// [`Report::stacks`].
    #[serde(serialize_with = "stacks::stack_id")]
    #[schemars(with = "u32")]
    pub frames: Arc<[Frame]>,
    /// The future (or task) it awaits: `task_fut_waiter`, or the future
    /// its innermost coroutine awaits.
    pub awaits: Option<GoWaitsOn>,
    /// Its fields or chain changed at every read: only its id is kept.
    pub changing: bool,
}

/// An asyncio future's state (`fut_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AsyncioState {
    /// Not done.
    Pending,
    /// Cancelled.
    Cancelled,
    /// Done, with a result or an exception.
    Finished,
}

/// What the Go runtime records of a goroutine, read from its `g`: the
/// [`Coroutine`]'s `id` is its goid, `polling_tid` the thread of the M
/// running it, `idle_ns` how long it has waited at least (the runtime
/// stamps `waitsince` at the first garbage collection that finds it
/// waiting: absent until one did, and always a lower bound).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Goroutine {
    /// `running` (on a thread now), `runnable` (waits for a thread),
    /// `waiting` (parked: see `wait_reason`) or `syscall` (in a system
    /// call, on its thread).
    pub status: GoStatus,
    /// Why it waits, in the runtime's own words (`chan receive`,
    /// `sync.Mutex.Lock`, `IO wait`, `sleep`, …); waiting goroutines only.
    pub wait_reason: Option<String>,
    /// Its stack, innermost first, from the registers the runtime saved
    /// when it last left its thread (empty: running, or torn).
    /// Goroutines parked at one place share one list; in JSON, its index
    /// in [`Report::stacks`].
    #[serde(serialize_with = "stacks::stack_id")]
    #[schemars(with = "u32")]
    pub stack: Arc<[Frame]>,
    /// Why the stack is shorter than the goroutine's (running, in a
    /// system call, a frame the walk could not follow), if it is.
    pub stack_note: Option<String>,
    /// The `go` statement that created it (its function and line).
    /// Goroutines made by one `go` statement share it.
    pub created_by: Option<Arc<Frame>>,
    /// The channel(s) or semaphore it waits on, as the runtime records it.
    pub waits_on: Option<GoWaitsOn>,
    /// Its pprof labels (`pprof.Do`, `pprof.SetGoroutineLabels`), sorted
    /// by key; empty when none are set or they could not be read.
    pub labels: Arc<[GoLabel]>,
    /// Why its labels are not shown though it has some (they could not be
    /// read whole, or read differently twice).
    pub labels_note: Option<String>,
    /// Its status or saved registers changed each time it was read: only
    /// its id and status are kept.
    pub torn: bool,
}

/// One pprof label of a goroutine, as the program set it (a key or value
/// longer than 512 bytes is cut and ends in `…`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
pub struct GoLabel {
    /// The label's key.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// Whether a group's members have no labels (then none are printed).
fn no_labels(l: &Arc<[GoLabel]>) -> bool {
    l.is_empty()
}

/// A goroutine's status (`g.atomicstatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoStatus {
    /// Running on a thread.
    Running,
    /// Ready, waiting for a thread.
    Runnable,
    /// Parked until something wakes it.
    Waiting,
    /// In a system call, on its thread.
    Syscall,
}

impl GoStatus {
    /// The word used in text output and groups.
    pub fn as_str(self) -> &'static str {
        match self {
            GoStatus::Running => "running",
            GoStatus::Runnable => "runnable",
            GoStatus::Waiting => "waiting",
            GoStatus::Syscall => "syscall",
        }
    }
}

/// What a waiting goroutine waits on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
pub struct GoWaitsOn {
    /// `channel` (a channel operation or select: its sudogs' channels) or
    /// `semaphore` (`sync.Mutex`, `RWMutex`, `WaitGroup`: the address of
    /// the primitive's semaphore word; the runtime records no owner).
    pub kind: GoWaitKind,
    /// The channels' addresses (several for a select), or the semaphore's.
    pub addrs: Vec<u64>,
    /// The global variable the semaphore is in, when it is one.
    pub name: Option<String>,
}

/// What kind of object a goroutine waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoWaitKind {
    /// A channel.
    Channel,
    /// A `sync` primitive's semaphore.
    Semaphore,
    /// A `sync.Cond`'s notify list.
    Cond,
    /// An asyncio future (Python), awaited by a task.
    Future,
    /// An asyncio task (Python), whose end another task awaits.
    Task,
}

/// The runtime a [`Coroutine`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A coroutine slot of the process's librip ring, made by librip's
    /// coroutine API (Rust or C), or by a librip too old to say which API
    /// made it.
    Librip,
    /// A tokio task wrapped by `librip::tokio` (`Traced`,
    /// `spawn_traced`), in a coroutine slot of the process's ring.
    Tokio,
    /// A goroutine, read from the Go runtime's `allgs`.
    Go,
    /// A CPython asyncio task, read from the interpreter's `_asyncio`
    /// module.
    Asyncio,
}

impl Origin {
    /// The runtime's name, as the JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Librip => "librip",
            Origin::Tokio => "tokio",
            Origin::Go => "go",
            Origin::Asyncio => "asyncio",
        }
    }
}

/// A coroutine's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CoroutineState {
    /// Being polled on a thread right now.
    Polling,
    /// Waiting to be woken.
    Idle,
    /// Finished.
    Exited,
}

impl CoroutineState {
    /// The word used in text output and groups.
    pub fn as_str(self) -> &'static str {
        match self {
            CoroutineState::Polling => "polling",
            CoroutineState::Idle => "idle",
            CoroutineState::Exited => "exited",
        }
    }
}

/// Members that share what they are doing and where.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Group {
    /// For a group of coroutines, the runtime they come from (a group
    /// never mixes runtimes); absent for threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// Number of members.
    pub count: usize,
    /// Member ids (tids or task ids), ascending.
    pub ids: Vec<u64>,
    /// Shared state: a thread's (`sleeping`, ...) or a coroutine's
    /// (`idle`, ...); serialized as its word.
    pub state: GroupState,
    /// Shared wait reason (syscall name or kernel function), if any.
    pub wait: Option<String>,
    /// Shortest blocked/idle time among members, ns.
    pub min_ns: Option<u64>,
    /// Whether `min_ns` is only a lower bound for some member.
    pub lower_bound: bool,
    /// The shared location: the frame of the first member's last snap
    /// (members share its place). Serialized as what the text shows,
    /// `file:line function` ([`Frame::describe`]).
    #[serde(serialize_with = "described")]
    #[schemars(with = "Option<String>")]
    pub location: Option<Frame>,
    /// Where the location came from.
    pub source: Option<LocationSource>,
    /// The members' shared user stack, innermost first (empty: none); in
    /// JSON, its index in [`Report::stacks`].
    #[serde(serialize_with = "stacks::stack_id")]
    #[schemars(with = "u32")]
    pub frames: Arc<[Frame]>,
    /// For stacks sampled on CPU: the members' samples, added up.
    pub stack_samples: Option<StackSamples>,
    /// Goroutine groups: the longest wait among members (a lower bound,
    /// like each goroutine's), ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<u64>,
    /// Goroutine groups: the `go` statement that created the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Goroutine groups: what the members wait on, each object with how
    /// many members wait on it, most waited on first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_on: Vec<WaitedOn>,
    /// Goroutine groups: the pprof labels every member has (members with
    /// other labels are other groups); absent when they have none.
    #[serde(default, skip_serializing_if = "no_labels")]
    pub labels: Arc<[GoLabel]>,
}

/// An object goroutines of a group wait on, and how many.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WaitedOn {
    /// The object.
    #[serde(flatten)]
    pub object: GoWaitsOn,
    /// Members waiting on it.
    pub count: usize,
    /// A channel the members wait to receive on or to send on: who else,
    /// of the goroutines read, waits on it (absent for other objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_peers: Option<ChannelPeers>,
}

/// Who else waits on a channel a group waits on, among the goroutines
/// read: a count of what was seen, not of what may come (code that is not
/// running now may still send or receive on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ChannelPeers {
    /// Goroutines parked on the other side: in `chan send` on it for a
    /// group that receives, in `chan receive` on it for one that sends.
    pub other_side: usize,
    /// Goroutines parked in a `select` with a case on it (whether to send
    /// or to receive, the runtime's sudog does not say).
    pub in_select: usize,
}

/// A [`Group`]'s shared state: its members' thread or coroutine state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum GroupState {
    /// A group of threads.
    Thread(ThreadState),
    /// A group of coroutines.
    Coroutine(CoroutineState),
    /// A group of goroutines (their Go status).
    Goroutine(GoStatus),
}

impl GroupState {
    /// The word used in text output and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Thread(s) => s.as_str(),
            GroupState::Coroutine(s) => s.as_str(),
            GroupState::Goroutine(s) => s.as_str(),
        }
    }
}

/// Serializes a group's location as the words the text shows.
fn described<S: serde::Serializer>(f: &Option<Frame>, s: S) -> Result<S::Ok, S::Error> {
    match f {
        Some(f) => s.serialize_some(&f.describe()),
        None => s.serialize_none(),
    }
}

/// What kind of lock a thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    /// A glibc `pthread_mutex_t`.
    Mutex,
    /// A priority-inheritance futex that is not recognisably a glibc mutex.
    PiFutex,
    /// A glibc `pthread_rwlock_t`.
    Rwlock,
    /// A glibc `pthread_cond_t`.
    Condvar,
    /// A glibc (POSIX) semaphore, `sem_t`, recognised by the waiter's
    /// stack (`sem_wait` and its timed forms): a count, with no owner.
    Semaphore,
    /// A thread parked until another wakes it (Rust `thread::park`, an
    /// idle Go M on its note): no lock is held.
    Parked,
    /// Another wait inside a language runtime (a Go runtime lock): no
    /// glibc lock, and no owner is recorded.
    Runtime,
    /// A futex no known lock layout fits.
    Futex,
    /// The exit of a thread (`pthread_join`): the futex is the joined
    /// thread's tid field in its glibc descriptor; the "owner" is that
    /// thread, which wakes the waiter when it exits.
    ThreadExit,
}

/// A futex wait inside a language runtime, recognised by the waiter's
/// stack (the runtime's own functions), never by the futex word's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeWait {
    /// Go: an M (OS thread) with no goroutine to run, asleep on its note
    /// (`runtime.stopm` → `runtime.notesleep`).
    GoIdleM,
    /// Go: a note slept on with a timeout (`runtime.notetsleep`: sysmon,
    /// timers).
    GoTimedNote,
    /// Go: a note slept on for another reason (`runtime.notesleep`).
    GoNote,
    /// Go: a runtime-internal lock (`runtime.lock2`).
    GoRuntimeLock,
    /// Go: another wait in the runtime's futex (`runtime.futexsleep`).
    GoFutex,
    /// Rust: `std::thread::park` or `park_timeout`.
    RustPark,
    /// CPython: acquiring a `threading` lock (`PyThread_acquire_lock_timed`,
    /// a glibc semaphore, which records no owner). A `Condition.wait` is
    /// one too: its waiter acquires a lock of its own.
    PythonLock,
    /// Java: a thread parked by `LockSupport.park` (HotSpot's
    /// `Parker::park`, from `Unsafe_Park`): j.u.c locks, queues, pools.
    JavaPark,
}

impl LockKind {
    /// A word for sentences ("mutex", "rwlock", …).
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::PiFutex => "PI futex",
            LockKind::Rwlock => "rwlock",
            LockKind::Condvar => "condition variable",
            LockKind::Semaphore => "semaphore",
            LockKind::Parked => "parked",
            LockKind::Runtime => "runtime wait",
            LockKind::Futex => "futex",
            LockKind::ThreadExit => "thread exit",
        }
    }
}

impl Frame {
    /// The function and source position to show for this address: the
    /// innermost inlined function when there is one, else the function.
    /// Inlined helpers of librip itself (the C header's inline snap) are
    /// skipped, so a snap is reported at its caller's line.
    pub fn best(&self) -> (Option<&str>, Option<&str>, Option<u32>) {
        let mut best = (self.function.as_deref(), self.file.as_deref(), self.line);
        for i in &self.inlined {
            if is_librip(&i.function, i.file.as_deref()) {
                break;
            }
            best = (Some(&i.function), i.file.as_deref(), i.line);
        }
        best
    }

    /// `file:line function`, `function+0x12`, `module+0x1234` or the bare
    /// address, whichever is the best we know; then the snap's label, if
    /// its site has one: `src/book.rs:88 Book::wait — "waiting"`.
    pub fn describe(&self) -> String {
        let (func, file, line) = self.best();
        let mut s = match (func, file, line) {
            (Some(f), Some(file), Some(line)) => format!("{}:{line} {f}", short_path(file)),
            (None, Some(file), Some(line)) => format!("{}:{line}", short_path(file)),
            (Some(f), _, _) => match self.function_offset {
                Some(off) => format!("{f}+{off:#x}"),
                None => f.to_string(),
            },
            _ => match (&self.module, self.module_offset) {
                (Some(m), Some(off)) => format!("{}+{off:#x}", short_path(m)),
                _ => format!("{:#x}", self.addr),
            },
        };
        if let Some(label) = &self.label {
            s.push_str(&format!(" — \"{label}\""));
        }
        s
    }
}

/// The flavour of a glibc mutex (`__kind`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct MutexFlavor {
    /// `normal`, `recursive`, `errorcheck` or `adaptive`.
    pub kind: &'static str,
    /// `PTHREAD_MUTEX_ROBUST`.
    pub robust: bool,
    /// `PTHREAD_PRIO_INHERIT`.
    pub pi: bool,
    /// `PTHREAD_PRIO_PROTECT`.
    pub pp: bool,
    /// `PTHREAD_PROCESS_SHARED`.
    pub pshared: bool,
}

/// Who holds the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Owner {
    /// A live thread of the target process.
    Thread {
        /// Its id.
        tid: u32,
    },
    /// A thread of another process (a lock in shared memory).
    OtherProcess {
        /// The thread.
        tid: u32,
        /// Its process.
        pid: u32,
    },
    /// The recorded owner is no longer a thread.
    Exited {
        /// The recorded thread id.
        tid: u32,
        /// A robust mutex: its next locker gets `EOWNERDEAD`.
        robust: bool,
    },
    /// Held, but the lock records no owner (rwlock read-locked).
    Readers {
        /// How many readers hold it.
        count: u32,
    },
    /// The lock type records no owner (condition variables), so none is
    /// named.
    NotRecorded {
        /// Why.
        reason: String,
    },
    /// The owner could not be established.
    Unknown {
        /// Why.
        reason: String,
    },
    /// What was read does not hold still: the lock is changing hands, so
    /// no owner is claimed.
    Changing {
        /// What moved.
        cause: LockChange,
    },
}

/// Why a lock's owner is not claimed although one was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LockChange {
    /// The lock read twice, a moment apart, gave two different owners.
    ReadsDisagree,
    /// The waiter was no longer in that wait when its state was read.
    WaitEnded,
    /// The owner read was itself waiting for that lock: it had released
    /// it and queued again (a relock by its owner would not wait: an
    /// error-checking or recursive mutex returns or counts, an rwlock
    /// returns `EDEADLK`).
    OwnerWaitsForIt,
    /// A cycle of waits seen once was gone on a second look a few
    /// milliseconds later: no deadlock.
    CycleGone,
}

impl Owner {
    /// The owning thread, when there is one.
    pub fn tid(&self) -> Option<u32> {
        match self {
            Owner::Thread { tid } => Some(*tid),
            _ => None,
        }
    }
}

/// Whether an inlined function is librip's own snap helper.
pub(crate) fn is_librip(function: &str, file: Option<&str>) -> bool {
    function.starts_with("rip_snap") || file.is_some_and(|f| f.ends_with("librip.h"))
}

/// Keeps the last three components of a path: enough to recognise a
/// source file without the build machine's directories.
pub(crate) fn short_path(p: &str) -> String {
    let parts: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).collect();
    if parts.len() <= 3 {
        return p.to_string();
    }
    parts[parts.len() - 3..].join("/")
}

/// Reports for the unit tests of the stages that compute from one.
#[cfg(test)]
mod tests {
    use super::*;

    /// `Origin::as_str` says what the JSON says.
    #[test]
    fn an_origins_word_is_its_json_name() {
        for o in [Origin::Librip, Origin::Tokio, Origin::Go, Origin::Asyncio] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A live report of process 1 with `threads`, nothing else.
    pub(crate) fn report(threads: Vec<Thread>) -> Report {
        Report {
            schema: SCHEMA_VERSION,
            stacks: StackTable,
            mode: Mode::Pid,
            process: ProcessInfo {
                pid: 1,
                ..Default::default()
            },
            rings: Vec::new(),
            window_ns: 0,
            threads,
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        }
    }
}
