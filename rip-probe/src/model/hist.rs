//! The one histogram bucket of every report: `calls` latencies and `locks`
//! wait times are both log2 histograms, spelled alike in JSON.

use schemars::JsonSchema;
use serde::Serialize;

/// One bucket of a log2 histogram: the count of values in
/// `[lo_ns, hi_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Bucket {
    /// Lower bound, ns (inclusive): 0 or a power of two.
    pub lo_ns: u64,
    /// Upper bound, ns (exclusive): the next power of two (`u64::MAX` for
    /// the last bucket).
    pub hi_ns: u64,
    /// Values in the bucket (calls, waits).
    pub count: u64,
}
