//! Helper threads that work while a session observes (parsing kernel BTF,
//! loading symbols, detaching): named, and at a lower priority, so that on
//! a busy machine they yield to the process being observed.

/// The nice value of background threads (0 is normal, 19 the lowest).
const NICE: i32 = 10;

/// Spawns `f` on a named, lower-priority thread.
pub(crate) fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            set_nice(NICE);
            f()
        })
        .expect("spawning a helper thread")
}

/// Puts the calling thread back at normal priority once its background
/// work is done and a report waits on it (this needs CAP_SYS_NICE, which
/// root has; without it the thread stays lower, which only costs time).
pub(crate) fn normal_priority() {
    set_nice(0);
}

/// Puts the calling thread at background priority again.
pub(crate) fn lower_priority() {
    set_nice(NICE);
}

/// Sets the calling thread's nice value: on Linux, PRIO_PROCESS with a
/// thread id applies to that thread alone. Failing costs only time.
fn set_nice(nice: i32) {
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice);
}
