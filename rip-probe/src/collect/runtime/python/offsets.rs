//! Where CPython keeps what rip reads, per version: the one place that
//! knows struct layouts. 3.11 and 3.12 (x86-64, the layouts of their
//! releases, which keep them within a version) were read off interpreters
//! built with debug information, with gdb (`ptype/o`); each table is
//! checked against a running interpreter of its version by the tests.

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
    /// `PyThreadState.native_thread_id` (the kernel's tid).
    pub(crate) tstate_native_thread_id: u64,
    /// `PyThreadState.cframe`.
    pub(crate) tstate_cframe: u64,
    /// `_PyCFrame.current_frame`.
    pub(crate) cframe_current_frame: u64,
    /// `_PyInterpreterFrame.f_code`.
    pub(crate) frame_code: u64,
    /// `_PyInterpreterFrame.previous`.
    pub(crate) frame_previous: u64,
    /// `_PyInterpreterFrame.prev_instr`.
    pub(crate) frame_prev_instr: u64,
    /// `_PyInterpreterFrame.owner`.
    pub(crate) frame_owner: u64,
    /// How the frames one `_PyEval_EvalFrameDefault` call runs end.
    pub(crate) entry: Entry,
    /// `PyCodeObject.co_filename`.
    pub(crate) code_filename: u64,
    /// `PyCodeObject.co_qualname`.
    pub(crate) code_qualname: u64,
    /// `PyCodeObject.co_firstlineno`.
    pub(crate) code_firstlineno: u64,
    /// `PyCodeObject.co_linetable`.
    pub(crate) code_linetable: u64,
    /// `PyCodeObject.co_code_adaptive`: where the bytecode starts.
    pub(crate) code_adaptive: u64,
    /// `sizeof(PyASCIIObject)`: where an ASCII string's characters are.
    pub(crate) ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings'
    /// characters are.
    pub(crate) compact_size: u64,
    /// Where the GIL's state is.
    pub(crate) gil: Gil,
    /// What asyncio's tasks are read through.
    pub(crate) objects: Objects,
}

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
    /// The opcodes of `RESUME` (plain, and the forms it may be rewritten
    /// to): a suspended frame whose next instruction is one of them with
    /// an argument of 2 or more waits in a `yield from` or `await`.
    pub(crate) resume: [u8; 2],
    /// The names, in the `_asyncio` module, of the sets of live tasks:
    /// 3.11's `_all_tasks` (a `WeakSet`); 3.12's `_scheduled_tasks` (a
    /// `WeakSet`) and `_eager_tasks` (a `set`).
    pub(crate) registries: &'static [&'static str],
    /// How a task's default name is kept.
    pub(crate) long: Long,
}

/// Where an instance of a class keeps its attribute dict or values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Managed {
    /// 3.11: the values array at `obj - 32`, the dict (when one was
    /// made) at `obj - 24`.
    Split,
    /// 3.12: one word at `obj - 24`, the values array + 1 when odd, else
    /// the dict.
    Tagged,
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

/// CPython 3.11.
const V3_11: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_next: 0,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_native_thread_id: 160,
    tstate_cframe: 56,
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
    code_adaptive: 184,
    ascii_size: 48,
    compact_size: 72,
    gil: Gil::Runtime {
        locked: 376,
        last_holder: 368,
    },
    objects: Objects {
        interp_modules: 888,
        type_cached_keys: 872,
        managed: Managed::Split,
        gen_iframe: 80,
        gen_frame_state: 75,
        frame_stacktop: 64,
        frame_localsplus: 72,
        // RESUME, RESUME_QUICK.
        resume: [151, 150],
        registries: &["_all_tasks"],
        long: Long::Size,
    },
};

/// CPython 3.12.
const V3_12: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_next: 0,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_thread_id: 136,
    tstate_native_thread_id: 144,
    tstate_cframe: 56,
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
    code_adaptive: 192,
    ascii_size: 40,
    compact_size: 56,
    gil: Gil::Interpreter {
        pointer: 384,
        locked: 16,
        last_holder: 8,
    },
    objects: Objects {
        interp_modules: 944,
        type_cached_keys: 880,
        managed: Managed::Tagged,
        gen_iframe: 72,
        gen_frame_state: 67,
        frame_stacktop: 64,
        frame_localsplus: 72,
        // RESUME, INSTRUMENTED_RESUME.
        resume: [151, 240],
        registries: &["_scheduled_tasks", "_eager_tasks"],
        long: Long::Tag,
    },
};

/// The offsets of CPython `major.minor`, if rip knows that version.
pub(crate) fn for_version(major: u8, minor: u8) -> Option<&'static Offsets> {
    match (major, minor) {
        (3, 11) => Some(&V3_11),
        (3, 12) => Some(&V3_12),
        _ => None,
    }
}
