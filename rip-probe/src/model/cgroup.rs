//! `rip-probe --cgroup PATH`: one report per process of a cgroup.
//! Documented in docs/JSON.md with the rest of the model.

use schemars::JsonSchema;
use serde::Serialize;

use super::Report;

/// The report of `rip-probe --cgroup PATH`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct CgroupReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The cgroup's directory under /sys/fs/cgroup.
    pub cgroup: String,
    /// One report per process observed, by pid (each as `--pid` makes it).
    pub processes: Vec<Report>,
}
