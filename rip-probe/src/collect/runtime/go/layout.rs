//! Where the Go runtime keeps what is read of a goroutine: the offsets of
//! the fields of `runtime.g`, `runtime.m` and `runtime.sudog`, the wait
//! reasons in the runtime's own words, per Go version. A binary with
//! DWARF says its own layout ([`from_dwarf`]); a stripped one is read with
//! the table of its version ([`table`]), and only versions whose table was
//! checked against that version's DWARF are listed: an unlisted version
//! without DWARF is not guessed at.

use std::collections::HashMap;

/// Offsets (bytes) of what is read of the runtime's structures, amd64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `g.stack.lo`, `g.stack.hi`: the goroutine's stack bounds.
    pub(crate) stack_lo: u64,
    pub(crate) stack_hi: u64,
    /// `g.m`: the M (thread) running it, or nil.
    pub(crate) m: u64,
    /// `g.sched.sp`, `g.sched.pc`, `g.sched.bp`: registers saved when it
    /// last left its thread.
    pub(crate) sched_sp: u64,
    pub(crate) sched_pc: u64,
    pub(crate) sched_bp: u64,
    /// `g.syscallsp`, `g.syscallpc`: where it entered its system call.
    pub(crate) syscall_sp: u64,
    pub(crate) syscall_pc: u64,
    /// `g.atomicstatus` (u32).
    pub(crate) status: u64,
    /// `g.goid` (u64).
    pub(crate) goid: u64,
    /// `g.waitsince` (i64, nanotime).
    pub(crate) waitsince: u64,
    /// `g.waitreason` (u8).
    pub(crate) waitreason: u64,
    /// `g.gopc`: the `go` statement that created it.
    pub(crate) gopc: u64,
    /// `g.startpc`: the function it started in.
    pub(crate) startpc: u64,
    /// `g.waiting`: its sudogs while it waits on a channel or semaphore.
    pub(crate) waiting: u64,
    /// `g.labels`: its pprof labels (a pointer to `runtime/pprof`'s
    /// `labelMap`, see [`labels_format`]), nil when none were set.
    pub(crate) labels: u64,
    /// `m.procid`: the M's thread id.
    pub(crate) m_procid: u64,
    /// `sudog.elem`: the semaphore address (semacquire) or the element
    /// slot (channel operations); the address half of the pointer where
    /// the runtime keeps two.
    pub(crate) sudog_elem: u64,
    /// `sudog.c`: the channel (its address).
    pub(crate) sudog_c: u64,
    /// `sudog.isSelect` (bool).
    pub(crate) sudog_is_select: u64,
    /// `sudog.waitlink`: the next sudog of the same goroutine (select).
    pub(crate) sudog_waitlink: u64,
    /// Bytes of `runtime.g` read per goroutine (up to the last field
    /// read).
    pub(crate) g_read: u64,
}

/// The named fields a layout is made of, as `struct.member.member` paths
/// into the runtime's DWARF types; the offsets of the last member of
/// `elem` and `c` (`vu`, the address) where the runtime keeps a
/// `maybeTraceablePtr`.
const G_FIELDS: &[&str] = &[
    "stack",
    "m",
    "sched",
    "syscallsp",
    "syscallpc",
    "atomicstatus",
    "goid",
    "waitsince",
    "waitreason",
    "gopc",
    "startpc",
    "waiting",
    "labels",
];

/// Member offsets of the runtime's structures, as a binary's DWARF says:
/// `(struct name, member name) → (offset, member type name)`.
pub(crate) type Members = HashMap<(String, String), (u64, String)>;

/// The structures [`from_dwarf`] needs.
pub(crate) const STRUCTS: &[&str] = &[
    "runtime.g",
    "runtime.m",
    "runtime.sudog",
    "runtime.gobuf",
    "runtime.stack",
    "runtime.maybeTraceablePtr",
    "runtime.maybeTraceableChan",
];

/// The layout the DWARF members say, or what is missing.
pub(crate) fn from_dwarf(m: &Members) -> Result<Layout, String> {
    let at = |s: &str, f: &str| {
        m.get(&(s.to_string(), f.to_string()))
            .map(|(o, _)| *o)
            .ok_or_else(|| format!("no {s}.{f} in the binary's DWARF"))
    };
    let ty = |s: &str, f: &str| {
        m.get(&(s.to_string(), f.to_string()))
            .map(|(_, t)| t.clone())
    };
    for f in G_FIELDS {
        at("runtime.g", f)?;
    }
    // A pointer the runtime may hide from the GC is `{vp, vu}`: `vu` is the
    // address it means. The runtimes that have the type keep `sudog.elem`
    // and `sudog.c` in it (their type names may be in another unit).
    let hidden = at("runtime.maybeTraceablePtr", "vu").ok();
    let ptr = |s: &str, f: &str| -> Result<u64, String> {
        let base = at(s, f)?;
        let typed = matches!(
            ty(s, f).as_deref(),
            Some("runtime.maybeTraceablePtr" | "runtime.maybeTraceableChan")
        );
        match hidden {
            Some(vu) if typed || f == "elem" || f == "c" => Ok(base + vu),
            _ => Ok(base),
        }
    };
    let sched = at("runtime.g", "sched")?;
    let stack = at("runtime.g", "stack")?;
    let mut l = Layout {
        stack_lo: stack + at("runtime.stack", "lo")?,
        stack_hi: stack + at("runtime.stack", "hi")?,
        m: at("runtime.g", "m")?,
        sched_sp: sched + at("runtime.gobuf", "sp")?,
        sched_pc: sched + at("runtime.gobuf", "pc")?,
        sched_bp: sched + at("runtime.gobuf", "bp")?,
        syscall_sp: at("runtime.g", "syscallsp")?,
        syscall_pc: at("runtime.g", "syscallpc")?,
        status: at("runtime.g", "atomicstatus")?,
        goid: at("runtime.g", "goid")?,
        waitsince: at("runtime.g", "waitsince")?,
        waitreason: at("runtime.g", "waitreason")?,
        gopc: at("runtime.g", "gopc")?,
        startpc: at("runtime.g", "startpc")?,
        waiting: at("runtime.g", "waiting")?,
        labels: at("runtime.g", "labels")?,
        m_procid: at("runtime.m", "procid")?,
        sudog_elem: ptr("runtime.sudog", "elem")?,
        sudog_c: ptr("runtime.sudog", "c")?,
        sudog_is_select: at("runtime.sudog", "isSelect")?,
        sudog_waitlink: at("runtime.sudog", "waitlink")?,
        g_read: 0,
    };
    l.g_read = g_read(&l);
    Ok(l)
}

/// Bytes of `runtime.g` to read: past the last field read.
fn g_read(l: &Layout) -> u64 {
    [
        l.stack_hi,
        l.m,
        l.sched_sp,
        l.sched_pc,
        l.sched_bp,
        l.syscall_sp,
        l.syscall_pc,
        l.status,
        l.goid,
        l.waitsince,
        l.gopc,
        l.startpc,
        l.waiting,
        l.labels,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
        + 8
}

/// `l` as the Rust of a table for Go `version`: what a test prints when
/// a version's table is missing or differs from its DWARF.
#[cfg(test)]
pub(crate) fn source(l: &Layout, version: &str) -> String {
    let name = format!("GO_1_{}", minor(version).unwrap_or(0));
    let body = format!("{l:#?}");
    let body = body.trim_start_matches("Layout ");
    format!(
        "/// {version} on amd64, checked against its DWARF.\nconst {name}: Layout = Layout {body};"
    )
}

/// Go 1.17 to 1.20 on amd64 (`gobuf` with `ret`, no `g.syscallbp`),
/// checked against the DWARF of 1.19.8. The `g`, `m`, `gobuf` and `sudog`
/// of 1.17, 1.18 and 1.20 (their runtime2.go) hold the same fields, of the
/// same sizes, in the same order up to `g.labels`: only names and atomic
/// wrappers differ (`runnableStamp` became `trackingStamp` in 1.19,
/// `atomicstatus` an `atomic.Uint32` and `goid` a `uint64` in 1.20). No
/// toolchain of theirs installs here to build with DWARF: their tables are
/// checked on the stripped binaries of esbuild each built (`go_table`'s
/// tests) and read live (tests/tests/go_releases.rs).
const GO_1_19: Layout = Layout {
    stack_lo: 0,
    stack_hi: 8,
    m: 48,
    sched_sp: 56,
    sched_pc: 64,
    sched_bp: 104,
    syscall_sp: 112,
    syscall_pc: 120,
    status: 144,
    goid: 152,
    waitsince: 168,
    waitreason: 176,
    gopc: 296,
    startpc: 312,
    waiting: 328,
    labels: 360,
    m_procid: 72,
    sudog_elem: 24,
    sudog_c: 80,
    sudog_is_select: 52,
    sudog_waitlink: 64,
    g_read: 368,
};

/// Go 1.21 and 1.22 on amd64 (`g.gopc` 16 bytes earlier than 1.19's),
/// checked against the DWARF of 1.21.13 and 1.22.10.
const GO_1_21: Layout = Layout {
    stack_lo: 0,
    stack_hi: 8,
    m: 48,
    sched_sp: 56,
    sched_pc: 64,
    sched_bp: 104,
    syscall_sp: 112,
    syscall_pc: 120,
    status: 144,
    goid: 152,
    waitsince: 168,
    waitreason: 176,
    gopc: 280,
    startpc: 296,
    waiting: 312,
    labels: 344,
    m_procid: 72,
    sudog_elem: 24,
    sudog_c: 80,
    sudog_is_select: 52,
    sudog_waitlink: 64,
    g_read: 352,
};

/// Go 1.23 and 1.24 on amd64 (`g.syscallbp` before the status), checked
/// against the DWARF of 1.23.9 and 1.24.11.
const GO_1_23: Layout = Layout {
    stack_lo: 0,
    stack_hi: 8,
    m: 48,
    sched_sp: 56,
    sched_pc: 64,
    sched_bp: 104,
    syscall_sp: 112,
    syscall_pc: 120,
    status: 152,
    goid: 160,
    waitsince: 176,
    waitreason: 184,
    gopc: 288,
    startpc: 304,
    waiting: 320,
    labels: 352,
    m_procid: 72,
    sudog_elem: 24,
    sudog_c: 80,
    sudog_is_select: 52,
    sudog_waitlink: 64,
    g_read: 360,
};

/// Go 1.25 on amd64 (`gobuf` without `ret`), checked against the DWARF of
/// 1.25.5.
const GO_1_25: Layout = Layout {
    stack_lo: 0,
    stack_hi: 8,
    m: 48,
    sched_sp: 56,
    sched_pc: 64,
    sched_bp: 96,
    syscall_sp: 104,
    syscall_pc: 112,
    status: 144,
    goid: 152,
    waitsince: 168,
    waitreason: 176,
    gopc: 280,
    startpc: 296,
    waiting: 312,
    labels: 344,
    m_procid: 64,
    sudog_elem: 24,
    sudog_c: 80,
    sudog_is_select: 52,
    sudog_waitlink: 64,
    g_read: 352,
};

/// Go 1.26 and 1.27 on amd64 (the sudog's pointers hidden from the GC),
/// checked against the DWARF of 1.26.6 and 1.27.3.
const GO_1_27: Layout = Layout {
    stack_lo: 0,
    stack_hi: 8,
    m: 48,
    sched_sp: 56,
    sched_pc: 64,
    sched_bp: 96,
    syscall_sp: 104,
    syscall_pc: 112,
    status: 144,
    goid: 152,
    waitsince: 168,
    waitreason: 176,
    gopc: 288,
    startpc: 304,
    waiting: 320,
    labels: 352,
    m_procid: 64,
    sudog_elem: 32,
    sudog_c: 96,
    sudog_is_select: 60,
    sudog_waitlink: 72,
    g_read: 360,
};

/// The layout of Go `version` (`go1.19.8`), for binaries without DWARF:
/// only the minor versions whose table was checked against that
/// version's DWARF (`symbolize::go_table`'s test, which prints the table
/// of a version it finds none for), or, for 1.17, 1.18 and 1.20, derived
/// from their runtime's source and checked on real binaries they built.
/// Older and newer versions are refused, not guessed at.
pub(crate) fn table(version: &str) -> Option<Layout> {
    match minor(version)? {
        17..=20 => Some(GO_1_19),
        21 | 22 => Some(GO_1_21),
        23 | 24 => Some(GO_1_23),
        25 => Some(GO_1_25),
        26 | 27 => Some(GO_1_27),
        _ => None,
    }
}

/// The minor versions [`table`] has a checked layout for, as the
/// refusal of another names them.
pub(crate) const TABLES: &str = "go1.17 to go1.27";

/// The minor version of a Go version string: `go1.19.8` → 19.
pub(crate) fn minor(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// How `runtime/pprof` keeps a goroutine's labels, where `g.labels`
/// points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LabelsFormat {
    /// Up to Go 1.23: a `labelMap` is a `map[string]string`: `g.labels`
    /// points to the map's header pointer.
    Map,
    /// From Go 1.24: a `labelMap` is a struct holding a slice of
    /// `{key, value string}`, sorted by key: `g.labels` points to it.
    Slice,
}

/// How Go `version` keeps pprof labels (runtime/pprof's label.go).
pub(crate) fn labels_format(version: &str) -> Option<LabelsFormat> {
    match minor(version)? {
        9..=23 => Some(LabelsFormat::Map),
        _ => Some(LabelsFormat::Slice),
    }
}

/// Go 1.17 to 1.19's wait reasons (runtime2.go's `waitReasonStrings`).
const REASONS_1_19: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "timer goroutine (idle)",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "preempted",
    "debug call",
];

/// Go 1.20's and 1.21's wait reasons, by number (1.21's
/// `waitReasonStrings`, read from a 1.21.13 binary; 1.20's runtime2.go
/// lists the same, `sync.Mutex.Lock` among them since 1.20).
const REASONS_1_21: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
];

/// Go 1.22's wait reasons, by number (its `waitReasonStrings`, read from
/// a 1.22.10 binary).
const REASONS_1_22: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
];

/// Go 1.23's wait reasons, by number (its `waitReasonStrings`, read from
/// a 1.23.9 binary).
const REASONS_1_23: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
    "GC weak to strong wait",
];

/// Go 1.24's wait reasons, by number (its `waitReasonStrings`, read from
/// a 1.24.11 binary).
const REASONS_1_24: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "sync.WaitGroup.Wait",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
    "GC weak to strong wait",
    "synctest.Run",
    "synctest.Wait",
    "chan receive (synctest)",
    "chan send (synctest)",
    "select (synctest)",
];

/// Go 1.25's wait reasons, by number (its `waitReasonStrings`, read from
/// a 1.25.5 binary).
const REASONS_1_25: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "GOMAXPROCS updater (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "sync.WaitGroup.Wait",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
    "GC weak to strong wait",
    "synctest.Run",
    "synctest.Wait",
    "chan receive (durable)",
    "chan send (durable)",
    "select (durable)",
    "sync.WaitGroup.Wait (durable)",
    "cleanup wait",
];

/// Go 1.26's wait reasons, by number (its `waitReasonStrings`, read from
/// a 1.26.6 binary).
const REASONS_1_26: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "finalizer wait",
    "force gc (idle)",
    "GOMAXPROCS updater (idle)",
    "semacquire",
    "sleep",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "select (no cases)",
    "select",
    "chan receive",
    "chan send",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "sync.WaitGroup.Wait",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
    "GC weak to strong wait",
    "synctest.Run",
    "synctest.Wait",
    "chan receive (durable)",
    "chan send (durable)",
    "select (durable)",
    "sync.WaitGroup.Wait (durable)",
    "cleanup wait",
];

/// Go 1.27's wait reasons, in the order of its `waitReason` constants (its
/// `waitReasonStrings` literal lists them in another).
const REASONS_1_27: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "finalizer wait",
    "force gc (idle)",
    "GOMAXPROCS updater (idle)",
    "semacquire",
    "sleep",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "select (no cases)",
    "select",
    "chan receive",
    "chan send",
    "sync.Cond.Wait",
    "sync.Mutex.Lock",
    "sync.RWMutex.RLock",
    "sync.RWMutex.Lock",
    "sync.WaitGroup.Wait",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "GC worker (active)",
    "preempted",
    "debug call",
    "GC mark termination",
    "stopping the world",
    "flushing proc caches",
    "trace goroutine status",
    "trace proc status",
    "page trace flush",
    "coroutine",
    "GC weak to strong wait",
    "synctest.Run",
    "synctest.Wait",
    "chan receive (durable)",
    "chan send (durable)",
    "select (durable)",
    "sync.WaitGroup.Wait (durable)",
    "cleanup wait",
];

/// The wait reasons of Go `version`, by number, where known without
/// reading the process (its `runtime.waitReasonStrings` is read instead
/// when the binary names it).
pub(crate) fn reasons(version: &str) -> Option<&'static [&'static str]> {
    match minor(version)? {
        17..=19 => Some(REASONS_1_19),
        20 | 21 => Some(REASONS_1_21),
        22 => Some(REASONS_1_22),
        23 => Some(REASONS_1_23),
        24 => Some(REASONS_1_24),
        25 => Some(REASONS_1_25),
        26 => Some(REASONS_1_26),
        27 => Some(REASONS_1_27),
        _ => None,
    }
}

/// A goroutine's status, from `g.atomicstatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Runnable,
    Running,
    Syscall,
    Waiting,
    /// Not a goroutine to report: idle, dead, or being copied (a status
    /// the runtime holds only for a moment).
    Skip,
    /// A value no supported runtime uses: the read is torn or the layout
    /// wrong.
    Unknown,
}

/// The status word's meaning (the `_Gscan` bit: the GC is scanning it; the
/// status below it still holds).
pub(crate) fn status(word: u32) -> Status {
    match word & !0x1000 {
        1 => Status::Runnable,
        2 => Status::Running,
        3 => Status::Syscall,
        // _Gwaiting, _Gpreempted (suspended; waits to be resumed),
        // _Gleaked (waiting, and found unreachable by the leak detector).
        4 | 9 | 10 => Status::Waiting,
        // _Gidle, _Gmoribund_unused, _Gdead, _Genqueue_unused,
        // _Gcopystack, _Gdeadextra.
        0 | 5 | 6 | 7 | 8 | 11 => Status::Skip,
        _ => Status::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_pick_their_tables() {
        assert_eq!(minor("go1.19.8"), Some(19));
        assert_eq!(minor("go1.27.3"), Some(27));
        assert_eq!(minor("go1.22rc1"), Some(22));
        assert_eq!(minor("devel +abc"), None);
        assert_eq!(table("go1.19.8"), Some(GO_1_19));
        assert_eq!(table("go1.27.3"), Some(GO_1_27));
        assert_eq!(table("go1.22.10"), Some(GO_1_21));
        assert_eq!(table("go1.17.5"), Some(GO_1_19));
        assert_eq!(table("go1.18.1"), Some(GO_1_19));
        assert_eq!(table("go1.20.4"), Some(GO_1_19));
        assert_eq!(table("go1.16.15"), None, "never guessed");
        assert_eq!(table("go1.28.0"), None, "never guessed");
        assert_eq!(g_read(&GO_1_19), GO_1_19.g_read);
        assert_eq!(g_read(&GO_1_27), GO_1_27.g_read);
    }

    #[test]
    fn wait_reasons_are_the_runtimes_words() {
        let r19 = reasons("go1.19.8").unwrap();
        assert_eq!(
            (r19[2], r19[14], r19[18], r19[19]),
            ("IO wait", "chan receive", "semacquire", "sleep")
        );
        let r27 = reasons("go1.27.3").unwrap();
        assert_eq!(
            (r27[18], r27[19], r27[20]),
            ("select", "chan receive", "chan send")
        );
        assert_eq!(r27[22], "sync.Mutex.Lock");
        assert_eq!(r27[25], "sync.WaitGroup.Wait");
    }

    #[test]
    fn statuses() {
        assert_eq!(status(4), Status::Waiting);
        assert_eq!(status(0x1004), Status::Waiting);
        assert_eq!(status(6), Status::Skip);
        assert_eq!(status(3), Status::Syscall);
        assert_eq!(status(77), Status::Unknown);
    }
}
