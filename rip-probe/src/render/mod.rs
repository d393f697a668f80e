//! Rendering: the report model as text (grouped summary with each group's
//! user stack, thread table, per-thread history), folded stacks or JSON. Every renderer writes to any
//! [`std::io::Write`], so output is tested byte for byte.

mod calls;
mod contention;
mod folded;
mod hist;
mod json;
mod leaks;
mod leaks_timeline;
mod offcpu;
mod openmetrics;
mod otlp;
mod perfetto;
mod pprof;
pub mod protos;
mod service;
mod stack;
mod tasks;
mod text;
mod words;

pub use calls::calls_text;
pub use contention::locks;
pub use folded::folded;
pub use json::json;
pub use leaks::{bytes, leaks_folded_lines, leaks_svg, leaks_text};
pub use leaks_timeline::leaks_timeline;
pub use offcpu::{offcpu_folded, offcpu_folded_lines, offcpu_svg, offcpu_text};
pub use openmetrics::{OPENMETRICS_CONTENT_TYPE, openmetrics};
pub use otlp::otlp_logs;
pub use perfetto::{perfetto, perfetto_trace, process_track, span_name, thread_track};
pub use pprof::{
    BuildIds, calls_pprof, calls_profile, leaks_pprof, leaks_profile, modules as pprof_modules,
    offcpu_pprof, offcpu_profile, threads_pprof, threads_profile,
};
pub use service::service;
pub use text::{escape, grouped, history, live, live_cut};
