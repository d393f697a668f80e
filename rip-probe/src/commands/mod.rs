//! The commands: each a thin composition of the pipeline's stages
//! (discover → collect → correlate → symbolize → analyze → render).
//! `pid` drives a live [`crate::session::Session`]; `dump` reads a ring
//! alone; `original` dumps a ring of the original header-only librip.

pub(crate) mod dump;
pub(crate) mod original;
pub(crate) mod pid;

use std::{io::Write, time::Duration};

use crate::{
    analyze,
    error::{Error, Result},
    model::Report,
    render,
};

fn write_err(e: std::io::Error) -> Error {
    Error::io("stdout", e)
}

pub(crate) fn emit(
    report: &Report,
    json: bool,
    out: &mut dyn Write,
    text: fn(&Report, &mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if json {
        render::json(report, &mut *out).map_err(write_err)?;
    } else {
        text(report, &mut *out).map_err(write_err)?;
    }
    out.flush().map_err(write_err)
}

/// `--min-idle`: keeps the tasks idle at least this long.
fn filter_idle(r: &mut Report, min_idle: Option<Duration>) {
    if let Some(min) = min_idle {
        analyze::tasks::retain_idle(&mut r.tasks, min.as_nanos() as u64);
    }
}
