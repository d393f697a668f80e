//! A progress line on stderr for long observation windows: the time left
//! and what was seen so far, rewritten in place, and only when stderr is a
//! terminal (a log file gets no carriage returns).

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use super::timefmt::duration;

/// Windows at least this long show progress.
const MIN_WINDOW: Duration = Duration::from_secs(2);
/// How often the line is rewritten.
const EVERY: Duration = Duration::from_millis(500);

/// The progress of one window.
pub(crate) struct Progress {
    /// The window's length; `None`: until interrupted.
    window: Option<Duration>,
    start: Instant,
    last: Option<Instant>,
}

impl Progress {
    /// Progress for a window of `window` (`None`: until interrupted)
    /// starting now, when it is long and stderr is a terminal.
    pub(crate) fn start(window: Option<Duration>) -> Option<Progress> {
        (window.is_none_or(|w| w >= MIN_WINDOW) && std::io::stderr().is_terminal()).then(|| {
            Progress {
                window,
                start: Instant::now(),
                last: None,
            }
        })
    }

    /// Whether the line is due for a rewrite.
    pub(crate) fn due(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= EVERY)
    }

    /// Rewrites the line: the time left (or, without a length, the time
    /// so far and how to end it), then `seen` (e.g. `1234 calls so far`).
    pub(crate) fn show(&mut self, seen: &str) {
        self.last = Some(Instant::now());
        let time = match self.window {
            Some(w) => format!(
                "{} left",
                duration(w.saturating_sub(self.start.elapsed()).as_nanos() as u64)
            ),
            None => format!(
                "{} (Ctrl-C ends)",
                duration(self.start.elapsed().as_nanos() as u64)
            ),
        };
        let sep = if seen.is_empty() { "" } else { ", " };
        let mut err = std::io::stderr().lock();
        // \x1b[K clears what a longer previous line left.
        let _ = write!(err, "\r{time}{sep}{seen}\x1b[K");
        let _ = err.flush();
    }

    /// Clears the line.
    pub(crate) fn finish(self) {
        if self.last.is_some() {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}
