//! Where CPython keeps what rip reads, per version: the one place that
//! knows struct layouts. 3.8, 3.9, 3.10, 3.11 and 3.12 (x86-64, the
//! layouts of their releases, which keep them within a version) were read
//! off interpreters built with debug information, with gdb (`ptype/o`);
//! each table is checked against a running interpreter of its version by
//! the tests.
//!
//! 3.8–3.10 keep their frames as heap objects (`PyFrameObject`, chained
//! by `f_back` from `PyThreadState.frame`), each run by a native
//! evaluation call of its own, name code by `co_name` (there is no
//! `co_qualname`), and record no kernel thread id in the thread state:
//! their layout is in [`Legacy`].
//!
//! From 3.13 the interpreter publishes the offsets of its own structures
//! in `_Py_DebugOffsets`, the first field of `_PyRuntime` (cookie
//! `xdebugpy`, `PY_VERSION_HEX`, then each structure's size and field
//! offsets): the walk of interpreters, thread states, frames and code
//! objects, the GIL and `sys.modules` are taken from there, each offset
//! checked against the size its structure is published with ([`parse_debug`]).
//! What it does not publish (generators, `_asyncio`'s tasks, instances'
//! inline attribute values) stays in a table of that version.

use std::collections::HashMap;

/// Byte offsets into CPython's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offsets {
    /// `_PyRuntime.interpreters.head`.
    pub(crate) runtime_interpreters_head: u64,
    /// `PyInterpreterState.next`.
    pub(crate) interp_next: u64,
    /// `PyInterpreterState.threads.head`.
    pub(crate) interp_threads_head: u64,
    /// `PyThreadState.next`.
    pub(crate) tstate_next: u64,
    /// `PyThreadState.thread_id` (`pthread_self()`, what `threading`
    /// calls the ident).
    pub(crate) tstate_thread_id: u64,
    /// `PyThreadState.native_thread_id` (the kernel's tid); `None` before
    /// 3.11, where the tid is read from the C library's thread descriptor
    /// the `thread_id` points to (see [`PTHREAD_TID`]).
    pub(crate) tstate_native_thread_id: Option<u64>,
    /// `PyThreadState.cframe` (3.11, 3.12); `None` from 3.13, where the
    /// thread state points to its frame itself.
    pub(crate) tstate_cframe: Option<u64>,
    /// `_PyCFrame.current_frame`; from 3.13 `PyThreadState.current_frame`.
    pub(crate) cframe_current_frame: u64,
    /// `_PyInterpreterFrame.f_code`.
    pub(crate) frame_code: u64,
    /// `_PyInterpreterFrame.previous`.
    pub(crate) frame_previous: u64,
    /// `_PyInterpreterFrame.prev_instr` (3.11, 3.12: the instruction
    /// running); from 3.13 `.instr_ptr` (the instruction running, or the
    /// next one of a suspended frame). Either gives the line the same way.
    pub(crate) frame_prev_instr: u64,
    /// `_PyInterpreterFrame.owner`.
    pub(crate) frame_owner: u64,
    /// How the frames one `_PyEval_EvalFrameDefault` call runs end.
    pub(crate) entry: Entry,
    /// `PyCodeObject.co_filename`.
    pub(crate) code_filename: u64,
    /// `PyCodeObject.co_qualname` (before 3.11, `co_name`).
    pub(crate) code_qualname: u64,
    /// `PyCodeObject.co_firstlineno`.
    pub(crate) code_firstlineno: u64,
    /// `PyCodeObject.co_linetable` (3.8, 3.9: `co_lnotab`).
    pub(crate) code_linetable: u64,
    /// How that table gives a line.
    pub(crate) lines: Lines,
    /// `PyCodeObject.co_code_adaptive`: where the bytecode starts (before
    /// 3.11, `sizeof(PyCodeObject)`: what one read of a code object copies).
    pub(crate) code_adaptive: u64,
    /// `sizeof(PyASCIIObject)`: where an ASCII string's characters are.
    pub(crate) ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings'
    /// characters are.
    pub(crate) compact_size: u64,
    /// Where the GIL's state is.
    pub(crate) gil: Gil,
    /// Where the cyclic garbage collector's state is.
    pub(crate) gc: Gc,
    /// What asyncio's tasks are read through.
    pub(crate) objects: Objects,
    /// 3.8–3.10: frames as heap objects (the interpreter-frame fields
    /// above are then unused).
    pub(crate) legacy: Option<Legacy>,
}

/// The encoding of a code object's line table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lines {
    /// 3.11+: `co_linetable`'s location entries
    /// ([`super::decode::line_at`]).
    Locations,
    /// 3.8, 3.9: `co_lnotab`'s (address increment, line increment) pairs
    /// ([`super::decode::line_at_lnotab`]).
    Lnotab,
    /// 3.10: `co_linetable`'s (bytes, line delta) pairs
    /// ([`super::decode::line_at_3_10`]).
    Pairs,
}

/// The layout of 3.8–3.10's frames and coroutines (`PyFrameObject`,
/// `PyGenObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Legacy {
    /// `PyThreadState.frame`: the innermost frame.
    pub(crate) tstate_frame: u64,
    /// `PyThreadState.interp`: checked against the interpreter the thread
    /// state was found in, to tell a wrong table from a right one.
    pub(crate) tstate_interp: u64,
    /// `PyFrameObject.f_back`.
    pub(crate) f_back: u64,
    /// `PyFrameObject.f_code`.
    pub(crate) f_code: u64,
    /// `PyFrameObject.f_valuestack`.
    pub(crate) f_valuestack: u64,
    /// Where the top of a suspended frame's value stack is.
    pub(crate) stack: Stack,
    /// `PyFrameObject.f_lasti`: the last instruction run (-1 before the
    /// first).
    pub(crate) f_lasti: u64,
    /// `f_lasti` counts 2-byte code units (3.10), not bytes (3.8, 3.9).
    pub(crate) lasti_units: bool,
    /// How a coroutine's frame says whether it runs, or has not started.
    pub(crate) state: FrameState,
    /// `PyGenObject.gi_frame` (a pointer; null once it is done).
    pub(crate) gen_frame: u64,
    /// `PyCodeObject.co_code` (a `bytes`): the instructions, where
    /// `YIELD_FROM` after the last one says a coroutine waits in an
    /// `await`.
    pub(crate) code_code: u64,
}

/// Where a suspended 3.8–3.10 frame's value stack ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stack {
    /// 3.8, 3.9: `f_stacktop`, a pointer past the top (null while it runs).
    Top(u64),
    /// 3.10: `f_stackdepth`, an `int` count from `f_valuestack`.
    Depth(u64),
}

/// How a 3.8–3.10 coroutine's frame says it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameState {
    /// 3.8, 3.9: `PyFrameObject.f_executing` (a byte, 1 while it runs);
    /// not started while `f_lasti` is -1.
    Executing(u64),
    /// 3.10: `PyFrameObject.f_state` (a signed byte: `FRAME_CREATED` -2,
    /// `FRAME_SUSPENDED` -1, `FRAME_EXECUTING` 0, later ones done).
    State(u64),
}

/// The opcode of `YIELD_FROM` in 3.8–3.10 (`Include/opcode.h`).
pub(crate) const YIELD_FROM: u8 = 72;

/// glibc's thread descriptor (`struct pthread`), which a thread state's
/// `thread_id` (`pthread_self()`) points to.
pub(crate) use crate::collect::locks::{PTHREAD_SELF, PTHREAD_TID};

/// Where the objects asyncio's tasks are found through keep what rip
/// reads: `sys.modules`, dicts, an instance's attributes, sets, weak
/// references, types, coroutines and `_asyncio`'s C tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Objects {
    /// `PyInterpreterState.modules` (3.11), `.imports.modules` (3.12):
    /// `sys.modules`.
    pub(crate) interp_modules: u64,
    /// `PyHeapTypeObject.ht_cached_keys`: the keys instances of a class
    /// share while their attributes are kept as values only.
    pub(crate) type_cached_keys: u64,
    /// Where an instance keeps its attributes (classes with a managed
    /// dict).
    pub(crate) managed: Managed,
    /// `PyGenObject.gi_iframe` (a coroutine's): its frame, inline.
    pub(crate) gen_iframe: u64,
    /// `PyGenObject.gi_frame_state`.
    pub(crate) gen_frame_state: u64,
    /// `_PyInterpreterFrame.stacktop`.
    pub(crate) frame_stacktop: u64,
    /// `_PyInterpreterFrame.localsplus`.
    pub(crate) frame_localsplus: u64,
    /// `_PyGenObject`'s `gi_frame_state` of a coroutine not started yet
    /// (`FRAME_CREATED`: -2 in 3.11 and 3.12, -3 from 3.13).
    pub(crate) frame_created: i8,
    /// How a suspended coroutine is known to wait in an `await`.
    pub(crate) awaiting: Awaiting,
    /// The names, in the `_asyncio` module, of the sets of live tasks:
    /// 3.11's `_all_tasks` (a `WeakSet`); 3.12's `_scheduled_tasks` (a
    /// `WeakSet`) and `_eager_tasks` (a `set`).
    pub(crate) registries: &'static [&'static str],
    /// How a task's default name is kept.
    pub(crate) long: Long,
    /// Where a split dict's values start in what `ma_values` points to
    /// (0 in 3.11 and 3.12; 8 from 3.13, after the values' header).
    pub(crate) dict_values_at: u64,
    /// `_asyncio.Task`'s fields.
    pub(crate) task: TaskLayout,
    /// How a dict's keys object lays out its entries.
    pub(crate) keys: Keys,
}

/// The layout of `PyDictKeysObject`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    /// 3.11+: `dk_log2_size` (byte 8), `dk_log2_index_bytes` (byte 9),
    /// `dk_kind` (byte 10), `dk_nentries` at 24, the indices from 32.
    Log2,
    /// 3.8–3.10: `dk_size` at 8, `dk_nentries` at 32, the indices from 40,
    /// each 1, 2, 4 or 8 bytes wide as `dk_size` needs; every entry is
    /// (hash, key, value).
    Sized,
}

/// How a suspended coroutine's frame says it waits in an `await` (what
/// it awaits is then on top of its value stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaiting {
    /// 3.11, 3.12: its next instruction (two bytes after `prev_instr`) is
    /// `RESUME` (one of these opcodes: plain, and the forms it may be
    /// rewritten to) with an argument of 2 or more.
    Resume([u8; 2]),
    /// 3.13: its `gi_frame_state` is `FRAME_SUSPENDED_YIELD_FROM` (this
    /// value).
    State(i8),
}

/// `_asyncio.Task`'s fields (`TaskObj`) that rip reads, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskLayout {
    /// `task_state` (`fut_state`, an `int`).
    pub(crate) state: usize,
    /// `task_fut_waiter`.
    pub(crate) fut_waiter: usize,
    /// `task_coro`.
    pub(crate) coro: usize,
    /// `task_name`.
    pub(crate) name: usize,
    /// `sizeof(TaskObj)`: what one read of a task copies.
    pub(crate) size: usize,
}

/// `TaskObj` in 3.11 and 3.12.
const TASK_3_11: TaskLayout = TaskLayout {
    state: 88,
    fut_waiter: 128,
    coro: 136,
    name: 144,
    size: 176,
};

/// Where an instance of a class keeps its attribute dict or values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Managed {
    /// 3.11: the values array at `obj - 32`, the dict (when one was
    /// made) at `obj - 24`.
    Split,
    /// 3.12: one word at `obj - 24`, the values array + 1 when odd, else
    /// the dict.
    Tagged,
    /// 3.8–3.10: the dict at the offset its type's `tp_dictoffset` says.
    DictOffset,
    /// 3.13: the values inline after the object (at `tp_basicsize`, with
    /// a header whose 4th byte says they are valid, the values from byte
    /// 8) when its type has `Py_TPFLAGS_INLINE_VALUES`; else, or when not
    /// valid, the dict at `obj - 24`.
    Inline,
}

/// How an `int` keeps its size (30-bit digits from offset 24 in both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Long {
    /// 3.11: `ob_size` at 16, negative for negative numbers.
    Size,
    /// 3.12: `long_value.lv_tag` at 16: digits << 3, sign in the low bits.
    Tag,
}

/// How the interpreter frames run by one native evaluation call are
/// delimited in the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// 3.11: the outermost has `_PyInterpreterFrame.is_entry` set (a
    /// byte at this offset).
    IsEntry(u64),
    /// 3.12+: a shim frame owned by the C stack
    /// (`owner == FRAME_OWNED_BY_CSTACK`, this value) sits below them.
    CStackOwner(u8),
}

/// Where the GIL's `locked` flag and `last_holder` thread state are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gil {
    /// 3.11: one GIL, in `_PyRuntime.ceval.gil`, at these offsets from
    /// `_PyRuntime`.
    Runtime {
        /// `_PyRuntime.ceval.gil.locked`.
        locked: u64,
        /// `_PyRuntime.ceval.gil.last_holder`.
        last_holder: u64,
    },
    /// 3.12: each interpreter points to its GIL
    /// (`PyInterpreterState.ceval.gil`).
    Interpreter {
        /// `PyInterpreterState.ceval.gil`.
        pointer: u64,
        /// `_gil_runtime_state.locked`.
        locked: u64,
        /// `_gil_runtime_state.last_holder`.
        last_holder: u64,
    },
}

/// `_gil_runtime_state` (the same from 3.8 to 3.13): `last_holder`
/// follows `interval`; `switch_number` counts the times the GIL changed
/// hands; `cond` and `mutex`, what `take_gil` sleeps on, span these bytes
/// (then `switch_cond` and `switch_mutex`, which `drop_gil` sleeps on
/// while it hands the GIL over).
pub(crate) const GIL_LAST_HOLDER: u64 = 8;
pub(crate) const GIL_SWITCH_NUMBER: u64 = 24;
pub(crate) const GIL_TAKE: std::ops::Range<u64> = 32..120;

/// Where the cyclic garbage collector's state (`struct
/// _gc_runtime_state`) is, and its `collecting` flag in it (an `int`, 1
/// from the start of a collection to its end, the callbacks and
/// finalizers it calls included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gc {
    /// Which structure holds it.
    pub(crate) at: GcAt,
    /// `_gc_runtime_state.collecting`.
    pub(crate) collecting: u64,
}

/// The structure holding the GC's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GcAt {
    /// 3.8: one collector, `_PyRuntime.gc`, at this offset.
    Runtime(u64),
    /// 3.9 and later: each interpreter's, `PyInterpreterState.gc`.
    Interpreter(u64),
}

/// `_gc_runtime_state.collecting`, the same from 3.8 to 3.13.
const GC_COLLECTING: u64 = 200;

/// CPython 3.11.
const V3_11: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_next: 0,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_native_thread_id: Some(160),
    tstate_cframe: Some(56),
    cframe_current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_prev_instr: 56,
    frame_owner: 69,
    entry: Entry::IsEntry(68),
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 72,
    code_linetable: 136,
    lines: Lines::Locations,
    code_adaptive: 184,
    ascii_size: 48,
    compact_size: 72,
    gil: Gil::Runtime {
        locked: 376,
        last_holder: 368,
    },
    gc: Gc {
        at: GcAt::Interpreter(648),
        collecting: GC_COLLECTING,
    },
    objects: Objects {
        interp_modules: 888,
        type_cached_keys: 872,
        managed: Managed::Split,
        gen_iframe: 80,
        gen_frame_state: 75,
        frame_stacktop: 64,
        frame_localsplus: 72,
        frame_created: -2,
        // RESUME, RESUME_QUICK.
        awaiting: Awaiting::Resume([151, 150]),
        registries: &["_all_tasks"],
        long: Long::Size,
        dict_values_at: 0,
        task: TASK_3_11,
        keys: Keys::Log2,
    },
    legacy: None,
};

/// CPython 3.12.
const V3_12: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_next: 0,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_thread_id: 136,
    tstate_native_thread_id: Some(144),
    tstate_cframe: Some(56),
    cframe_current_frame: 0,
    frame_code: 0,
    frame_previous: 8,
    frame_prev_instr: 56,
    frame_owner: 70,
    entry: Entry::CStackOwner(3),
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 68,
    code_linetable: 136,
    lines: Lines::Locations,
    code_adaptive: 192,
    ascii_size: 40,
    compact_size: 56,
    gil: Gil::Interpreter {
        pointer: 384,
        locked: 16,
        last_holder: 8,
    },
    gc: Gc {
        at: GcAt::Interpreter(112),
        collecting: GC_COLLECTING,
    },
    objects: Objects {
        interp_modules: 944,
        type_cached_keys: 880,
        managed: Managed::Tagged,
        gen_iframe: 72,
        gen_frame_state: 67,
        frame_stacktop: 64,
        frame_localsplus: 72,
        frame_created: -2,
        // RESUME, INSTRUMENTED_RESUME.
        awaiting: Awaiting::Resume([151, 240]),
        registries: &["_scheduled_tasks", "_eager_tasks"],
        long: Long::Tag,
        dict_values_at: 0,
        task: TASK_3_11,
        keys: Keys::Log2,
    },
    legacy: None,
};

/// What 3.8–3.10 share: their thread states, code objects and strings,
/// and the fields of the newer tables the frame walk of [`Legacy`] does
/// not use (set to the `PyFrameObject` fields they correspond to).
const OLD: Offsets = Offsets {
    runtime_interpreters_head: 32,
    interp_next: 0,
    // PyInterpreterState.tstate_head.
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_thread_id: 176,
    tstate_native_thread_id: None,
    tstate_cframe: None,
    cframe_current_frame: 24,
    frame_code: 32,
    frame_previous: 24,
    frame_prev_instr: 104,
    frame_owner: 0,
    entry: Entry::IsEntry(0),
    code_filename: 104,
    // co_name.
    code_qualname: 112,
    code_firstlineno: 40,
    // co_lnotab (3.8, 3.9), co_linetable (3.10).
    code_linetable: 120,
    lines: Lines::Lnotab,
    // sizeof(PyCodeObject).
    code_adaptive: 176,
    ascii_size: 48,
    compact_size: 72,
    gil: Gil::Runtime {
        locked: 368,
        last_holder: 360,
    },
    // PyInterpreterState.gc (3.9, 3.10).
    gc: Gc {
        at: GcAt::Interpreter(616),
        collecting: GC_COLLECTING,
    },
    objects: Objects {
        interp_modules: 856,
        type_cached_keys: 0,
        managed: Managed::DictOffset,
        gen_iframe: 0,
        gen_frame_state: 0,
        frame_stacktop: 0,
        frame_localsplus: 0,
        frame_created: 0,
        awaiting: Awaiting::State(0),
        registries: &["_all_tasks"],
        long: Long::Size,
        dict_values_at: 0,
        task: TASK_3_10,
        keys: Keys::Sized,
    },
    legacy: Some(LEGACY_3_8),
};

/// `PyFrameObject` and `PyGenObject` of 3.8 and 3.9.
const LEGACY_3_8: Legacy = Legacy {
    tstate_frame: 24,
    tstate_interp: 16,
    f_back: 24,
    f_code: 32,
    f_valuestack: 64,
    stack: Stack::Top(72),
    f_lasti: 104,
    lasti_units: false,
    state: FrameState::Executing(116),
    gen_frame: 16,
    code_code: 48,
};

/// `TaskObj` of 3.8, 3.9 (`task_cancel_msg` and the cancelled exception's
/// state added) and 3.10 (`task_exception_tb` added).
const TASK_3_8: TaskLayout = TaskLayout {
    state: 72,
    fut_waiter: 104,
    coro: 112,
    name: 120,
    size: 144,
};
const TASK_3_9: TaskLayout = TaskLayout {
    state: 80,
    fut_waiter: 144,
    coro: 152,
    name: 160,
    size: 184,
};
const TASK_3_10: TaskLayout = TaskLayout {
    state: 88,
    fut_waiter: 152,
    coro: 160,
    name: 168,
    size: 192,
};

/// CPython 3.8: the GIL at `_PyRuntime.ceval.gil` further out (the
/// runtime state holds more before it), the GC's state in `_PyRuntime`,
/// `sys.modules` at `PyInterpreterState.modules` 56.
const V3_8: Offsets = Offsets {
    gil: Gil::Runtime {
        locked: 1168,
        last_holder: 1160,
    },
    gc: Gc {
        at: GcAt::Runtime(344),
        collecting: GC_COLLECTING,
    },
    objects: Objects {
        interp_modules: 56,
        task: TASK_3_8,
        ..OLD.objects
    },
    ..OLD
};

/// CPython 3.9.
const V3_9: Offsets = Offsets {
    objects: Objects {
        task: TASK_3_9,
        ..OLD.objects
    },
    ..OLD
};

/// CPython 3.10: `f_lasti` in code units, `f_stackdepth`, `f_state`, and
/// its own line table.
const V3_10: Offsets = Offsets {
    frame_prev_instr: 96,
    lines: Lines::Pairs,
    legacy: Some(Legacy {
        stack: Stack::Depth(80),
        f_lasti: 96,
        lasti_units: true,
        state: FrameState::State(108),
        ..LEGACY_3_8
    }),
    ..OLD
};

/// The offsets of CPython `major.minor` rip keeps a table of (3.8–3.12;
/// later versions publish theirs, see [`parse_debug`]).
pub(crate) fn for_version(major: u8, minor: u8) -> Option<Offsets> {
    match (major, minor) {
        (3, 8) => Some(V3_8),
        (3, 9) => Some(V3_9),
        (3, 10) => Some(V3_10),
        (3, 11) => Some(V3_11),
        (3, 12) => Some(V3_12),
        _ => None,
    }
}

/// What 3.13 does not publish in `_Py_DebugOffsets`, from its release's
/// layout (read off a build with debug information, like the tables
/// above): the objects asyncio's tasks are found through.
const OBJECTS_3_13: Objects = Objects {
    // Replaced by the published `imports_modules`.
    interp_modules: 0,
    type_cached_keys: 880,
    managed: Managed::Inline,
    gen_iframe: 72,
    gen_frame_state: 67,
    frame_stacktop: 64,
    // Replaced by the published `localsplus`.
    frame_localsplus: 72,
    frame_created: -3,
    awaiting: Awaiting::State(-1),
    registries: &["_scheduled_tasks", "_eager_tasks"],
    long: Long::Tag,
    dict_values_at: 8,
    task: TaskLayout {
        state: 96,
        fut_waiter: 112,
        coro: 120,
        name: 128,
        size: 144,
    },
    keys: Keys::Log2,
};

/// The size of `_Py_DebugOffsets` in 3.13: the cookie, then 72 words.
pub(crate) const DEBUG_OFFSETS_3_13: usize = 8 + 72 * 8;

/// The words of 3.13's `_Py_DebugOffsets` (after the cookie), in order,
/// by name: each section starts with its structure's size.
const DEBUG_FIELDS_3_13: [&str; 72] = [
    "version",
    "free_threaded",
    "runtime_state.size",
    "runtime_state.finalizing",
    "runtime_state.interpreters_head",
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
    "thread_state.size",
    "thread_state.prev",
    "thread_state.next",
    "thread_state.interp",
    "thread_state.current_frame",
    "thread_state.thread_id",
    "thread_state.native_thread_id",
    "thread_state.datastack_chunk",
    "thread_state.status",
    "interpreter_frame.size",
    "interpreter_frame.previous",
    "interpreter_frame.executable",
    "interpreter_frame.instr_ptr",
    "interpreter_frame.localsplus",
    "interpreter_frame.owner",
    "code_object.size",
    "code_object.filename",
    "code_object.name",
    "code_object.qualname",
    "code_object.linetable",
    "code_object.firstlineno",
    "code_object.argcount",
    "code_object.localsplusnames",
    "code_object.localspluskinds",
    "code_object.co_code_adaptive",
    "pyobject.size",
    "pyobject.ob_type",
    "type_object.size",
    "type_object.tp_name",
    "type_object.tp_repr",
    "type_object.tp_flags",
    "tuple_object.size",
    "tuple_object.ob_item",
    "tuple_object.ob_size",
    "list_object.size",
    "list_object.ob_item",
    "list_object.ob_size",
    "dict_object.size",
    "dict_object.ma_keys",
    "dict_object.ma_values",
    "float_object.size",
    "float_object.ob_fval",
    "long_object.size",
    "long_object.lv_tag",
    "long_object.ob_digit",
    "bytes_object.size",
    "bytes_object.ob_size",
    "bytes_object.ob_sval",
    "unicode_object.size",
    "unicode_object.state",
    "unicode_object.length",
    "unicode_object.asciiobject_size",
    "gc.size",
    "gc.collecting",
];

/// The largest size believed for each structure: a larger one is not a
/// structure of this interpreter but a torn or foreign read.
const MAX_STRUCT: u64 = 1 << 24;
/// What rip reads of one interpreter frame and of a code object's head.
const FRAME_READ: u64 = 80;
const CODE_READ: u64 = 4096;

/// The offsets `_Py_DebugOffsets` publishes, read from `bytes` (the
/// first [`DEBUG_OFFSETS_3_13`] bytes of `_PyRuntime`), for a CPython whose
/// `Py_Version` says `version` (`PY_VERSION_HEX`, when it has one). Every
/// offset is checked to lie inside its structure (as published, no larger
/// than [`MAX_STRUCT`]) and to fit what rip reads of it; the layouts rip
/// reads with fixed offsets (dicts, `int`s, `str`s, types) must be the
/// ones published. `Err` says, in one line, what does not hold.
pub(crate) fn parse_debug(bytes: &[u8], version: Option<u32>) -> Result<Offsets, String> {
    let what = |hex: u64| format!("CPython {}.{}", (hex >> 24) & 0xff, (hex >> 16) & 0xff);
    if bytes.len() < DEBUG_OFFSETS_3_13 || &bytes[..8] != b"xdebugpy" {
        return Err(match version {
            Some(v) => format!(
                "{}: _PyRuntime does not start with _Py_DebugOffsets (no \"xdebugpy\" cookie): not read",
                what(u64::from(v))
            ),
            None => {
                "a CPython whose _PyRuntime has neither Py_Version nor _Py_DebugOffsets: not read"
                    .into()
            }
        });
    }
    let words: Vec<u64> = bytes[8..DEBUG_OFFSETS_3_13]
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect();
    let field: HashMap<&str, u64> = DEBUG_FIELDS_3_13.iter().copied().zip(words).collect();
    let get = |name: &str| field[name];
    let hex = get("version");
    let (major, minor) = ((hex >> 24) & 0xff, (hex >> 16) & 0xff);
    if let Some(v) = version
        && u64::from(v) >> 16 != hex >> 16
    {
        return Err(format!(
            "{}: its _Py_DebugOffsets says {}: not read",
            what(u64::from(v)),
            what(hex)
        ));
    }
    if (major, minor) != (3, 13) {
        return Err(format!(
            "{}: rip reads the _Py_DebugOffsets of 3.13 only (their layout changes with each version): not read",
            what(hex)
        ));
    }
    if get("free_threaded") != 0 {
        return Err(format!(
            "{}: a free-threaded build (no GIL, other object layouts): not read",
            what(hex)
        ));
    }
    // Each offset inside its structure, with room for the bytes read.
    let sized = |name: &str, width: u64, limit: u64| -> Result<u64, String> {
        let section = name.split('.').next().expect("a section");
        let size = get(&format!("{section}.size"));
        let off = get(name);
        if size > MAX_STRUCT.min(limit)
            || off
                .checked_add(width)
                .is_none_or(|end| end > size.min(limit))
        {
            return Err(format!(
                "{}: _Py_DebugOffsets.{name} = {off} does not fit its structure of {size} bytes: not read",
                what(hex)
            ));
        }
        Ok(off)
    };
    let word = |name: &str| sized(name, 8, MAX_STRUCT);
    // The layouts read with fixed offsets must be the published ones.
    for (name, expected) in [
        ("pyobject.ob_type", 8),
        ("type_object.tp_name", 24),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("long_object.lv_tag", 16),
        ("long_object.ob_digit", 24),
        ("bytes_object.ob_size", 16),
        ("bytes_object.ob_sval", 32),
        ("unicode_object.length", 16),
        ("unicode_object.state", 32),
    ] {
        if get(name) != expected {
            return Err(format!(
                "{}: _Py_DebugOffsets.{name} = {}, where rip reads it at {expected}: not read",
                what(hex),
                get(name)
            ));
        }
    }
    let gil_state = word("interpreter_state.gil_runtime_state")?;
    let gil_field = |name: &str| -> Result<u64, String> {
        word(name)?
            .checked_sub(gil_state)
            .filter(|&o| o < 4096)
            .ok_or_else(|| {
                format!(
                    "{}: _Py_DebugOffsets.{name} is not inside the GIL's state: not read",
                    what(hex)
                )
            })
    };
    let code_adaptive = sized("code_object.co_code_adaptive", 0, CODE_READ)?;
    let code = |name: &str, width: u64| -> Result<u64, String> {
        let off = sized(name, width, CODE_READ)?;
        if off + width > code_adaptive {
            return Err(format!(
                "{}: _Py_DebugOffsets.{name} = {off} lies past the bytecode (at {code_adaptive}): not read",
                what(hex)
            ));
        }
        Ok(off)
    };
    let ascii_size = sized("unicode_object.asciiobject_size", 0, MAX_STRUCT)?;
    let localsplus = sized("interpreter_frame.localsplus", 0, FRAME_READ)?;
    Ok(Offsets {
        runtime_interpreters_head: word("runtime_state.interpreters_head")?,
        interp_next: word("interpreter_state.next")?,
        interp_threads_head: word("interpreter_state.threads_head")?,
        tstate_next: word("thread_state.next")?,
        tstate_thread_id: word("thread_state.thread_id")?,
        tstate_native_thread_id: Some(word("thread_state.native_thread_id")?),
        tstate_cframe: None,
        cframe_current_frame: word("thread_state.current_frame")?,
        frame_code: sized("interpreter_frame.executable", 8, FRAME_READ)?,
        frame_previous: sized("interpreter_frame.previous", 8, FRAME_READ)?,
        frame_prev_instr: sized("interpreter_frame.instr_ptr", 8, FRAME_READ)?,
        frame_owner: sized("interpreter_frame.owner", 1, FRAME_READ)?,
        // FRAME_OWNED_BY_CSTACK.
        entry: Entry::CStackOwner(3),
        code_filename: code("code_object.filename", 8)?,
        code_qualname: code("code_object.qualname", 8)?,
        code_firstlineno: code("code_object.firstlineno", 4)?,
        code_linetable: code("code_object.linetable", 8)?,
        lines: Lines::Locations,
        code_adaptive,
        ascii_size,
        // PyCompactUnicodeObject: the ASCII header, utf8_length, utf8.
        compact_size: ascii_size + 16,
        gil: Gil::Interpreter {
            pointer: word("interpreter_state.ceval_gil")?,
            locked: gil_field("interpreter_state.gil_runtime_state_locked")?,
            last_holder: gil_field("interpreter_state.gil_runtime_state_holder")?,
        },
        // The GC's state, whole, inside the interpreter; its flag inside it.
        gc: Gc {
            at: GcAt::Interpreter(sized("interpreter_state.gc", get("gc.size"), MAX_STRUCT)?),
            collecting: sized("gc.collecting", 4, MAX_STRUCT)?,
        },
        objects: Objects {
            interp_modules: word("interpreter_state.imports_modules")?,
            frame_localsplus: localsplus,
            ..OBJECTS_3_13
        },
        legacy: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `_Py_DebugOffsets` of CPython 3.13.0 (x86-64), as gdb prints
    /// `_PyRuntime.debug_offsets` of pyenv's build, in field order.
    const PUBLISHED_3_13_0: [u64; 72] = [
        0x030d_00f0,
        0,
        283_320,
        608,
        632,
        194_968,
        7272,
        7264,
        7344,
        7400,
        7656,
        7640,
        7648,
        16,
        7752,
        0,
        7768,
        7760,
        304,
        0,
        8,
        16,
        72,
        152,
        160,
        232,
        32,
        80,
        8,
        0,
        56,
        72,
        70,
        208,
        112,
        120,
        128,
        136,
        68,
        52,
        96,
        104,
        200,
        16,
        8,
        416,
        24,
        88,
        168,
        32,
        24,
        16,
        40,
        24,
        16,
        48,
        32,
        40,
        24,
        16,
        32,
        16,
        24,
        40,
        16,
        32,
        64,
        32,
        16,
        40,
        240,
        200,
    ];

    fn bytes(words: &[u64]) -> Vec<u8> {
        let mut b = b"xdebugpy".to_vec();
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn set(name: &str, value: u64) -> Vec<u8> {
        let mut w = PUBLISHED_3_13_0;
        let i = DEBUG_FIELDS_3_13.iter().position(|f| *f == name).unwrap();
        w[i] = value;
        bytes(&w)
    }

    #[test]
    fn the_published_offsets_of_3_13_are_read() {
        let o = parse_debug(&bytes(&PUBLISHED_3_13_0), Some(0x030d_05f0)).unwrap();
        assert_eq!(o.runtime_interpreters_head, 632);
        assert_eq!((o.interp_next, o.interp_threads_head), (7264, 7344));
        assert_eq!((o.tstate_cframe, o.cframe_current_frame), (None, 72));
        assert_eq!(
            (o.tstate_thread_id, o.tstate_native_thread_id),
            (152, Some(160))
        );
        assert_eq!(
            (
                o.frame_code,
                o.frame_previous,
                o.frame_prev_instr,
                o.frame_owner
            ),
            (0, 8, 56, 70)
        );
        assert_eq!(
            (o.code_qualname, o.code_adaptive, o.code_firstlineno),
            (128, 200, 68)
        );
        assert_eq!((o.ascii_size, o.compact_size), (40, 56));
        assert_eq!(
            o.gil,
            Gil::Interpreter {
                pointer: 16,
                locked: 16,
                last_holder: 8
            }
        );
        assert_eq!(o.objects.interp_modules, 7656);
        assert_eq!(
            o.gc,
            Gc {
                at: GcAt::Interpreter(7400),
                collecting: 200
            }
        );
    }

    #[test]
    fn nonsense_is_refused_with_its_reason() {
        let cases = [
            (
                set("thread_state.native_thread_id", 400),
                "thread_state.native_thread_id = 400 does not fit its structure of 304 bytes",
            ),
            (
                set("interpreter_frame.owner", 80),
                "interpreter_frame.owner = 80 does not fit",
            ),
            (
                set("runtime_state.size", 1 << 40),
                "runtime_state.interpreters_head = 632 does not fit",
            ),
            (
                set("code_object.qualname", 200),
                "code_object.qualname = 200 lies past the bytecode",
            ),
            (
                set("dict_object.ma_keys", 24),
                "dict_object.ma_keys = 24, where rip reads it at 32",
            ),
            (set("free_threaded", 1), "free-threaded"),
            (
                set("version", 0x030e_00f0),
                "CPython 3.14: rip reads the _Py_DebugOffsets of 3.13 only",
            ),
            (
                set("interpreter_state.gil_runtime_state_locked", 8),
                "gil_runtime_state_locked is not inside the GIL",
            ),
            (
                set("gc.collecting", 240),
                "gc.collecting = 240 does not fit its structure of 240 bytes",
            ),
            (
                set("interpreter_state.gc", 194_900),
                "interpreter_state.gc = 194900 does not fit its structure of 194968 bytes",
            ),
        ];
        for (b, why) in cases {
            let e = parse_debug(&b, None).unwrap_err();
            assert!(e.contains(why), "{e} does not say {why}");
            assert!(!e.contains('\n'), "{e}");
        }
        let mut torn = bytes(&PUBLISHED_3_13_0);
        torn[0] = b'y';
        assert!(
            parse_debug(&torn, Some(0x030d_00f0))
                .unwrap_err()
                .contains("no \"xdebugpy\" cookie")
        );
        assert!(
            parse_debug(&bytes(&PUBLISHED_3_13_0), Some(0x030c_01f0))
                .unwrap_err()
                .contains("CPython 3.12: its _Py_DebugOffsets says CPython 3.13")
        );
        assert!(parse_debug(&bytes(&PUBLISHED_3_13_0)[..100], None).is_err());
    }

    /// What gdb says `expr` is (an integer), in the file at `path` read
    /// with its debug information: one value per expression, in order.
    fn gdb(path: &str, exprs: &[String]) -> Vec<i64> {
        assert!(
            std::path::Path::new(path).exists(),
            "{path} is missing: run `cargo xtask setup`"
        );
        let mut cmd = std::process::Command::new("gdb");
        cmd.args(["-nx", "-batch"]);
        for e in exprs {
            cmd.args(["-ex", &format!("print (long)({e})")]);
        }
        let out = cmd
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("gdb: {e}: run `cargo xtask setup`"));
        let text = String::from_utf8_lossy(&out.stdout);
        let values: Vec<i64> = text
            .lines()
            .filter_map(|l| l.split_once(" = ").map(|(_, v)| v.trim().parse().unwrap()))
            .collect();
        assert_eq!(
            values.len(),
            exprs.len(),
            "gdb read {exprs:?} from {path}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        values
    }

    /// The expression gdb evaluates to the GC's `collecting` flag of
    /// table `o`, and where `o` says it is, from the structure holding it.
    fn gc_dwarf(o: &Offsets) -> (String, u64) {
        let (ty, at) = match o.gc.at {
            GcAt::Runtime(at) => ("_PyRuntimeState", at),
            GcAt::Interpreter(at) => ("PyInterpreterState", at),
        };
        (format!("&(({ty}*)0)->gc.collecting"), at + o.gc.collecting)
    }

    /// The GC's and the GIL's places in the tables of 3.11 and 3.12 are
    /// the DWARF of pyenv's builds of those versions.
    #[test]
    fn the_gc_and_gil_of_3_11_and_3_12_are_the_dwarf_of_their_builds() {
        for (minor, version) in [(11u8, "3.11.7"), (12, "3.12.1")] {
            let o = for_version(3, minor).unwrap();
            let field = |f: &str| format!("&((struct _gil_runtime_state*)0)->{f}");
            let mut ours: Vec<(String, u64)> = vec![
                gc_dwarf(&o),
                (field("last_holder"), GIL_LAST_HOLDER),
                (field("switch_number"), GIL_SWITCH_NUMBER),
                (field("cond"), GIL_TAKE.start),
                (field("switch_cond"), GIL_TAKE.end),
            ];
            // Where the GIL itself is.
            match o.gil {
                Gil::Runtime {
                    locked,
                    last_holder,
                } => ours.extend([
                    ("&((_PyRuntimeState*)0)->ceval.gil.locked".into(), locked),
                    (
                        "&((_PyRuntimeState*)0)->ceval.gil.last_holder".into(),
                        last_holder,
                    ),
                ]),
                Gil::Interpreter {
                    pointer,
                    locked,
                    last_holder,
                } => ours.extend([
                    ("&((PyInterpreterState*)0)->ceval.gil".into(), pointer),
                    (field("locked"), locked),
                    (field("last_holder"), last_holder),
                ]),
            }
            let lib = format!("/root/.pyenv/versions/{version}/lib/libpython3.{minor}.so.1.0");
            let exprs: Vec<String> = ours.iter().map(|(e, _)| e.clone()).collect();
            for ((e, want), got) in ours.iter().zip(gdb(&lib, &exprs)) {
                assert_eq!(got, *want as i64, "3.{minor}: {e}");
            }
        }
    }

    /// Each table of 3.8, 3.9 and 3.10 is the layout the DWARF of pyenv's
    /// builds of those versions (what the machine image carries) says.
    #[test]
    fn the_tables_of_3_8_to_3_10_are_the_dwarf_of_their_builds() {
        for (minor, version) in [(8u8, "3.8.18"), (9, "3.9.18"), (10, "3.10.13")] {
            let o = for_version(3, minor).unwrap();
            let l = o.legacy.unwrap();
            let f = |ty: &str, field: &str| format!("&(({ty}*)0)->{field}");
            let (gil_locked, gil_holder) = match o.gil {
                Gil::Runtime {
                    locked,
                    last_holder,
                } => (locked, last_holder),
                Gil::Interpreter { .. } => panic!("3.{minor}: one GIL in the runtime"),
            };
            let (stack, stack_field) = match l.stack {
                Stack::Top(at) => (at, "f_stacktop"),
                Stack::Depth(at) => (at, "f_stackdepth"),
            };
            let (state, state_field) = match l.state {
                FrameState::Executing(at) => (at, "f_executing"),
                FrameState::State(at) => (at, "f_state"),
            };
            let lines = if minor == 10 {
                "co_linetable"
            } else {
                "co_lnotab"
            };
            let ours: Vec<(String, u64)> = vec![
                (
                    f("_PyRuntimeState", "interpreters.head"),
                    o.runtime_interpreters_head,
                ),
                (f("_PyRuntimeState", "ceval.gil.locked"), gil_locked),
                (f("_PyRuntimeState", "ceval.gil.last_holder"), gil_holder),
                (
                    format!(
                        "(long){} - (long){}",
                        f("_PyRuntimeState", "ceval.gil.last_holder"),
                        f("_PyRuntimeState", "ceval.gil")
                    ),
                    GIL_LAST_HOLDER,
                ),
                (
                    format!(
                        "(long){} - (long){}",
                        f("_PyRuntimeState", "ceval.gil.cond"),
                        f("_PyRuntimeState", "ceval.gil")
                    ),
                    GIL_TAKE.start,
                ),
                (
                    format!(
                        "(long){} - (long){}",
                        f("_PyRuntimeState", "ceval.gil.switch_cond"),
                        f("_PyRuntimeState", "ceval.gil")
                    ),
                    GIL_TAKE.end,
                ),
                (
                    format!(
                        "(long){} - (long){}",
                        f("_PyRuntimeState", "ceval.gil.switch_number"),
                        f("_PyRuntimeState", "ceval.gil")
                    ),
                    GIL_SWITCH_NUMBER,
                ),
                gc_dwarf(&o),
                (f("PyInterpreterState", "next"), o.interp_next),
                (
                    f("PyInterpreterState", "tstate_head"),
                    o.interp_threads_head,
                ),
                (f("PyInterpreterState", "modules"), o.objects.interp_modules),
                (f("PyThreadState", "next"), o.tstate_next),
                (f("PyThreadState", "interp"), l.tstate_interp),
                (f("PyThreadState", "frame"), l.tstate_frame),
                (f("PyThreadState", "thread_id"), o.tstate_thread_id),
                (f("PyFrameObject", "f_back"), l.f_back),
                (f("PyFrameObject", "f_code"), l.f_code),
                (f("PyFrameObject", "f_valuestack"), l.f_valuestack),
                (f("PyFrameObject", stack_field), stack),
                (f("PyFrameObject", "f_lasti"), l.f_lasti),
                (f("PyFrameObject", state_field), state),
                (f("PyGenObject", "gi_frame"), l.gen_frame),
                (f("PyCodeObject", "co_code"), l.code_code),
                (f("PyCodeObject", "co_filename"), o.code_filename),
                (f("PyCodeObject", "co_name"), o.code_qualname),
                (f("PyCodeObject", "co_firstlineno"), o.code_firstlineno),
                (f("PyCodeObject", lines), o.code_linetable),
                ("sizeof(PyCodeObject)".into(), o.code_adaptive),
                ("sizeof(PyASCIIObject)".into(), o.ascii_size),
                ("sizeof(PyCompactUnicodeObject)".into(), o.compact_size),
                (f("PyTypeObject", "tp_dictoffset"), 288),
                (f("PyDictKeysObject", "dk_size"), 8),
                (f("PyDictKeysObject", "dk_nentries"), 32),
                (f("PyDictKeysObject", "dk_indices"), 40),
                ("sizeof(PyDictKeyEntry)".into(), 24),
            ];
            let lib = format!("/root/.pyenv/versions/{version}/lib/libpython3.{minor}.so.1.0");
            let exprs: Vec<String> = ours.iter().map(|(e, _)| e.clone()).collect();
            for ((e, want), got) in ours.iter().zip(gdb(&lib, &exprs)) {
                assert_eq!(got, *want as i64, "3.{minor}: {e}");
            }
            // `_asyncio.Task`, in its extension module.
            let t = o.objects.task;
            let task: Vec<(String, usize)> = vec![
                (f("TaskObj", "task_state"), t.state),
                (f("TaskObj", "task_fut_waiter"), t.fut_waiter),
                (f("TaskObj", "task_coro"), t.coro),
                (f("TaskObj", "task_name"), t.name),
                ("sizeof(TaskObj)".into(), t.size),
            ];
            let module = std::fs::read_dir(format!(
                "/root/.pyenv/versions/{version}/lib/python3.{minor}/lib-dynload"
            ))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("_asyncio.")
            })
            .unwrap();
            let exprs: Vec<String> = task.iter().map(|(e, _)| e.clone()).collect();
            for ((e, want), got) in task.iter().zip(gdb(module.to_str().unwrap(), &exprs)) {
                assert_eq!(got, *want as i64, "3.{minor}: {e}");
            }
        }
    }
}
