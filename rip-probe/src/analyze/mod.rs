//! Analyses over a correlated, symbolized report: threads and tasks
//! grouped by what they are doing and where (over typed keys, never the
//! rendered text), and the filters the commands offer. Grouping is done
//! once, here, and every renderer reads the same groups. Who waits for
//! whom: [`waits`]; contention over a window (`rip-probe locks`):
//! [`contention`]. Which stack each thread shows: `stacks`.

pub(crate) mod calls;
pub(crate) mod cgo;
pub(crate) mod contention;
pub(crate) mod group;
pub(crate) mod health;
pub(crate) mod hist;
pub(crate) mod leaks;
pub(crate) mod offcpu;
pub(crate) mod python;
pub(crate) mod service;
pub(crate) mod stacks;
pub(crate) mod tasks;
pub(crate) mod timeline;
pub(crate) mod waits;

pub use group::group_threads;
pub use tasks::group_tasks;

use crate::model::Report;

/// Fills `report.groups` and `report.task_groups` from its threads and
/// tasks. Commands call it once, after filtering.
pub fn groups(report: &mut Report) {
    report.groups = group_threads(&report.threads);
    report.task_groups = group_tasks(&report.tasks);
}
