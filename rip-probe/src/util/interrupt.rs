//! SIGINT and SIGTERM for the CLI: the first one asks the work under way
//! (an observation window, `crate::window`; a long attach) to stop and
//! report or undo itself; a second one ends rip-probe at once. The library
//! API never installs a handler: a program that drives a session keeps
//! its own signals as they were. Any stage may ask whether a signal came,
//! so this lives below them all.

use std::sync::{
    Once,
    atomic::{AtomicBool, AtomicI32, Ordering},
};

/// Set by the CLI: its windows end on SIGINT and SIGTERM.
static CATCH: AtomicBool = AtomicBool::new(false);
/// The signal that ended a window (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Who sent it: the sender's pid as the kernel gave it (0: the kernel
/// itself, e.g. a terminal's Ctrl-C).
static SENDER: AtomicI32 = AtomicI32::new(0);

/// Lets the windows of this process end on SIGINT and SIGTERM (the CLI's
/// choice; the library leaves signals alone). The handler is installed
/// when the first window starts: before that a signal ends rip-probe as
/// usual, as there is nothing gathered to print.
pub(crate) fn catch_interrupts() {
    CATCH.store(true, Ordering::Relaxed);
}

/// Installs the handler, once, if the CLI asked for it.
pub(crate) fn arm() {
    static ONCE: Once = Once::new();
    if !CATCH.load(Ordering::Relaxed) {
        return;
    }
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction is valid; the handler only stores
            // to an atomic (async-signal-safe). SA_RESETHAND puts the
            // default action back once it ran, so a second signal ends
            // the process at once; SA_RESTART keeps other system calls
            // from failing with EINTR.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut old);
                // Ignored by whoever started rip-probe (a shell's
                // background job ignores SIGINT so that the terminal's
                // Ctrl-C is not for it): left ignored.
                if old.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                // SA_SIGINFO: the handler learns who sent the signal, which
                // the report then names (a window cut short by a signal
                // meant for another process is told from a Ctrl-C).
                act.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART | libc::SA_SIGINFO;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}

pub(crate) extern "C" fn on_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    let from = if info.is_null() {
        0
    } else {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t;
        // reading its pid field is a plain load (async-signal-safe).
        unsafe { (*info).si_pid() }
    };
    SENDER.store(from, Ordering::Relaxed);
    SIGNAL.store(sig, Ordering::Relaxed);
}

/// For long work before a window (attaching uprobes one by one): arms
/// the handler as a window does, if the CLI asked for it, and says which
/// signal, if one came, asked rip-probe to stop. The work stops and undoes
/// itself; a second signal ends rip-probe at once. Always `None` in the
/// library API.
pub(crate) fn stop_requested() -> Option<&'static str> {
    arm();
    interrupted()
}

/// Who sent the signal that asked the windows to end: its pid and, if it
/// still runs, its name. `None` when no signal came or the kernel sent it
/// (a terminal's Ctrl-C).
pub(crate) fn sender() -> Option<(u32, Option<String>)> {
    interrupted()?;
    let pid = u32::try_from(SENDER.load(Ordering::Relaxed))
        .ok()
        .filter(|&p| p != 0)?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string());
    Some((pid, comm))
}

/// The signal that asked the windows to end, if one came.
pub(crate) fn interrupted() -> Option<&'static str> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("SIGINT"),
    }
}
