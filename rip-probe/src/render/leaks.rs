//! `rip-probe leaks` as text: sp-rtrace's leak filter (only what is still
//! held is listed) and backtrace compression (one entry per acquiring
//! stack, with its count, bytes and oldest age), then the totals over
//! the window.

use std::io::{self, Write};

use inferno::flamegraph::{
    self,
    color::{BasicPalette, Palette},
};

use super::{
    folded,
    offcpu::xml_safe,
    stack,
    text::{escape, escape_frame},
};
use crate::{
    model::leaks::{HeapSampler, LeakPoint, LeakStack, LeakTotal, LeaksReport, ResourceKind},
    util::timefmt::duration,
};

/// Stacks shown in the text view; the others are summed in one line.
const TEXT_STACKS: usize = 25;
/// Points of the series shown in the text view.
const TEXT_POINTS: usize = 10;
/// Descriptor numbers or addresses shown per stack.
const TEXT_IDS: usize = 8;

/// `n` bytes in binary units: `512 B`, `4.0 KiB`, `1.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// "3 descriptors", "12 heap blocks (48.0 KiB)": one kind's total.
fn total(t: &LeakTotal) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match t.kind {
        ResourceKind::Heap => format!(
            "{} ({})",
            plural(t.count, "heap block", "heap blocks"),
            bytes(t.bytes)
        ),
        ResourceKind::Fd => plural(t.count, "descriptor", "descriptors"),
        ResourceKind::Mapping => {
            format!(
                "{} ({})",
                plural(t.count, "mapping", "mappings"),
                bytes(t.bytes)
            )
        }
        ResourceKind::Shm => format!(
            "{} ({})",
            plural(t.count, "shm attachment", "shm attachments"),
            bytes(t.bytes)
        ),
    }
}

fn totals(ts: &[LeakTotal]) -> String {
    let parts: Vec<String> = ts.iter().filter(|t| t.count > 0).map(total).collect();
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

/// The header of a report read from librip's allocation sampler: which
/// ring, whether the writer still runs, exact or estimated.
fn sampler_header(r: &LeaksReport, sm: &HeapSampler, w: &mut dyn Write) -> io::Result<()> {
    let p = &r.process;
    let bytes_total: u64 = r.totals.iter().map(|t| t.bytes).sum();
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
        escape(&sm.ring)
    )?;
    let s = |n: u64| if n == 1 { "" } else { "s" };
    if sm.estimated {
        writeln!(
            w,
            "heap from librip's sampler, sampled every {} on average: {} live sample{} ({}) stand for about {} live (estimates)",
            bytes(sm.mean_bytes),
            sm.live_samples,
            s(sm.live_samples),
            bytes(sm.sampled_bytes),
            bytes(bytes_total)
        )?;
    } else {
        // Exact only when every recorded allocation found its entry.
        let missing = sm.dropped + u64::from(sm.torn);
        let exact = if missing == 0 {
            "(exact)".to_string()
        } else {
            format!("(at least: {missing} not in the table)")
        };
        writeln!(
            w,
            "heap from librip's sampler, every allocation recorded: {} live allocation{}, {} {exact}",
            sm.live_samples,
            s(sm.live_samples),
            bytes(sm.sampled_bytes)
        )?;
    }
    writeln!(
        w,
        "{} sampled since the start, {} freed",
        sm.sampled, sm.freed
    )
}

/// Writes `report` as text.
pub fn leaks_text(r: &LeaksReport, w: &mut dyn Write) -> io::Result<()> {
    match &r.sampler {
        Some(sm) => sampler_header(r, sm, w)?,
        None => window_header(r, w)?,
    }
    for warning in &r.warnings {
        writeln!(w, "warning: {}", escape(warning))?;
    }
    let estimated = r.sampler.as_ref().is_some_and(|s| s.estimated);
    if r.stacks.is_empty() {
        if r.sampler.is_some() {
            writeln!(w, "\nno sampled allocation is live")?;
        } else {
            writeln!(
                w,
                "\nno resource acquired in the window is still held (older than {})",
                duration(r.min_age_ns)
            )?;
        }
    } else {
        writeln!(w)?;
        writeln!(w, "Outstanding, by acquiring stack (most bytes first):")?;
        for s in r.stacks.iter().take(TEXT_STACKS) {
            writeln!(w)?;
            one_stack(s, estimated, w)?;
        }
        if r.stacks.len() > TEXT_STACKS {
            let rest = &r.stacks[TEXT_STACKS..];
            let count: u64 = rest.iter().map(|s| s.count).sum();
            let b: u64 = rest.iter().map(|s| s.bytes).sum();
            writeln!(
                w,
                "\n… {} more stacks holding {count} resources ({}): --json lists them all",
                rest.len(),
                bytes(b)
            )?;
        }
    }
    series(&r.series, r.traced.heap.is_some(), w)
}

/// The header of a traced window: totals, what was traced, what was
/// filtered out.
fn window_header(r: &LeaksReport, w: &mut dyn Write) -> io::Result<()> {
    let p = &r.process;
    writeln!(
        w,
        "pid {} ({}) {}: {} outstanding after a {} window (acquired in it, not released, older than {})",
        p.pid,
        escape(p.comm.as_deref().unwrap_or("?")),
        escape(p.exe.as_deref().unwrap_or("?")),
        totals(&r.totals),
        duration(r.window_ns),
        duration(r.min_age_ns),
    )?;
    let t = &r.traced;
    let mut parts = Vec::new();
    if t.descriptors {
        parts.push("descriptors".to_string());
    }
    if t.mappings {
        parts.push("mappings".to_string());
    }
    if t.shm {
        parts.push("SysV shm".to_string());
    }
    let syscalls = if parts.is_empty() {
        "no syscalls".to_string()
    } else {
        format!("{} (syscall tracepoints)", parts.join(", "))
    };
    match &t.heap {
        Some(h) => writeln!(
            w,
            "traced: {syscalls}; heap (uprobes on {} of {} in {}: {} calls, {:.0}/s before the \
             window; {} frees of blocks from before it left out)",
            h.functions.join(", "),
            escape(&h.name),
            escape(&h.allocator),
            h.calls,
            h.calls_per_s_before,
            h.older_frees
        )?,
        None => writeln!(w, "traced: {syscalls}; heap not traced")?,
    }
    if let Some(n) = r.open_at_start {
        writeln!(
            w,
            "{n} descriptor{} open when the window began: not acquired in it, left out",
            if n == 1 { " was" } else { "s were" }
        )?;
    }
    if r.released.iter().any(|t| t.count > 0) {
        writeln!(
            w,
            "released in the window (filtered out): {}",
            totals(&r.released)
        )?;
    }
    Ok(())
}

/// One group; `estimated`: its heap bytes are the sampler's estimate and
/// its count live samples.
fn one_stack(s: &LeakStack, estimated: bool, w: &mut dyn Write) -> io::Result<()> {
    let what = match (s.kind, s.fd_kind) {
        (ResourceKind::Fd, Some(k)) => format!("descriptors ({})", k.name()),
        (k, _) => k.name().to_string(),
    };
    if estimated && s.kind == ResourceKind::Heap {
        writeln!(
            w,
            "{what}: about {} ({} sample{}), oldest {}, from {}",
            bytes(s.bytes),
            s.count,
            if s.count == 1 { "" } else { "s" },
            duration(s.oldest_ns),
            escape(&s.call)
        )?;
    } else {
        let size = match s.kind {
            ResourceKind::Fd => String::new(),
            _ => format!(", {}", bytes(s.bytes)),
        };
        writeln!(
            w,
            "{what}: {}{size}, oldest {}, from {}",
            s.count,
            duration(s.oldest_ns),
            escape(&s.call)
        )?;
    }
    if !s.ids.is_empty() {
        let ids: Vec<String> = s
            .ids
            .iter()
            .take(TEXT_IDS)
            .map(|&id| match s.kind {
                ResourceKind::Fd => id.to_string(),
                _ => format!("{id:#x}"),
            })
            .collect();
        let more = if s.count as usize > ids.len() {
            " …"
        } else {
            ""
        };
        let label = match s.kind {
            ResourceKind::Fd => "fds",
            _ => "at",
        };
        writeln!(w, "    {label} {}{more}", ids.join(" "))?;
    }
    for t in s.targets.iter().take(3) {
        writeln!(w, "    → {}", escape(t))?;
    }
    if s.frames.is_empty() {
        writeln!(w, "    (no user stack)")?;
        return Ok(());
    }
    // The frames' names come from the target's binaries.
    let mut frames = s.frames.to_vec();
    frames.iter_mut().for_each(escape_frame);
    let mut out: &mut dyn Write = &mut *w;
    stack::write(&frames, None, "    ", &mut out)
}

/// The totals over the window, at most [`TEXT_POINTS`] rows evenly
/// picked, the last always; the heap's columns only when it was traced
/// (a column of zeros would say nothing was allocated).
fn series(points: &[LeakPoint], heap: bool, w: &mut dyn Write) -> io::Result<()> {
    if points.len() < 2 {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(
        w,
        "Outstanding over the window (acquired in it, not yet released):"
    )?;
    let heap_cols = |a: &str, b: &str, c: &str| {
        if heap {
            format!(" {a:>11} {b:>11} {c:>11}")
        } else {
            String::new()
        }
    };
    writeln!(
        w,
        "  {:>9}{} {:>9} {:>11}",
        "AT",
        heap_cols("HEAP", "BLOCKS", "HEAP CALLS"),
        "FDS",
        "MAPPED"
    )?;
    let step = points.len().div_ceil(TEXT_POINTS);
    let picked = points
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i == points.len() - 1);
    for (_, p) in picked {
        writeln!(
            w,
            "  {:>9}{} {:>9} {:>11}",
            duration(p.at_ns),
            heap_cols(
                &bytes(p.heap_bytes),
                &p.heap_count.to_string(),
                &p.heap_calls.to_string()
            ),
            p.descriptors,
            bytes(p.mapped_bytes)
        )?;
    }
    Ok(())
}

/// The outstanding bytes as folded stacks, the flame graph's input: one
/// line per group that holds bytes (descriptors hold none), its kind
/// first, then its frames outermost first, then its bytes.
pub fn leaks_folded_lines(r: &LeaksReport) -> Vec<String> {
    let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
    for s in r.stacks.iter().filter(|s| s.bytes > 0) {
        let mut names = vec![format!("{} ({})", s.kind.name(), folded::clean(&s.call))];
        if s.frames.is_empty() {
            names.push("[no user stack]".into());
        }
        for f in s.frames.iter().rev() {
            folded::names(f, &mut names);
        }
        *lines.entry(names.join(";")).or_default() += s.bytes;
    }
    lines
        .into_iter()
        .map(|(stack, bytes)| format!("{stack} {bytes}"))
        .collect()
}

/// Writes `r` as an SVG flame graph: widths are outstanding bytes (heap
/// blocks, mappings, shm; descriptors hold none and are left out).
pub fn leaks_svg(r: &LeaksReport, w: &mut dyn Write) -> io::Result<()> {
    let lines: Vec<String> = leaks_folded_lines(r).iter().map(|l| xml_safe(l)).collect();
    let p = &r.process;
    let mut opts = flamegraph::Options::default();
    opts.title = xml_safe(&format!(
        "Outstanding bytes: {} (pid {})",
        p.comm.as_deref().unwrap_or("?"),
        p.pid
    ));
    let held: u64 = r.totals.iter().map(|t| t.bytes).sum();
    let fds: u64 = r
        .totals
        .iter()
        .filter(|t| t.kind == ResourceKind::Fd)
        .map(|t| t.count)
        .sum();
    let how = match &r.sampler {
        Some(sm) if sm.estimated => format!(
            "estimated from librip's sampler (every {} on average)",
            bytes(sm.mean_bytes)
        ),
        Some(_) => "from librip's sampler (every allocation)".into(),
        None => format!(
            "acquired in a {} window, held at its end",
            duration(r.window_ns)
        ),
    };
    opts.subtitle = Some(xml_safe(&format!(
        "{} {how}; {fds} descriptors hold no bytes and are not drawn. rip-probe leaks",
        bytes(held)
    )));
    opts.count_name = "bytes".into();
    opts.colors = Palette::Basic(BasicPalette::Mem);
    super::offcpu::draw(&mut opts, &lines, p.comm.as_deref(), w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use crate::model::{
        Frame, ProcessInfo,
        leaks::{FdKind, LeakLost, LeakTotal, LeakTracing},
    };

    fn report() -> LeaksReport {
        let frame = |addr, name: &str| Frame {
            addr,
            function: Some(name.into()),
            file: Some("leaky.c".into()),
            line: Some(12),
            module: Some("/tmp/leaky".into()),
            ..Frame::default()
        };
        LeaksReport {
            schema: 2,
            process: ProcessInfo {
                pid: 7,
                comm: Some("leaky".into()),
                exe: Some("/tmp/leaky".into()),
                alive: true,
                ..ProcessInfo::default()
            },
            window_ns: 2_000_000_000,
            min_age_ns: 0,
            traced: LeakTracing {
                descriptors: true,
                mappings: true,
                shm: true,
                heap: None,
            },
            open_at_start: Some(3),
            totals: vec![LeakTotal {
                kind: ResourceKind::Fd,
                count: 5,
                bytes: 0,
            }],
            released: vec![LeakTotal {
                kind: ResourceKind::Fd,
                count: 100,
                bytes: 0,
            }],
            stacks: vec![LeakStack {
                kind: ResourceKind::Fd,
                fd_kind: Some(FdKind::File),
                call: "openat".into(),
                count: 5,
                bytes: 0,
                oldest_ns: 1_000_000_000,
                ids: vec![3, 4, 5, 6, 7],
                targets: vec!["/etc/hostname".into()],
                addrs: vec![0x1000, 0x2000],
                frames: vec![frame(0x1000, "leak_fds"), frame(0x2000, "main")].into(),
            }],
            allocated: None,
            series: Vec::new(),
            lost: LeakLost::default(),
            warnings: vec!["heap not traced: --no-heap".into()],
            sampler: None,
        }
    }

    /// The leak filter's summary, the compressed stack with its count,
    /// kind and acquiring call, and the descriptors open at the start.
    #[test]
    fn text_names_the_leaking_stack_and_what_was_filtered_out() {
        let mut out = Vec::new();
        leaks_text(&report(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for want in [
            "pid 7 (leaky) /tmp/leaky: 5 descriptors outstanding after a 2.0s window",
            "traced: descriptors, mappings, SysV shm (syscall tracepoints); heap not traced",
            "3 descriptors were open when the window began",
            "released in the window (filtered out): 100 descriptors",
            "warning: heap not traced: --no-heap",
            "descriptors (file): 5, oldest 1.0s, from openat",
            "fds 3 4 5 6 7\n",
            "→ /etc/hostname",
            "leak_fds at leaky.c:12 (leaky)",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
        let mut empty = report();
        empty.stacks.clear();
        empty.totals.clear();
        let mut out = Vec::new();
        leaks_text(&empty, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(": nothing outstanding"), "{text}");
        assert!(text.contains("no resource acquired in the window is still held"));
    }

    /// Every allocation recorded is called exact only when each found its
    /// entry: allocations the full table dropped make it a lower bound.
    #[test]
    fn every_call_counts_are_exact_only_when_none_was_dropped() {
        let text = |dropped: u64, torn: u32| {
            let mut r = report();
            r.sampler = Some(HeapSampler {
                ring: "/dev/shm/x.ring".into(),
                mean_bytes: 1,
                estimated: false,
                sampled: 1000,
                freed: 800,
                dropped,
                torn,
                live_samples: 200,
                sampled_bytes: 200 * 1024,
            });
            let mut out = Vec::new();
            leaks_text(&r, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let whole = text(0, 0);
        assert!(
            whole.contains("every allocation recorded: 200 live allocations, 200.0 KiB (exact)"),
            "{whole}"
        );
        for (dropped, torn, want) in [(7, 0, 7), (0, 2, 2), (3, 1, 4)] {
            let short = text(dropped, torn);
            assert!(
                short.contains(&format!(
                    "200 live allocations, 200.0 KiB (at least: {want} not in the table)"
                )),
                "{short}"
            );
            assert!(!short.contains("(exact)"), "{short}");
        }
    }
}
