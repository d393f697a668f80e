//! The observation window every observing command runs (`--pid`,
//! `--cgroup`, `calls`, `offcpu`, `locks`): it lasts `--duration`, or
//! until interrupted when none is given; it ticks, so the command can
//! drain what its programs send; it shows progress on a terminal; it ends
//! early when the target exits; and, when the CLI asked for it, the first
//! SIGINT or SIGTERM ends it so the command reports what it gathered
//! (a second one ends rip-probe at once, as a plain Ctrl-C does: the
//! kernel detaches the programs with the process's descriptors).
//!
//! The library API gets no signal handler: a program that drives a
//! [`crate::Session`] keeps its own signals as they were.

use std::time::{Duration, Instant};

use crate::{
    discover::Lost,
    error::Result,
    util::{
        interrupt::{arm, interrupted, sender},
        progress::Progress,
        timefmt, timing,
    },
};

/// What a command does while its window runs.
pub(crate) trait Watch {
    /// The work due at every tick (drain what the programs sent, answer
    /// them), `elapsed` into the window.
    fn tick(&mut self, _elapsed: Duration) -> Result<()> {
        Ok(())
    }
    /// Whether the target is gone, and how.
    fn gone(&mut self) -> Option<Lost>;
    /// Waits at most `max`, returning early when the target exits.
    fn wait(&mut self, max: Duration) -> Result<()>;
    /// The time into the window at which the command has work to do before
    /// the next tick (e.g. the end of a training window), if any.
    fn due(&self) -> Option<Duration> {
        None
    }
    /// What was seen so far, for the progress line (`1234 calls so
    /// far`).
    fn seen(&mut self) -> Result<String> {
        Ok(String::new())
    }
}

/// How a window ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// It ran its length.
    Elapsed,
    /// The target exited (or its pid was reused).
    Gone(Lost),
    /// A signal ended it (by name: `SIGINT`, `SIGTERM`).
    Interrupted(&'static str),
}

/// A window that ran.
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    /// The length asked for (`None`: until interrupted).
    pub(crate) asked: Option<Duration>,
    /// How long it lasted (at most the length asked).
    pub(crate) elapsed: Duration,
    /// How it ended.
    pub(crate) end: End,
    /// Who sent the signal that ended it (pid, and name if it still
    /// ran), when a process did.
    pub(crate) sender: Option<(u32, Option<String>)>,
}

impl Observed {
    /// The target, if it went away during the window.
    pub(crate) fn lost(&self) -> Option<&Lost> {
        match &self.end {
            End::Gone(l) => Some(l),
            _ => None,
        }
    }

    /// The line a report carries when a signal ended the window: how long
    /// it really lasted, so its figures are read as covering that.
    pub(crate) fn interrupted_note(&self) -> Option<String> {
        let End::Interrupted(sig) = self.end else {
            return None;
        };
        let ran = timefmt::duration(self.elapsed.as_nanos() as u64);
        // Who sent it: a signal meant for another process (its pid
        // reused) can then be told from the user's.
        let from = match &self.sender {
            Some((pid, Some(comm))) => format!(" (sent by pid {pid}, {comm})"),
            Some((pid, None)) => format!(" (sent by pid {pid}, gone since)"),
            None => String::new(),
        };
        Some(match self.asked {
            Some(asked) => format!(
                "window cut short by {sig} after {ran} of {}: the figures cover those {ran}{from}",
                timefmt::duration(asked.as_nanos() as u64)
            ),
            None => {
                format!("window ended by {sig} after {ran}: the figures cover those {ran}{from}")
            }
        })
    }
}

/// One observation window, not yet run.
pub(crate) struct Window {
    length: Option<Duration>,
    tick: Duration,
    /// The time since the window started.
    clock: Box<dyn Fn() -> Duration>,
    /// Whether a signal asked the window to end, and which.
    interrupted: fn() -> Option<&'static str>,
    /// Who sent it.
    sender: fn() -> Option<(u32, Option<String>)>,
    /// Say on stderr (`RIP_PROBE_TIMING`) when it starts, and show
    /// progress.
    announce: bool,
}

impl Window {
    /// A window of `length` (`None`: until interrupted or the target
    /// exits), looking at the target every `tick`.
    pub(crate) fn new(length: Option<Duration>, tick: Duration) -> Window {
        let start = Instant::now();
        Window {
            length,
            tick,
            clock: Box::new(move || start.elapsed()),
            interrupted,
            sender,
            announce: true,
        }
    }

    /// No progress line, no mark on stderr, no signal handler: a window of
    /// the library API.
    pub(crate) fn quiet(mut self) -> Window {
        self.announce = false;
        self
    }

    /// Whether it is a window of no length (a look, not a watch).
    pub(crate) fn is_zero(&self) -> bool {
        self.length == Some(Duration::ZERO)
    }

    /// Runs the window with `w`: ticks, waits, shows progress, and ends
    /// when its length has passed, the target is gone or a signal came.
    pub(crate) fn run(self, w: &mut dyn Watch) -> Result<Observed> {
        let mut progress = None;
        if self.announce {
            arm();
            timing::mark(
                "window start",
                &self.length.map_or("until interrupted".into(), |l| {
                    timefmt::duration(l.as_nanos() as u64)
                }),
            );
            progress = Progress::start(self.length);
        }
        let end = loop {
            let elapsed = (self.clock)();
            w.tick(elapsed)?;
            if let Some(lost) = w.gone() {
                break End::Gone(lost);
            }
            if let Some(sig) = (self.interrupted)() {
                break End::Interrupted(sig);
            }
            if self.length.is_some_and(|l| elapsed >= l) {
                break End::Elapsed;
            }
            if let Some(p) = progress.as_mut().filter(|p| p.due()) {
                p.show(&w.seen()?);
            }
            let mut next = elapsed + self.tick;
            if let Some(l) = self.length {
                next = next.min(l);
            }
            if let Some(d) = w.due().filter(|&d| d > elapsed) {
                next = next.min(d);
            }
            w.wait(next.saturating_sub(elapsed))?;
        };
        if let Some(p) = progress {
            p.finish();
        }
        let elapsed = (self.clock)();
        let sender = match end {
            End::Interrupted(_) => (self.sender)(),
            _ => None,
        };
        Ok(Observed {
            asked: self.length,
            elapsed: self.length.map_or(elapsed, |l| elapsed.min(l)),
            end,
            sender,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, rc::Rc};

    use super::*;

    /// A target on a fake clock: waiting advances the clock; it exits at
    /// `exits_at`, a signal comes at `signal_at`.
    struct Fake {
        now: Rc<Cell<Duration>>,
        exits_at: Option<Duration>,
        ticks: Vec<Duration>,
        waits: Vec<Duration>,
    }

    impl Watch for Fake {
        fn tick(&mut self, elapsed: Duration) -> Result<()> {
            self.ticks.push(elapsed);
            Ok(())
        }
        fn gone(&mut self) -> Option<Lost> {
            self.exits_at
                .filter(|&t| self.now.get() >= t)
                .map(|_| Lost::Exited)
        }
        fn wait(&mut self, max: Duration) -> Result<()> {
            self.waits.push(max);
            let mut to = self.now.get() + max;
            if let Some(t) = self.exits_at.filter(|&t| t > self.now.get()) {
                to = to.min(t);
            }
            self.now.set(to);
            Ok(())
        }
    }

    thread_local! {
        static SIGNAL_AT: Cell<Option<Duration>> = const { Cell::new(None) };
        static NOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    fn fake_interrupt() -> Option<&'static str> {
        SIGNAL_AT
            .get()
            .filter(|&t| NOW.get() >= t)
            .map(|_| "SIGINT")
    }

    fn fake_sender() -> Option<(u32, Option<String>)> {
        Some((4711, Some("kill".into())))
    }

    fn run(
        length: Option<Duration>,
        exits_at: Option<Duration>,
        signal_at: Option<Duration>,
    ) -> (Observed, Fake) {
        let now = Rc::new(Cell::new(Duration::ZERO));
        SIGNAL_AT.set(signal_at);
        NOW.set(Duration::ZERO);
        let clock = now.clone();
        let window = Window {
            length,
            tick: Duration::from_millis(100),
            clock: Box::new(move || {
                NOW.set(clock.get());
                clock.get()
            }),
            interrupted: fake_interrupt,
            sender: fake_sender,
            announce: false,
        };
        let mut fake = Fake {
            now,
            exits_at,
            ticks: Vec::new(),
            waits: Vec::new(),
        };
        let observed = window.run(&mut fake).unwrap();
        (observed, fake)
    }

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_window_runs_its_length_in_ticks() {
        let (o, f) = run(Some(ms(250)), None, None);
        assert_eq!(o.end, End::Elapsed);
        assert_eq!(o.elapsed, ms(250));
        assert_eq!(f.ticks, [ms(0), ms(100), ms(200), ms(250)]);
        // The last wait stops at the window's end, not a tick later.
        assert_eq!(f.waits, [ms(100), ms(100), ms(50)]);
        assert_eq!(o.interrupted_note(), None);
    }

    #[test]
    fn a_window_ends_when_the_target_exits() {
        let (o, _) = run(Some(ms(1000)), Some(ms(130)), None);
        assert_eq!(o.end, End::Gone(Lost::Exited));
        assert_eq!(o.lost(), Some(&Lost::Exited));
        assert_eq!(o.elapsed, ms(130));
    }

    #[test]
    fn a_signal_cuts_the_window_short_and_says_so() {
        let (o, _) = run(Some(ms(60_000)), None, Some(ms(300)));
        assert_eq!(o.end, End::Interrupted("SIGINT"));
        assert_eq!(o.elapsed, ms(300));
        let note = o.interrupted_note().unwrap();
        assert!(
            note.contains("cut short by SIGINT after 300ms of 1m00s"),
            "{note}"
        );
        // Who sent it, so that a signal meant for another process is told
        // from the user's.
        assert!(note.ends_with(" (sent by pid 4711, kill)"), "{note}");
    }

    #[test]
    fn without_a_length_the_window_runs_until_a_signal_or_the_exit() {
        let (o, f) = run(None, None, Some(ms(1_000)));
        assert_eq!(o.end, End::Interrupted("SIGINT"));
        assert_eq!(o.elapsed, ms(1_000));
        assert!(f.waits.iter().all(|&w| w == ms(100)));
        let note = o.interrupted_note().unwrap();
        assert!(note.starts_with("window ended by SIGINT after"), "{note}");
        let (o, _) = run(None, Some(ms(420)), None);
        assert_eq!((o.end, o.elapsed), (End::Gone(Lost::Exited), ms(420)));
    }

    #[test]
    fn a_window_of_zero_looks_once() {
        let (o, f) = run(Some(Duration::ZERO), None, None);
        assert_eq!((o.end, o.elapsed), (End::Elapsed, Duration::ZERO));
        assert_eq!(f.ticks, [Duration::ZERO]);
        assert!(f.waits.is_empty());
    }

    /// SIGINT's action now.
    fn sigint_action() -> libc::sighandler_t {
        // SAFETY: reads the current action only.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGINT, std::ptr::null(), &mut act);
            act.sa_sigaction
        }
    }

    /// The library API installs no handler: without the CLI's word, a
    /// window leaves SIGINT's action as it was (the default, or ignored
    /// when the tests run as a shell's background job).
    #[test]
    fn the_library_installs_no_handler() {
        let before = sigint_action();
        let window = Window::new(Some(Duration::ZERO), ms(10));
        let mut fake = Fake {
            now: Rc::new(Cell::new(Duration::ZERO)),
            exits_at: None,
            ticks: Vec::new(),
            waits: Vec::new(),
        };
        window.run(&mut fake).unwrap();
        assert_eq!(sigint_action(), before);
        assert_ne!(
            before,
            crate::util::interrupt::on_signal as *const () as libc::sighandler_t
        );
    }
}
