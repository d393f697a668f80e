//! A symbolizer on a thread of its own, behind the [`Resolve`] trait the
//! symbolize stage uses, so that a session can have it load symbols while
//! it observes.

use std::{collections::HashMap, path::PathBuf};

use super::{ModuleMap, Symbolizer, UserSpace};
use crate::model::Frame;

/// Something that turns addresses into frames: a [`Symbolizer`], or a
/// [`SymbolizerThread`] working on another thread.
pub(crate) trait Resolve {
    /// See [`Symbolizer::user`].
    fn user(&mut self, space: &UserSpace<'_>, addrs: &[u64]) -> HashMap<u64, Frame>;
    /// See [`Symbolizer::kernel`].
    fn kernel(&mut self, addrs: &[u64]) -> HashMap<u64, Frame>;
    /// Warnings gathered so far.
    fn take_warnings(&mut self) -> Vec<String>;
}

impl Resolve for Symbolizer {
    fn user(&mut self, space: &UserSpace<'_>, addrs: &[u64]) -> HashMap<u64, Frame> {
        Symbolizer::user(self, space, addrs)
    }
    fn kernel(&mut self, addrs: &[u64]) -> HashMap<u64, Frame> {
        Symbolizer::kernel(self, addrs)
    }
    fn take_warnings(&mut self) -> Vec<String> {
        Symbolizer::take_warnings(self)
    }
}

/// A [`Symbolizer`] living on its own thread (blazesym's symbolizer cannot
/// move between threads), so that a session can have it load kallsyms and
/// the target's debug information while it observes. A clone sends to
/// the same thread: `serve` keeps one for all its targets, each session
/// using it in turn.
#[derive(Clone)]
pub(crate) struct SymbolizerThread {
    jobs: std::sync::mpsc::Sender<Job>,
}

enum Job {
    /// Load what symbolizing the listed binaries will need (at background
    /// priority: the observed process comes first).
    WarmUp(Box<dyn FnOnce() -> Vec<PathBuf> + Send>),
    User(
        UserSpaceOwned,
        Vec<u64>,
        std::sync::mpsc::Sender<HashMap<u64, Frame>>,
    ),
    Kernel(Vec<u64>, std::sync::mpsc::Sender<HashMap<u64, Frame>>),
    Warnings(std::sync::mpsc::Sender<Vec<String>>),
    /// The processes still watched, sorted: what only others used is
    /// dropped ([`Symbolizer::retain_targets`]).
    Retain(Vec<u32>),
}

enum UserSpaceOwned {
    Live(u32),
    Modules(Option<u32>, Vec<ModuleMap>),
}

impl SymbolizerThread {
    /// Starts the thread; it waits for work at normal priority.
    pub(crate) fn start() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        crate::util::background::spawn("rip-symbolize", move || {
            let mut s = Symbolizer::new();
            crate::util::background::normal_priority();
            for job in rx {
                // A send fails only if the requester gave up; nothing to do.
                let _ = match job {
                    Job::WarmUp(binaries) => {
                        crate::util::background::lower_priority();
                        let binaries = binaries();
                        crate::util::timing::phase("  warm up symbolizer (background)", || {
                            s.warm_up(&binaries)
                        });
                        crate::util::background::normal_priority();
                        Ok(())
                    }
                    Job::User(UserSpaceOwned::Live(pid), addrs, reply) => {
                        reply.send(s.user(&UserSpace::Live(pid), &addrs))
                    }
                    Job::User(UserSpaceOwned::Modules(None, m), addrs, reply) => {
                        reply.send(s.user(&UserSpace::Modules(&m), &addrs))
                    }
                    Job::User(UserSpaceOwned::Modules(Some(pid), m), addrs, reply) => {
                        reply.send(s.user(&UserSpace::LiveWithModules(pid, &m), &addrs))
                    }
                    Job::Kernel(addrs, reply) => reply.send(s.kernel(&addrs)),
                    Job::Retain(live) => {
                        s.retain_targets(|p| live.binary_search(&p).is_ok());
                        Ok(())
                    }
                    Job::Warnings(reply) => reply
                        .send(s.take_warnings())
                        .map_err(|_| std::sync::mpsc::SendError(HashMap::new())),
                };
            }
        });
        SymbolizerThread { jobs: tx }
    }

    /// Has the thread load, while the caller waits on something else,
    /// what symbolizing the binaries `binaries` lists will need (listed on
    /// that thread; see [`Symbolizer::warm_up`]). Jobs sent after it wait
    /// for it.
    pub(crate) fn warm_up(&self, binaries: impl FnOnce() -> Vec<PathBuf> + Send + 'static) {
        // A closed channel means the thread is gone; asks then get nothing.
        let _ = self.jobs.send(Job::WarmUp(Box::new(binaries)));
    }

    /// Has the thread drop what it cached for binaries that none of the
    /// processes `live` (sorted) used.
    pub(crate) fn retain_targets(&self, live: Vec<u32>) {
        // A closed channel means the thread is gone, and its caches too.
        let _ = self.jobs.send(Job::Retain(live));
    }

    fn ask<T: Default>(&self, job: impl FnOnce(std::sync::mpsc::Sender<T>) -> Job) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.jobs.send(job(tx)).is_err() {
            return T::default();
        }
        rx.recv().unwrap_or_default()
    }
}

impl Resolve for SymbolizerThread {
    fn user(&mut self, space: &UserSpace<'_>, addrs: &[u64]) -> HashMap<u64, Frame> {
        let space = match space {
            UserSpace::Live(pid) => UserSpaceOwned::Live(*pid),
            UserSpace::Modules(m) => UserSpaceOwned::Modules(None, m.to_vec()),
            UserSpace::LiveWithModules(pid, m) => UserSpaceOwned::Modules(Some(*pid), m.to_vec()),
        };
        let addrs = addrs.to_vec();
        self.ask(|tx| Job::User(space, addrs, tx))
    }
    fn kernel(&mut self, addrs: &[u64]) -> HashMap<u64, Frame> {
        let addrs = addrs.to_vec();
        self.ask(|tx| Job::Kernel(addrs, tx))
    }
    fn take_warnings(&mut self) -> Vec<String> {
        self.ask(Job::Warnings)
    }
}
