//! The commands: each a thin composition of the pipeline's stages
//! (discover → collect → correlate → symbolize → analyze → render).
//! `pid` drives a live [`crate::session::Session`]; `dump` reads a ring
//! alone; `original` dumps a ring of the original header-only librip;
//! `locks` counts lock contention over a window.

pub(crate) mod calls;
pub(crate) mod cgroup;
pub(crate) mod dump;
pub(crate) mod leaks;
pub(crate) mod leaks_ring;
pub(crate) mod list;
pub(crate) mod locks;
pub(crate) mod offcpu;
pub(crate) mod original;
pub(crate) mod output;
pub(crate) mod pid;
pub(crate) mod record;
pub(crate) mod serve;
pub(crate) mod targets;

use std::{io::Write, time::Duration};

use output::Sink;

use crate::{
    analyze,
    error::{Error, Result},
    model::Report,
    render,
};

/// The live commands: several processes (`--cgroup PATH`, `--comm
/// NAME`, several `--pid`), else `--pid PID`.
pub(crate) fn live(a: &pid::LiveArgs, out: &mut Sink) -> Result<()> {
    if a.named().several() {
        if let Some(option) = a.one_process_option() {
            return Err(Error::Usage(format!(
                "{option} reports on one process: give one --pid (several processes are \
                 reported together as text or --json)"
            )));
        }
        cgroup::run(a, out)
    } else {
        pid::run(a, out)
    }
}

/// Writes `report` to `out`: as JSON, or as text with `text`.
pub(crate) fn emit(
    report: &Report,
    json: bool,
    out: &mut Sink,
    text: fn(&Report, &mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    out.emit(|w| {
        if json {
            render::json(report, w)
        } else {
            text(report, w)
        }
    })
}

/// Writes the pprof profile `render` makes to `file` (checked before
/// the window), with the build-ids of `modules` (the binaries its frames
/// are in), read through process `view` (`None`: it is gone, read as
/// named here).
pub(crate) fn write_pprof<R>(
    file: &output::OutputFile,
    view: Option<u32>,
    modules: Vec<String>,
    report: &R,
    render: fn(&R, &render::BuildIds, &mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let ids = crate::util::timing::phase("read build-ids", || {
        crate::symbolize::build_ids(view, &modules)
    });
    file.write(|w| render(report, &ids, w))
}

/// `--min-idle`: keeps the tasks idle at least this long.
fn filter_idle(r: &mut Report, min_idle: Option<Duration>) {
    if let Some(min) = min_idle {
        analyze::tasks::retain_idle(&mut r.tasks, min.as_nanos() as u64);
    }
}

/// A window's length: `None` (`--duration forever`) is until Ctrl-C or
/// the target's exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Length(pub(crate) Option<Duration>);

/// Parses a window's length: a duration ([`parse_duration`]) or `forever`.
pub(crate) fn parse_length(s: &str) -> std::result::Result<Length, String> {
    if s.trim() == "forever" {
        return Ok(Length(None));
    }
    parse_duration(s)
        .map(|d| Length(Some(d)))
        .map_err(|e| format!("{e}, or forever (until Ctrl-C)"))
}

/// Parses `750ms`, `2s`, `1.5s`, `3m`, `1h`, `250us`, `10ns`; a bare number
/// is seconds.
pub(crate) fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 500ms, 2s, 1m)"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{s}` (use ns, us, ms, s, m, h)"
            ));
        }
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Renders `report`: JSON or text, and the files asked for (`--svg`
/// flame graph, `--timeline`), all looked at again before any is written.
pub(crate) fn emit_leaks(
    report: &crate::model::leaks::LeaksReport,
    json: bool,
    files: &output::Outputs,
    out: &mut Sink,
) -> Result<()> {
    files.recheck()?;
    if let Some(timeline) = &files.timeline {
        timeline.write(|w| render::leaks_timeline(report, w))?;
    }
    if let Some(svg) = &files.svg {
        svg.write(|w| render::leaks_svg(report, w))?;
    }
    out.emit(|w| {
        if json {
            return render::json(report, w);
        }
        render::leaks_text(report, w)?;
        if let Some(svg) = &files.svg {
            writeln!(
                w,
                "\nflame graph of the outstanding bytes: {}",
                svg.path().display()
            )?;
        }
        if let Some(timeline) = &files.timeline {
            writeln!(w, "timeline of the window: {}", timeline.path().display())?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1y").is_err());
        assert_eq!(parse_length("forever"), Ok(Length(None)));
        assert_eq!(parse_length("2s"), Ok(Length(Some(Duration::from_secs(2)))));
        assert!(parse_length("always").unwrap_err().contains("or forever"));
    }
}
