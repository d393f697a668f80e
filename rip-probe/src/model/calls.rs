//! `rip-probe calls`: how often each probed function was called, how long
//! its calls took, and which were outliers. Documented in docs/JSON.md
//! with the rest of the model.

use schemars::JsonSchema;
use serde::Serialize;

use super::{Bucket, Frame, ProcessInfo};

/// The report of `rip-probe calls`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct CallsReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema: u32,
    /// The process the calls were counted in.
    pub process: ProcessInfo,
    /// How long the calls were counted, in ns (shorter than asked when the
    /// process exited).
    pub window_ns: u64,
    /// Which calls are listed as outliers, if any.
    pub outlier_rule: Option<OutlierRule>,
    /// Each probed function, most called first.
    pub functions: Vec<FunctionCalls>,
    /// The outliers, in the order they returned.
    pub outliers: Vec<SlowCall>,
    /// Outliers recorded but not listed (past the list's bound).
    pub outliers_omitted: u64,
    /// Things to know: the process exited, outliers were dropped.
    pub warnings: Vec<String>,
}

/// Which calls are outliers.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutlierRule {
    /// Calls slower than a fixed latency (`--slower-than`).
    SlowerThan {
        /// The latency, ns.
        threshold_ns: u64,
    },
    /// Calls slower than a share of the slowest call of the same function
    /// during a training window at the start (`--outlier`).
    Trained {
        /// The share, in percent (250: two and a half times the slowest).
        percent: u32,
        /// The training window, ns; no outliers are listed from it.
        training_ns: u64,
    },
}

/// One probed function's calls.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct FunctionCalls {
    /// Function name, demangled.
    pub function: String,
    /// The binary (executable or library) holding it.
    pub module: String,
    /// Its offset in that file.
    pub module_offset: u64,
    /// Calls entered during the window: exact.
    pub calls: u64,
    /// Calls that returned during the window and were timed; the latency
    /// figures are theirs.
    pub timed: u64,
    /// Shortest latency, ns.
    pub min_ns: Option<u64>,
    /// Mean latency, ns.
    pub mean_ns: Option<u64>,
    /// Median latency, as the bounds of the histogram bucket holding it.
    pub p50: Option<Bounds>,
    /// 99th percentile latency, as bucket bounds.
    pub p99: Option<Bounds>,
    /// Longest latency, ns.
    pub max_ns: Option<u64>,
    /// Latencies in log2 buckets, from the first non-empty bucket to the
    /// last (the empty ones between included).
    pub histogram: Vec<Bucket>,
    /// The outlier threshold applied to this function, ns (none: no
    /// outliers asked for, or no calls to train on).
    pub threshold_ns: Option<u64>,
    /// Calls slower than the threshold.
    pub outliers: u64,
}

/// A latency known to lie in `[lo_ns, hi_ns)`: a percentile read from a
/// histogram whose buckets are a quarter of a power of two wide, narrowed
/// to the exact minimum and maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Bounds {
    /// Lower bound, ns (inclusive).
    pub lo_ns: u64,
    /// Upper bound, ns (exclusive).
    pub hi_ns: u64,
}

/// A call slower than its function's threshold.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SlowCall {
    /// The function.
    pub function: String,
    /// The calling thread.
    pub tid: u32,
    /// When the call started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// How long it took, ns.
    pub duration_ns: u64,
    /// Where it was called from: the caller's return address, symbolized.
    pub caller: Frame,
    /// The thread's stack at entry, innermost first: the function, the
    /// caller (as `caller`), and its callers, unwound from the binaries'
    /// CFI (no frame pointers needed).
    pub stack: Vec<Frame>,
}
