//! `rip-probe locks` as text: per contended lock, its totals, a log2
//! histogram of the waits drawn as bpftrace's `hist()` and SystemTap's
//! `@hist_log` draw them, the threads that waited longest and where the
//! wakers released the lock. Every string from the target is escaped.

use std::io::{self, Write};

use super::text::escape;
use crate::{
    model::{
        Bucket, Frame,
        contention::{LockContention, LocksReport},
    },
    util::timefmt::duration,
};

/// Frames of a waker's stack shown after its location.
const STACK_FRAMES: usize = 4;

/// Writes `r` as text.
pub fn locks(r: &LocksReport, w: &mut dyn Write) -> io::Result<()> {
    let p = &r.process;
    writeln!(
        w,
        "pid {} ({}) {}: futex contention over {}",
        p.pid,
        escape(p.comm.as_deref().unwrap_or("?")),
        escape(p.exe.as_deref().unwrap_or("?")),
        duration(r.window_ns)
    )?;
    for warning in &r.warnings {
        writeln!(w, "warning: {}", escape(warning))?;
    }
    if r.locks.is_empty() {
        writeln!(w, "no thread waited for a lock (futex) during the window")?;
        return Ok(());
    }
    let idle = r.locks.iter().filter(|l| l.idle).count();
    let n = r.locks.len() - idle;
    writeln!(
        w,
        "{n} lock{} waited on or woken, longest total wait first",
        if n == 1 { "" } else { "s" }
    )?;
    for l in r.locks.iter().filter(|l| !l.idle) {
        writeln!(w)?;
        lock(l, w)?;
    }
    if idle > 0 {
        writeln!(w)?;
        writeln!(
            w,
            "IDLE WAITS, not contention ({idle}): condition variables, and waits that all ended \
             by their timeout with no wake"
        )?;
        for l in r.locks.iter().filter(|l| l.idle) {
            writeln!(w)?;
            lock(l, w)?;
        }
    }
    Ok(())
}

fn lock(l: &LockContention, w: &mut dyn Write) -> io::Result<()> {
    let name = l
        .symbol
        .as_deref()
        .map_or_else(|| format!("{:#x}", l.lock), escape);
    let flavor = l.mutex.as_ref().map_or(String::new(), |m| {
        let mut f = vec![m.kind];
        for (on, word) in [
            (m.robust, "robust"),
            (m.pi, "PI"),
            (m.pp, "PP"),
            (m.pshared, "shared"),
        ] {
            if on {
                f.push(word);
            }
        }
        format!(" ({})", f.join(", "))
    });
    let at = if l.futex == l.lock {
        format!("{:#x}", l.lock)
    } else {
        format!("{:#x}, futex {:#x}", l.lock, l.futex)
    };
    writeln!(w, "{} {name}{flavor} at {at}", l.kind.as_str())?;
    writeln!(
        w,
        "  {} waits, {} wakes; waited {} in total, max {}, p99 < {}",
        l.waits,
        l.wakes,
        duration(l.total_wait_ns),
        duration(l.max_wait_ns),
        duration(l.p99_wait_ns)
    )?;
    if !l.histogram.is_empty() {
        writeln!(w, "  wait (ns)")?;
        histogram(&l.histogram, w)?;
    }
    if !l.top_waiters.is_empty() {
        writeln!(w, "  top waiters")?;
        for t in &l.top_waiters {
            writeln!(
                w,
                "    {:<8} {:<16} {:>6} waits, {} in total, max {}",
                t.tid,
                escape(t.name.as_deref().unwrap_or("?")),
                t.waits,
                duration(t.total_wait_ns),
                duration(t.max_wait_ns)
            )?;
        }
    }
    if !l.wakers.is_empty() {
        writeln!(w, "  woken from (where the holder released it)")?;
        for k in &l.wakers {
            let at = k
                .location
                .as_ref()
                .map_or_else(|| "an unknown place".to_string(), |f| escape(&f.describe()));
            let callers: Vec<String> = callers(k.location.as_ref(), &k.stack)
                .map(|f| escape(&f.describe()))
                .collect();
            let via = if callers.is_empty() {
                String::new()
            } else {
                format!(" ← {}", callers.join(" ← "))
            };
            writeln!(
                w,
                "    {:>6} wakes by {} calls (last tid {}) at {at}{via}",
                k.wakes, k.calls, k.tid
            )?;
        }
    }
    Ok(())
}

/// The frames after the waker's location, a few.
fn callers<'a>(loc: Option<&Frame>, stack: &'a [Frame]) -> impl Iterator<Item = &'a Frame> {
    let from = loc
        .and_then(|l| stack.iter().position(|f| f.addr == l.addr))
        .map_or(stack.len(), |i| i + 1);
    stack.iter().skip(from).take(STACK_FRAMES)
}

/// bpftrace's `hist()`: `[4M, 8M)   380 |@@@@…|`, bars scaled to the
/// fullest bucket.
fn histogram(h: &[Bucket], w: &mut dyn Write) -> io::Result<()> {
    super::hist::log2(h, "  ", w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_fullest_bucket() {
        let h = [
            Bucket {
                lo_ns: 1 << 21,
                hi_ns: 1 << 22,
                count: 1,
            },
            Bucket {
                lo_ns: 1 << 22,
                hi_ns: 1 << 23,
                count: 104,
            },
        ];
        let mut out = Vec::new();
        histogram(&h, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("  {:<16}{:>8} |{}|", "[2M, 4M)", 1, " ".repeat(52))
        );
        assert_eq!(
            lines[1],
            format!("  {:<16}{:>8} |{}|", "[4M, 8M)", 104, "@".repeat(52))
        );
    }
}
