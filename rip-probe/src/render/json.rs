//! `--json`: the report model serialized as is (schema in docs/JSON.md).

use std::io::{self, Write};

use crate::model::Report;

/// Writes `report` as pretty-printed JSON followed by a newline.
pub fn json(report: &Report, mut w: impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut w, report).map_err(io::Error::other)?;
    writeln!(w)
}
