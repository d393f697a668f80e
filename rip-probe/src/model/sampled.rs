//! What librip's allocation sampler left in a ring (`rip-probe leaks`
//! on a ring, live or after the process died): the sampled allocations
//! still live, grouped by stack, scaled to estimated bytes.

use serde::Serialize;

use super::{Frame, ProcessInfo};

/// The sampled live heap of one ring.
#[derive(Clone, Debug, Serialize)]
pub struct SampledHeap {
    /// The process that wrote the ring.
    pub process: ProcessInfo,
    /// The ring file.
    pub ring: String,
    /// The sampling mean in bytes (1: every allocation was recorded, and
    /// counts and bytes are exact).
    pub mean_bytes: u64,
    /// Allocations sampled since the ring was made.
    pub sampled: u64,
    /// Of those, freed since.
    pub freed: u64,
    /// Sampled allocations the full table could not hold (the live totals
    /// are then lower bounds).
    pub dropped: u64,
    /// Entries found half-written (a writer killed mid-record), left out.
    pub torn: u32,
    /// Sampled allocations live at the time of reading.
    pub live_samples: u64,
    /// Their requested bytes.
    pub sampled_bytes: u64,
    /// The bytes they stand for (each sample of `s` bytes at mean `m`:
    /// `s / (1 - exp(-s/m))`).
    pub estimated_bytes: u64,
    /// Live samples by stack, most estimated bytes first.
    pub stacks: Vec<SampledStack>,
    /// Anything that limits what the report says.
    pub warnings: Vec<String>,
}

/// The live samples allocated from one stack.
#[derive(Clone, Debug, Serialize)]
pub struct SampledStack {
    /// Live samples.
    pub samples: u64,
    /// Their requested bytes.
    pub sampled_bytes: u64,
    /// The bytes they stand for.
    pub estimated_bytes: u64,
    /// When the oldest was allocated (ns since the Unix epoch).
    pub oldest_unix_ns: u64,
    /// The allocating stack, the allocator's caller first.
    pub frames: Vec<Frame>,
    /// The same stack as return addresses (for grouping and symbolizing).
    #[serde(skip)]
    pub addrs: Vec<u64>,
}
