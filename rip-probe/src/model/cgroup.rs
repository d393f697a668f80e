//! `rip-probe --cgroup PATH`, `--comm NAME` and `--pid A,B,...`: several
//! processes observed over one window, reported as one report grouped
//! across them, with each process's own report below. Documented in
//! docs/JSON.md with the rest of the model.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Frame, GroupState, LocationSource, Report, described};

/// The report of several processes (`--cgroup PATH`, `--comm NAME`,
/// several `--pid`): what their threads do, grouped across them, then
/// each process's report.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ServiceReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The cgroup's directory under /sys/fs/cgroup, when a cgroup named
    /// the processes.
    pub cgroup: Option<String>,
    /// What named the processes, as the command line said it
    /// (`--pid 4711,4712`, `--comm postgres`, `--cgroup PATH`).
    pub targets: Vec<String>,
    /// The window the processes were observed over, ns (one for all).
    pub window_ns: u64,
    /// The threads of every process grouped by state, wait, lock,
    /// location and user stack, most populated first, each with how many
    /// members every process has.
    pub groups: Vec<ServiceGroup>,
    /// Things to know about the whole: processes observed in several
    /// windows, a window a signal cut short.
    pub warnings: Vec<String>,
    /// One report per process observed, by pid (each as `--pid` makes it).
    pub processes: Vec<Report>,
}

/// Threads of several processes that share their state, wait, lock,
/// location and user stack.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ServiceGroup {
    /// Members, in every process.
    pub count: usize,
    /// The shared state, as a thread group's.
    pub state: GroupState,
    /// The shared wait (syscall name or innermost kernel function).
    pub wait: Option<String>,
    /// The lock the members wait for, by name (a lock without a name is
    /// one of a process's own, named by its address).
    pub lock: Option<String>,
    /// The shortest blocked time among members, ns.
    pub min_ns: Option<u64>,
    /// The longest blocked time among members, ns.
    pub max_ns: Option<u64>,
    /// Whether a member's time is only a lower bound.
    pub lower_bound: bool,
    /// The shared location, `file:line function`.
    #[serde(serialize_with = "described")]
    #[schemars(with = "Option<String>")]
    pub location: Option<Frame>,
    /// Where the location came from.
    pub source: Option<LocationSource>,
    /// The shared user stack, innermost first (empty: none).
    pub frames: Arc<[Frame]>,
    /// The processes with members, most members first.
    pub processes: Vec<GroupShare>,
}

/// The members one process has in a [`ServiceGroup`].
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupShare {
    /// The process.
    pub pid: u32,
    /// Its members.
    pub count: usize,
    /// Their tids, ascending.
    pub tids: Vec<u64>,
}
