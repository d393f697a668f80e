//! Rendering: the report model as text (grouped summary, thread table,
//! per-thread history) or JSON. Every renderer writes to any
//! [`std::io::Write`], so output is tested byte for byte.

mod contention;
mod json;
mod tasks;
mod text;
mod words;

pub use contention::locks;
pub use json::json;
pub use text::{escape, grouped, history, live};
