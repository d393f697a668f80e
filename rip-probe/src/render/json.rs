//! `--json`: the report model serialized as is (schema in docs/JSON.md).

use std::io::{self, Write};

/// Writes `report` (a [`crate::model::Report`], or the report of `locks`,
/// `calls` or `offcpu`) as one
/// line of JSON followed by a newline (compact: a report of ten thousand
/// threads is tens of megabytes pretty-printed; pipe it to `jq` to read
/// it).
pub fn json<R: serde::Serialize + ?Sized>(report: &R, mut w: impl Write) -> io::Result<()> {
    // serde_json writes a report in millions of small pieces: into a
    // buffer of this type, not through the caller's writer (often `dyn`).
    let mut b = io::BufWriter::with_capacity(1 << 16, &mut w);
    serde_json::to_writer(&mut b, report).map_err(io::Error::other)?;
    writeln!(b)?;
    b.flush()
}
