//! rip-probe: where is every thread of a process, and why is it not moving.
//!
//! Data flows through the modules in this order:
//! discover → collect (ring + kernel) → correlate → symbolize → render.

pub mod collect;
pub mod error;

pub use error::{Error, Result};
