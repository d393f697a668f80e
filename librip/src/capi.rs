//! The C ABI declared in `include/librip.h`: the original librip names
//! and meanings, plus the cursor and coroutine calls for schedulers.
//!
//! Nothing here panics across the boundary or stops the program: failures
//! print one line to stderr (registration failures only the first time)
//! and leave the thread snapping into the sink.

use std::{
    ffi::{CStr, c_char},
    mem::ManuallyDrop,
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
};

use crate::{
    Error, Ring, RingOptions,
    coroutine::{Coroutine, Cursor, RawCoroutine},
    format::SlotKind,
    snap,
};

/// `rip_options_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RipOptions {
    /// Thread slots (0: pid_max).
    pub thread_slots: u32,
    /// Coroutine slots.
    pub coroutine_slots: u32,
    /// Depth (0: the default).
    pub depth: u32,
}

fn report(what: &str, e: &Error) {
    eprintln!("librip: {what}: {e}");
}

/// Reports a registration failure the first time one happens.
pub(crate) fn report_once(what: &str, e: &Error) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if !REPORTED.swap(true, Ordering::Relaxed) {
        eprintln!("librip: {what}: {e} (further registration failures are not reported)");
    }
}

/// # Safety
/// `ptr` is null or points at `len` readable bytes.
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: contract of this function.
        unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
    }
}

fn create(file: *const c_char, opts: RingOptions) -> bool {
    let res = if file.is_null() {
        Ring::create_default(opts)
    } else {
        // SAFETY: the caller passes a NUL-terminated path (librip.h).
        let c = unsafe { CStr::from_ptr(file) };
        let path = Path::new(std::ffi::OsStr::from_bytes(c.to_bytes()));
        Ring::create(path, opts)
    };
    match res {
        Ok(_) => true,
        // RIP_ALLOC_SAMPLE with the interposer: the ring was made at load.
        Err(Error::AlreadyCreated(_))
            if crate::writer::alloc::CREATED_AT_LOAD.load(std::sync::atomic::Ordering::Relaxed) =>
        {
            true
        }
        Err(e) => {
            report("no ring, the program runs untraced", &e);
            false
        }
    }
}

use std::os::unix::ffi::OsStrExt;

/// `bool rip_create_ring(const char *file, uint32_t max_procs)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_create_ring(file: *const c_char, max_procs: u32) -> bool {
    create(
        file,
        RingOptions {
            thread_slots: max_procs,
            ..RingOptions::default()
        },
    )
}

/// `bool rip_create_ring_ex(const char *file, const rip_options_t *options)`
///
/// # Safety
/// `file` is null or NUL-terminated; `options` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rip_create_ring_ex(
    file: *const c_char,
    options: *const RipOptions,
) -> bool {
    let mut opts = RingOptions::default();
    // SAFETY: contract of this function.
    if let Some(o) = unsafe { options.as_ref() } {
        opts.thread_slots = o.thread_slots;
        opts.coroutine_slots = o.coroutine_slots;
        if o.depth != 0 {
            opts.depth = o.depth;
        }
    }
    create(file, opts)
}

/// `void rip_init(uint32_t id, const char *name, size_t namelen, uint8_t idx, uint8_t ctr)`
///
/// # Safety
/// `name` is null or points at `namelen` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rip_init(id: u32, name: *const c_char, namelen: usize, idx: u8, ctr: u8) {
    let Some(ring) = Ring::get() else { return };
    // SAFETY: contract of this function.
    let name = unsafe { bytes(name, namelen) };
    if id == 0 {
        if let Err(e) = ring.register_thread_bytes(name) {
            report_once("cannot register a thread", &e);
        }
        return;
    }
    let id = u64::from(id);
    let existing = ring
        .lock()
        .ok()
        .and_then(|st| st.coroutine_ids.get(&id).copied());
    let raw = match existing {
        Some(t) => RawCoroutine {
            id,
            index: t.index,
            generation: t.generation,
            epoch: ring.epoch(),
        },
        None => {
            let seq = u64::from(ctr) << 8 | u64::from(idx);
            match Coroutine::begin(ring, id, name, seq, None, 0) {
                Ok(co) => co.into_raw(),
                Err(e) => {
                    report_once("cannot register a coroutine", &e);
                    return;
                }
            }
        }
    };
    rip_coro_switch(raw);
}

/// `void rip_exit(void)`: marks the current snap target exited.
#[unsafe(no_mangle)]
pub extern "C" fn rip_exit() {
    let Some(ring) = Ring::get() else { return };
    match ring.slot_of(snap::cursor()) {
        Some((SlotKind::Coroutine, index)) => {
            let live = ring.lock().ok().and_then(|st| st.coroutines.live(index));
            if let Some((generation, id)) = live {
                rip_coro_exit(RawCoroutine {
                    id,
                    index,
                    generation,
                    epoch: ring.epoch(),
                });
            }
            // Back to the thread's own slot, or the sink.
            match ring.thread_slot() {
                // SAFETY: the calling thread's live slot in the current ring.
                Some(i) => unsafe { snap::set_cursor(ring.seq_ptr(SlotKind::Thread, i)) },
                None => Cursor::sink().restore(),
            }
        }
        Some((SlotKind::Thread, index)) if ring.thread_slot() == Some(index) => ring.exit_thread(),
        _ => Cursor::sink().restore(),
    }
}

/// `rip_cursor_t rip_cursor_save(void)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_cursor_save() -> Cursor {
    Cursor::current()
}

/// `void rip_cursor_restore(rip_cursor_t cursor)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_cursor_restore(cursor: Cursor) {
    cursor.restore();
}

/// `bool rip_coro_begin(uint64_t id, const char *name, size_t namelen, rip_coro_t *out)`
///
/// # Safety
/// `name` is null or points at `namelen` readable bytes; `out` is null or
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rip_coro_begin(
    id: u64,
    name: *const c_char,
    namelen: usize,
    out: *mut RawCoroutine,
) -> bool {
    let Some(ring) = Ring::get() else {
        return false;
    };
    // SAFETY: contract of this function.
    let name = unsafe { bytes(name, namelen) };
    match Coroutine::begin(ring, id, name, 0, None, 0) {
        Ok(co) => {
            let raw = co.into_raw();
            // SAFETY: contract of this function.
            if let Some(out) = unsafe { out.as_mut() } {
                *out = raw;
            }
            true
        }
        Err(e) => {
            report_once("cannot register a coroutine", &e);
            false
        }
    }
}

/// Borrows the coroutine behind a C handle without taking ownership.
fn borrowed(raw: RawCoroutine) -> Option<ManuallyDrop<Coroutine>> {
    Coroutine::from_raw(raw).map(ManuallyDrop::new)
}

/// `rip_cursor_t rip_coro_switch(rip_coro_t coro)`: returns the previous target.
#[unsafe(no_mangle)]
pub extern "C" fn rip_coro_switch(coro: RawCoroutine) -> Cursor {
    let prev = Cursor::current();
    borrowed(coro)
        .map_or(Cursor::sink(), |c| c.cursor())
        .restore();
    prev
}

/// `void rip_coro_poll_begin(rip_coro_t coro)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_coro_poll_begin(coro: RawCoroutine) {
    if let Some(c) = borrowed(coro) {
        c.poll_begin();
    }
}

/// `void rip_coro_poll_end(rip_coro_t coro)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_coro_poll_end(coro: RawCoroutine) {
    if let Some(c) = borrowed(coro) {
        c.poll_end();
    }
}

/// `void rip_coro_exit(rip_coro_t coro)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_coro_exit(coro: RawCoroutine) {
    drop(Coroutine::from_raw(coro));
}

/// `uint64_t rip_dropped_snaps(void)`
#[unsafe(no_mangle)]
pub extern "C" fn rip_dropped_snaps() -> u64 {
    snap::sink_count()
}

#[cfg(test)]
mod tests {
    /// librip.h's constants are the ones the Rust side uses.
    #[test]
    fn the_header_agrees_with_the_rust_side() {
        let h = include_str!("../include/librip.h");
        let define = |name: &str| -> u32 {
            let line = h
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name} not in librip.h"));
            let v = line.split_whitespace().nth(2).unwrap();
            v.trim_end_matches('u').parse().unwrap()
        };
        assert_eq!(define("RIP_DEFAULT_DEPTH"), crate::format::DEFAULT_DEPTH);
        assert_eq!(define("RIP_MAX_DEPTH"), crate::format::MAX_DEPTH);
        assert_eq!(
            define("RIP_DEFAULT_COROUTINE_SLOTS"),
            crate::DEFAULT_COROUTINE_SLOTS
        );
        let sink = std::mem::size_of::<crate::snap::Sink>();
        assert_eq!(sink, 8 * (1 + crate::format::MAX_DEPTH as usize));
    }
}
