//! Rendering: the report model as text (grouped summary, thread table,
//! per-thread history) or JSON. Every renderer writes to any
//! [`std::io::Write`], so output is tested byte for byte.

mod calls;
mod hist;
mod json;
mod tasks;
mod text;
mod words;

pub use calls::{calls_json, calls_text};
pub use json::json;
pub use text::{escape, grouped, history, live};
