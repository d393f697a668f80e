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
                act.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}

pub(crate) extern "C" fn on_signal(sig: libc::c_int) {
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

/// The signal that asked the windows to end, if one came.
pub(crate) fn interrupted() -> Option<&'static str> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("SIGINT"),
    }
}
