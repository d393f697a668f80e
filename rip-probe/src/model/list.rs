//! `rip-probe list`: the processes that map a librip ring. Documented in
//! docs/JSON.md with the rest of the model.

use schemars::JsonSchema;
use serde::Serialize;

/// The report of `rip-probe list`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ListReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The processes whose own ring was found, by pid.
    pub processes: Vec<ListedProcess>,
    /// Processes whose memory maps could not be read (another user's
    /// without the privilege to look, or one that forbids even root): they
    /// may map a ring too.
    pub unseen: u32,
    /// Whether /proc hides other users' processes (`hidepid`): they are
    /// neither listed nor counted in `unseen`.
    pub hidepid: bool,
}

/// One process that maps a ring it wrote.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ListedProcess {
    /// Its pid on the host.
    pub pid: u32,
    /// Its pid in its own pid namespace, when that differs.
    pub ns_pid: Option<u32>,
    /// Its threads (from /proc, else the ring's live thread slots).
    pub threads: u32,
    /// Its live task (coroutine) slots in the ring.
    pub tasks: u32,
    /// Its cgroup (v2) path, `?` when unreadable.
    pub cgroup: String,
    /// The ring's path as the process sees it.
    pub ring: String,
    /// Whether that path is in another mount namespace than ours.
    pub other_mount_namespace: bool,
}
