//! `rip-probe dump` of a ring written by the original header-only librip:
//! its named slots and their last addresses. Documented in docs/JSON.md
//! with the rest of the model.

use schemars::JsonSchema;
use serde::Serialize;

use super::Frame;

/// The report of `rip-probe dump FILE` for an original librip ring.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OriginalReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// Always `original-librip`.
    pub format: String,
    /// The ring file.
    pub path: String,
    /// Its size in bytes.
    pub file_size: u64,
    /// Its slots (of 320 bytes).
    pub slot_count: u64,
    /// Things to know (no `--exe`, a PIE executable, symbols not found).
    pub warnings: Vec<String>,
    /// The named slots.
    pub slots: Vec<OriginalSlot>,
}

/// One slot of an original ring.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OriginalSlot {
    /// Its index.
    pub id: u64,
    /// The name its thread gave it.
    pub name: String,
    /// Marked exited by its thread.
    pub exited: bool,
    /// Its last addresses, newest first.
    pub entries: Vec<OriginalEntry>,
}

/// One recorded address of an original slot.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OriginalEntry {
    /// The slot's counter when it was written.
    pub counter: u8,
    /// Its order among the slot's entries (higher is newer).
    pub seq: u64,
    /// The address.
    pub addr: u64,
    /// The address symbolized (only `addr` without `--exe`).
    pub frame: Frame,
}
