//! `rip-probe offcpu` as text (totals, threads, last snaps, the stacks
//! with most time off CPU), as folded stacks in microseconds, as an SVG
//! flame graph (inferno), or as JSON.

use std::io::{self, Write};

use inferno::flamegraph::{
    self,
    color::{BasicPalette, Palette},
};

use super::{
    folded, stack,
    text::{escape, escape_frame},
};
use crate::{
    analyze::offcpu::percent,
    model::offcpu::{OffCpuReport, OffCpuStack},
    util::timefmt::duration,
};

/// Stacks shown in the text view; the others are summed in one line.
const TEXT_STACKS: usize = 20;
/// Kernel frames shown per stack in the text view.
const KERNEL_FRAMES: usize = 12;

/// Writes `report` as text.
pub fn offcpu_text(r: &OffCpuReport, w: &mut dyn Write) -> io::Result<()> {
    let p = &r.process;
    writeln!(
        w,
        "pid {} ({}) {}: {} off CPU in {} over {} thread{} (blocked {}, preempted {})",
        p.pid,
        escape(p.comm.as_deref().unwrap_or("?")),
        escape(p.exe.as_deref().unwrap_or("?")),
        duration(r.total_ns),
        duration(r.window_ns),
        r.threads.len(),
        if r.threads.len() == 1 { "" } else { "s" },
        duration(r.total_ns - r.preempted_ns),
        duration(r.preempted_ns),
    )?;
    if r.short.count > 0 {
        writeln!(
            w,
            "{} periods shorter than {} ({} in all) are not attributed",
            r.short.count,
            duration(r.min_block_ns),
            duration(r.short.ns)
        )?;
    }
    for warning in &r.warnings {
        writeln!(w, "warning: {}", escape(warning))?;
    }
    if r.stacks.is_empty() {
        writeln!(
            w,
            "\nno thread left the CPU for {} or more during the window",
            duration(r.min_block_ns.max(1))
        )?;
        return Ok(());
    }

    writeln!(w)?;
    writeln!(
        w,
        "  {:<8} {:<16} {:>9} {:>9} {:>9} {:>6}",
        "TID", "NAME", "OFF-CPU", "BLOCKED", "PREEMPTED", "SHARE"
    )?;
    for t in &r.threads {
        let off = t.blocked_ns + t.preempted_ns;
        writeln!(
            w,
            "  {:<8} {:<16} {:>9} {:>9} {:>9} {:>5.1}%{}",
            t.tid,
            escape(t.name.as_deref().unwrap_or("(exited)")),
            duration(off),
            duration(t.blocked_ns),
            duration(t.preempted_ns),
            percent(off, r.total_ns),
            if t.whole_window {
                "  blocked all window"
            } else {
                ""
            }
        )?;
    }

    if !r.snaps.is_empty() {
        writeln!(w)?;
        writeln!(w, "By last snap:")?;
        for s in &r.snaps {
            writeln!(
                w,
                "  {:>5.1}% {:>9}  {}",
                percent(s.off_cpu_ns, r.total_ns),
                duration(s.off_cpu_ns),
                escape(&s.snap.describe())
            )?;
        }
    }

    writeln!(w)?;
    writeln!(w, "Stacks, most time off CPU first:")?;
    for s in r.stacks.iter().take(TEXT_STACKS) {
        writeln!(w)?;
        one_stack(r, s, w)?;
    }
    if r.stacks.len() > TEXT_STACKS {
        let rest: u64 = r.stacks[TEXT_STACKS..].iter().map(|s| s.off_cpu_ns).sum();
        writeln!(
            w,
            "\n… {} more stacks with {} ({:.1}%): --folded, --svg or --json list them all",
            r.stacks.len() - TEXT_STACKS,
            duration(rest),
            percent(rest, r.total_ns)
        )?;
    }
    Ok(())
}

fn one_stack(r: &OffCpuReport, s: &OffCpuStack, w: &mut dyn Write) -> io::Result<()> {
    let tids: Vec<String> = s.tids.iter().take(8).map(|t| t.to_string()).collect();
    let more = if s.tids.len() > 8 { " …" } else { "" };
    writeln!(
        w,
        "{:>5.1}% {}  {}, {} period{}, thread{} {}{more}",
        percent(s.off_cpu_ns, r.total_ns),
        duration(s.off_cpu_ns),
        if s.preempted {
            "preempted (runnable, waiting for a CPU)"
        } else {
            "blocked"
        },
        s.count,
        if s.count == 1 { "" } else { "s" },
        if s.tids.len() == 1 { "" } else { "s" },
        tids.join(" ")
    )?;
    if let Some(snap) = &s.snap {
        writeln!(w, "    last snap: {}", escape(&snap.describe()))?;
    }
    if !s.unwound && !s.frames.is_empty() {
        writeln!(
            w,
            "    (stack not unwound: only where the thread entered the kernel)"
        )?;
    }
    if s.frames.is_empty() {
        writeln!(w, "    (no user registers)")?;
    }
    // The frames' names come from the target's binaries.
    let mut frames = s.frames.to_vec();
    frames.iter_mut().for_each(escape_frame);
    let mut out: &mut dyn Write = &mut *w;
    stack::write(&frames, None, "    ", &mut out)?;
    if !s.kernel_stack.is_empty() {
        let names: Vec<String> = s
            .kernel_stack
            .iter()
            .take(KERNEL_FRAMES)
            .map(|f| {
                f.function
                    .as_deref()
                    .map(escape)
                    .unwrap_or_else(|| format!("{:#x}", f.addr))
            })
            .collect();
        let more = if s.kernel_stack.len() > KERNEL_FRAMES {
            " ← …"
        } else {
            ""
        };
        writeln!(w, "    kernel: {}{more}", names.join(" ← "))?;
    }
    Ok(())
}

/// The folded lines of `r`, in microseconds off CPU: `comm;[snap
/// LOCATION];outer;…;inner;kernel_[k];…[;[preempted]] US`. The last snap,
/// when there is one, sits right under the process, so a flame graph of an
/// instrumented program splits first by where its threads last snapped.
pub fn offcpu_folded_lines(r: &OffCpuReport) -> Vec<String> {
    let comm = r
        .process
        .comm
        .as_deref()
        .map(folded::clean)
        .unwrap_or_else(|| format!("pid {}", r.process.pid));
    let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
    for s in &r.stacks {
        let mut names = vec![comm.clone()];
        if let Some(snap) = &s.snap {
            names.push(folded::clean(&format!("[snap {}]", snap.describe())));
        }
        if s.frames.is_empty() {
            names.push("[no user stack]".into());
        }
        for f in s.frames.iter().rev() {
            folded::names(f, &mut names);
        }
        for k in s.kernel_stack.iter().rev() {
            let name = k
                .function
                .as_deref()
                .map(folded::clean)
                .unwrap_or_else(|| format!("{:#x}", k.addr));
            names.push(format!("{name}_[k]"));
        }
        if s.preempted {
            names.push("[preempted]".into());
        }
        *lines.entry(names.join(";")).or_default() += s.off_cpu_ns;
    }
    lines
        .into_iter()
        .filter_map(|(stack, ns)| {
            let us = ns / 1000;
            (us > 0).then(|| format!("{stack} {us}"))
        })
        .collect()
}

/// Writes the folded stacks of `r` (see [`offcpu_folded_lines`]).
pub fn offcpu_folded(r: &OffCpuReport, w: &mut dyn Write) -> io::Result<()> {
    for l in offcpu_folded_lines(r) {
        writeln!(w, "{l}")?;
    }
    Ok(())
}

/// Writes `r` as an SVG flame graph: widths are microseconds off CPU.
pub fn offcpu_svg(r: &OffCpuReport, w: &mut dyn Write) -> io::Result<()> {
    let lines: Vec<String> = offcpu_folded_lines(r).iter().map(|l| xml_safe(l)).collect();
    let p = &r.process;
    let mut opts = flamegraph::Options::default();
    opts.title = xml_safe(&format!(
        "Off-CPU time: {} (pid {})",
        p.comm.as_deref().unwrap_or("?"),
        p.pid
    ));
    opts.subtitle = Some(format!(
        "{} off CPU in a {} window (blocked {}, preempted {}); periods under {} left out. rip-probe offcpu",
        duration(r.total_ns),
        duration(r.window_ns),
        duration(r.total_ns - r.preempted_ns),
        duration(r.preempted_ns),
        duration(r.min_block_ns.max(1)),
    ));
    opts.count_name = "us".into();
    opts.colors = Palette::Basic(BasicPalette::Io);
    opts.bgcolors = Some(flamegraph::color::BackgroundColor::Blue);
    draw(&mut opts, &lines, p.comm.as_deref(), w)
}

/// Draws the folded `lines` with `opts`; with none, a graph of the
/// process `comm` alone (inferno refuses an empty input, and the process
/// alone says "nothing" as well).
pub(super) fn draw(
    opts: &mut flamegraph::Options,
    lines: &[String],
    comm: Option<&str>,
    w: &mut dyn Write,
) -> io::Result<()> {
    if lines.is_empty() {
        let comm = xml_safe(&folded::clean(comm.unwrap_or("process")));
        return flamegraph::from_lines(opts, [format!("{comm} 1")].iter().map(|s| s.as_str()), w)
            .map_err(io::Error::other);
    }
    flamegraph::from_lines(opts, lines.iter().map(|s| s.as_str()), w).map_err(io::Error::other)
}

/// `s` with every character XML 1.0 cannot hold written out as text
/// (`\x1b`, `\u{fffe}`): control characters (which no character
/// reference may name either) and the non-characters U+FFFE and U+FFFF.
/// inferno escapes markup (`<`, `&`, quotes) itself, not these.
pub(super) fn xml_safe(s: &str) -> String {
    let bad = |c: char| c.is_control() || matches!(c, '\u{fffe}' | '\u{ffff}');
    if !s.chars().any(bad) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if matches!(c, '\u{fffe}' | '\u{ffff}') {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else if c.is_control() {
            out.push_str(&escape(&c.to_string()));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_safe_writes_out_what_xml_cannot_hold() {
        assert_eq!(xml_safe("plain <&>"), "plain <&>");
        assert_eq!(
            xml_safe("a\u{1b}[31m\u{7}b\tc\u{fffe}\u{85}"),
            "a\\x1b[31m\\x07b\\tc\\u{fffe}\\u{85}"
        );
    }
}
