//! `--json`: the report model serialized as is (schema in docs/JSON.md).

use std::io::{self, Write};

/// Writes `report` (a [`crate::model::Report`], or the report of `locks`,
/// `calls` or `offcpu`) as one
/// line of JSON followed by a newline (compact: a report of ten thousand
/// threads is tens of megabytes pretty-printed; pipe it to `jq` to read
/// it).
pub fn json<R: serde::Serialize + ?Sized>(report: &R, mut w: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut w, report).map_err(io::Error::other)?;
    writeln!(w)
}
