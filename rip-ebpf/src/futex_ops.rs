//! futex(2) operations, one table for the BPF programs (`rip-probe locks`
//! counts waits and wakes in the kernel) and user space (syscall decoding,
//! lock reading): which operations wait and which wake is decided here
//! once, from the kernel's futex semantics.

/// `FUTEX_WAIT`: sleeps while the word holds the expected value.
pub const FUTEX_WAIT: u32 = 0;
/// `FUTEX_WAKE`: wakes up to `val` waiters.
pub const FUTEX_WAKE: u32 = 1;
/// `FUTEX_FD`: removed in Linux 2.6.26.
pub const FUTEX_FD: u32 = 2;
/// `FUTEX_REQUEUE`: wakes some waiters and moves the rest to a second word.
pub const FUTEX_REQUEUE: u32 = 3;
/// `FUTEX_CMP_REQUEUE`: `FUTEX_REQUEUE` if the word holds a value.
pub const FUTEX_CMP_REQUEUE: u32 = 4;
/// `FUTEX_WAKE_OP`: an operation on a second word, then wakes on both.
pub const FUTEX_WAKE_OP: u32 = 5;
/// `FUTEX_LOCK_PI`: takes a priority-inheritance lock, sleeping while
/// another thread holds it.
pub const FUTEX_LOCK_PI: u32 = 6;
/// `FUTEX_UNLOCK_PI`: releases a PI lock, handing it to the top waiter.
pub const FUTEX_UNLOCK_PI: u32 = 7;
/// `FUTEX_TRYLOCK_PI`: takes a PI lock if it is free; never sleeps.
pub const FUTEX_TRYLOCK_PI: u32 = 8;
/// `FUTEX_WAIT_BITSET`: `FUTEX_WAIT` with a wake mask (and an absolute
/// timeout).
pub const FUTEX_WAIT_BITSET: u32 = 9;
/// `FUTEX_WAKE_BITSET`: wakes the waiters whose mask matches.
pub const FUTEX_WAKE_BITSET: u32 = 10;
/// `FUTEX_WAIT_REQUEUE_PI`: sleeps on a (condition variable's) word until
/// requeued to, and given, the PI lock at the second address.
pub const FUTEX_WAIT_REQUEUE_PI: u32 = 11;
/// `FUTEX_CMP_REQUEUE_PI`: requeues waiters of `FUTEX_WAIT_REQUEUE_PI`
/// to the PI lock, waking at most one.
pub const FUTEX_CMP_REQUEUE_PI: u32 = 12;
/// `FUTEX_LOCK_PI2`: `FUTEX_LOCK_PI` on a selectable clock (5.14).
pub const FUTEX_LOCK_PI2: u32 = 13;

/// The option bit of process-private futexes.
pub const FUTEX_PRIVATE_FLAG: u32 = 128;
/// The option bit of timeouts on CLOCK_REALTIME.
pub const FUTEX_CLOCK_REALTIME: u32 = 256;
/// The command of an operation: without its option bits.
pub const FUTEX_CMD_MASK: u32 = !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);

/// The uapi names of the commands, by number.
pub const NAMES: [&str; 14] = [
    "FUTEX_WAIT",
    "FUTEX_WAKE",
    "FUTEX_FD",
    "FUTEX_REQUEUE",
    "FUTEX_CMP_REQUEUE",
    "FUTEX_WAKE_OP",
    "FUTEX_LOCK_PI",
    "FUTEX_UNLOCK_PI",
    "FUTEX_TRYLOCK_PI",
    "FUTEX_WAIT_BITSET",
    "FUTEX_WAKE_BITSET",
    "FUTEX_WAIT_REQUEUE_PI",
    "FUTEX_CMP_REQUEUE_PI",
    "FUTEX_LOCK_PI2",
];

/// The command of operation `op` (its option bits cleared).
#[inline(always)]
pub fn cmd(op: u32) -> u32 {
    op & FUTEX_CMD_MASK
}

/// Whether command `cmd` can put its caller to sleep until another thread
/// wakes it (or its timeout expires): the plain and bitset waits, the PI
/// lock operations, and the condition-variable wait that is requeued to a
/// PI lock. These are also exactly the commands whose fourth argument is a
/// timeout. `FUTEX_TRYLOCK_PI` is not one: it returns at once when the lock
/// is held.
#[inline(always)]
pub fn is_wait(cmd: u32) -> bool {
    matches!(
        cmd,
        FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_LOCK_PI | FUTEX_LOCK_PI2 | FUTEX_WAIT_REQUEUE_PI
    )
}

/// Whether command `cmd` wakes waiters (it returns how many, except
/// `FUTEX_UNLOCK_PI`, which returns 0 and hands the lock to the top
/// waiter).
#[inline(always)]
pub fn is_wake(cmd: u32) -> bool {
    matches!(
        cmd,
        FUTEX_WAKE
            | FUTEX_WAKE_BITSET
            | FUTEX_WAKE_OP
            | FUTEX_REQUEUE
            | FUTEX_CMP_REQUEUE
            | FUTEX_UNLOCK_PI
            | FUTEX_CMP_REQUEUE_PI
    )
}

/// The uapi name of command `cmd`, when it has one.
pub fn name(cmd: u32) -> Option<&'static str> {
    NAMES.get(cmd as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `futex_cmd_has_timeout()` and what each command does:
    /// five commands sleep, the lock attempt does not, the rest wake or
    /// move waiters (or are gone: `FUTEX_FD`).
    #[test]
    fn the_wait_set_is_the_kernels() {
        let waits: [u32; 5] = [
            FUTEX_WAIT,
            FUTEX_WAIT_BITSET,
            FUTEX_LOCK_PI,
            FUTEX_LOCK_PI2,
            FUTEX_WAIT_REQUEUE_PI,
        ];
        let wakes: [u32; 7] = [
            FUTEX_WAKE,
            FUTEX_WAKE_BITSET,
            FUTEX_WAKE_OP,
            FUTEX_REQUEUE,
            FUTEX_CMP_REQUEUE,
            FUTEX_UNLOCK_PI,
            FUTEX_CMP_REQUEUE_PI,
        ];
        for c in 0..32 {
            assert_eq!(is_wait(c), waits.contains(&c), "{c}: {:?}", name(c));
            assert_eq!(is_wake(c), wakes.contains(&c), "{c}: {:?}", name(c));
        }
        assert!(!is_wait(FUTEX_TRYLOCK_PI) && !is_wake(FUTEX_TRYLOCK_PI));
        assert!(!is_wait(FUTEX_FD) && !is_wake(FUTEX_FD));
        // The option bits are not part of the command.
        let op = FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME;
        assert!(is_wait(cmd(op)));
        assert!(!is_wait(op));
    }

    /// The numbers are the uapi's (linux/futex.h), as the C library has
    /// them.
    #[test]
    fn the_numbers_are_the_uapis() {
        let uapi = [
            (FUTEX_WAIT, libc::FUTEX_WAIT),
            (FUTEX_WAKE, libc::FUTEX_WAKE),
            (FUTEX_FD, libc::FUTEX_FD),
            (FUTEX_REQUEUE, libc::FUTEX_REQUEUE),
            (FUTEX_CMP_REQUEUE, libc::FUTEX_CMP_REQUEUE),
            (FUTEX_WAKE_OP, libc::FUTEX_WAKE_OP),
            (FUTEX_LOCK_PI, libc::FUTEX_LOCK_PI),
            (FUTEX_UNLOCK_PI, libc::FUTEX_UNLOCK_PI),
            (FUTEX_TRYLOCK_PI, libc::FUTEX_TRYLOCK_PI),
            (FUTEX_WAIT_BITSET, libc::FUTEX_WAIT_BITSET),
            (FUTEX_WAKE_BITSET, libc::FUTEX_WAKE_BITSET),
            (FUTEX_WAIT_REQUEUE_PI, libc::FUTEX_WAIT_REQUEUE_PI),
            (FUTEX_CMP_REQUEUE_PI, libc::FUTEX_CMP_REQUEUE_PI),
            (FUTEX_LOCK_PI2, libc::FUTEX_LOCK_PI2),
        ];
        for (i, (ours, theirs)) in uapi.into_iter().enumerate() {
            assert_eq!(ours as i32, theirs, "{}", NAMES[i]);
            assert_eq!(ours as usize, i, "{}", NAMES[i]);
        }
        assert_eq!(FUTEX_PRIVATE_FLAG as i32, libc::FUTEX_PRIVATE_FLAG);
        assert_eq!(FUTEX_CLOCK_REALTIME as i32, libc::FUTEX_CLOCK_REALTIME);
        // The mask is the kernel's (`op & FUTEX_CMD_MASK` in do_futex);
        // the libc crate's also clears bits 9 and 10, which no command has.
        assert_eq!(FUTEX_CMD_MASK, !0x180);
    }
}
