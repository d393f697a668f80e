//! Support used by every stage: phase timings, helper threads, and the
//! way durations and wall-clock times are written.

pub(crate) mod background;
pub(crate) mod progress;
pub(crate) mod timefmt;
pub(crate) mod timing;
