//! The sampled live heap of a ring as text: totals, then each allocating
//! stack with its samples and estimated bytes, most first.

use std::io::{self, Write};

use super::{stack, text::escape};
use crate::model::sampled::SampledHeap;

/// Stacks shown; the rest are summed in one line.
const TEXT_STACKS: usize = 20;

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Writes `h` as text.
pub(crate) fn sampled_text(h: &SampledHeap, mut w: &mut dyn Write) -> io::Result<()> {
    let p = &h.process;
    writeln!(
        w,
        "pid {} {} ({}), ring {}",
        p.pid,
        escape(p.exe.as_deref().unwrap_or("?")),
        if p.alive {
            "running"
        } else {
            "gone: what was live at its end"
        },
        escape(&h.ring)
    )?;
    let exact = h.mean_bytes == 1;
    if exact {
        writeln!(
            w,
            "every allocation recorded: {} live allocation{}, {} (exact)",
            h.live_samples,
            if h.live_samples == 1 { "" } else { "s" },
            bytes(h.sampled_bytes)
        )?;
    } else {
        writeln!(
            w,
            "sampled every {} on average: {} live sample{} ({}) stand for about {} live",
            bytes(h.mean_bytes),
            h.live_samples,
            if h.live_samples == 1 { "" } else { "s" },
            bytes(h.sampled_bytes),
            bytes(h.estimated_bytes)
        )?;
    }
    writeln!(
        w,
        "{} sampled since the start, {} freed",
        h.sampled, h.freed
    )?;
    for warning in &h.warnings {
        writeln!(w, "warning: {}", escape(warning))?;
    }
    if h.stacks.is_empty() {
        writeln!(w, "\nno sampled allocation is live")?;
        return Ok(());
    }
    for s in h.stacks.iter().take(TEXT_STACKS) {
        writeln!(w)?;
        if exact {
            writeln!(
                w,
                "{} live, {} allocated from:",
                s.samples,
                bytes(s.sampled_bytes)
            )?;
        } else {
            writeln!(
                w,
                "about {} live ({} sample{}, {}) allocated from:",
                bytes(s.estimated_bytes),
                s.samples,
                if s.samples == 1 { "" } else { "s" },
                bytes(s.sampled_bytes)
            )?;
        }
        stack::write(&s.frames, None, "  ", &mut w)?;
    }
    let rest = &h.stacks[h.stacks.len().min(TEXT_STACKS)..];
    if !rest.is_empty() {
        writeln!(
            w,
            "\n{} more stack{}: about {} live",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" },
            bytes(rest.iter().map(|s| s.estimated_bytes).sum())
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(3 << 30), "3.0 GiB");
    }
}
