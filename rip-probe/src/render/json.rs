//! `--json`: the report model serialized as is (schema in docs/JSON.md).

use std::io::{self, Write};

use crate::model::Report;

/// Writes `report` as one line of JSON followed by a newline (compact: a
/// report of ten thousand threads is tens of megabytes pretty-printed; pipe
/// it to `jq` to read it).
pub fn json(report: &Report, mut w: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut w, report).map_err(io::Error::other)?;
    writeln!(w)
}
