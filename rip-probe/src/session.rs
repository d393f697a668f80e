//! The session: attach to a process, observe it for a while (observers see
//! each context switch of its threads as it happens), and take a snapshot
//! of every thread's joined state as a [`Report`].
//!
//! This is the library API the CLI is built on; other tools can drive it
//! the same way:
//!
//! ```no_run
//! use rip_probe::session::{Session, SessionOptions};
//! let mut s = Session::attach(&SessionOptions::new(4711))?;
//! s.observe(std::time::Duration::from_secs(1), &mut ())?;
//! let report = s.snapshot()?;
//! println!("{} threads", report.threads.len());
//! # Ok::<(), rip_probe::Error>(())
//! ```

use std::{collections::HashMap, path::PathBuf, time::Duration};

use librip::reader::ReadError;
use rip_ebpf::SwitchEvent;

use crate::{
    analyze,
    collect::{
        self,
        kernel::{EventStream, KernelProbe, uprobe},
        namespaces,
        procfs::{self, ProcLookup},
        ring::RingView,
        stacks::threads as stacks,
    },
    correlate::{self, AfterExit, Clock, LiveInputs},
    discover::{Kind, Lacks, Lost, Target, maps::ProcessMaps},
    error::{Error, Result},
    model::{ProcessInfo, Report, events::Event},
    symbolize::{self, Resolve, SymbolizerThread, UserSpace},
    util::timing,
    window::{Observed, Watch, Window},
};

/// What to attach to and how.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The process.
    pub pid: u32,
    /// `--uprobe PATTERN`: functions whose entry marks each thread's
    /// location.
    pub uprobe: Option<String>,
    /// Use this ring file instead of looking for the process's own.
    pub ring: Option<PathBuf>,
    /// Do not read any ring.
    pub no_ring: bool,
    /// Send each context switch of the target to the [`Observer`]. Off by
    /// default: a report needs only the per-thread table, and streaming
    /// every switch costs the target more.
    pub events: bool,
    /// Take every thread's user stack (on by default; `--no-stacks`).
    pub stacks: bool,
    /// Load kallsyms and the target's debug information while observing,
    /// so the report does not wait for them (on by default). A run over
    /// many targets turns it off: each session's symbols are then loaded
    /// for its report and freed with the session, instead of every
    /// target's held at once.
    pub warm_up: bool,
    /// Record every context switch of the target between attach and
    /// snapshot (sched_switch), which makes blocked times exact (on by
    /// default). Off, with no uprobe and no events: the session loads only
    /// the task iterator, so attaching and taking snapshots cost the
    /// target nothing, and blocked times are lower bounds from each
    /// thread's own clocks. A session that reports every interval takes
    /// its [`Session::snapshot`]s this way, the iterator loaded once.
    pub switches: bool,
}

impl SessionOptions {
    /// Defaults for process `pid`: its own ring if it has one, no uprobes.
    pub fn new(pid: u32) -> Self {
        SessionOptions {
            pid,
            uprobe: None,
            ring: None,
            no_ring: false,
            events: false,
            stacks: true,
            warm_up: true,
            switches: true,
        }
    }

    /// Whether a session with these options attaches nothing that runs
    /// while the target does (no sched_switch, no uprobe, no events): it
    /// loads the task iterator alone, and its reports are snapshots with
    /// no window.
    pub(crate) fn snapshots_only(&self) -> bool {
        !self.switches && !self.events && self.uprobe.is_none()
    }
}

/// Receives what a session sees while it observes.
pub trait Observer {
    /// A thread of the target left or got a CPU (only with
    /// [`SessionOptions::events`]), by rip-probe's thread ids (inside a
    /// pid namespace, the namespace's).
    fn on_switch(&mut self, _event: &SwitchEvent) {}
    /// The target exited (or its pid was reused).
    fn on_lost(&mut self, _lost: &Lost) {}
    /// Each event of the session as `rip-probe --events` writes it: the
    /// attach ([`Session::attach_with`]), each thread's state change
    /// (with [`SessionOptions::events`]), each snapshot
    /// ([`Session::snapshot_with`]), the target's exit, the detach
    /// ([`Session::detach`]).
    fn on_event(&mut self, _event: &Event<'_>) {}
}

/// The do-nothing observer.
impl Observer for () {}

/// The report's description of `target`, gone as `lost` says (or alive):
/// what every command's report starts with.
pub(crate) fn process_info(target: &Target, lost: Option<&Lost>) -> ProcessInfo {
    let pid = target.pid();
    ProcessInfo {
        pid,
        exe: target.exe().map(str::to_string),
        comm: Some(target.comm().to_string()),
        alive: lost.is_none(),
        lost: lost.map(|l| l.describe(pid)),
        ns_pid: namespaces::ns_pid(pid),
        title: lost.is_none().then(|| procfs::title(pid)).flatten(),
    }
}

/// An attached session. Dropping it detaches everything.
pub struct Session {
    target: Target,
    probe: KernelProbe,
    events: EventStream,
    attached_ns: u64,
    lost: Option<Lost>,
    opts: SessionOptions,
    probes: usize,
    /// A symbolizer loading kallsyms and the target's debug information on
    /// another thread while the session observes.
    symbolizer: SymbolizerThread,
    /// The symbolizer was asked to warm up.
    warming: bool,
    /// Detach sched_switch once the next snapshot has read the kernel.
    stop_after_snapshot: bool,
    /// User stacks, when asked for.
    stacks: Option<stacks::Collector>,
    /// State changes handed to observers.
    state_changes: u64,
}

pub(crate) use crate::util::monotonic_ns;

impl Session {
    /// Opens the target, loads and attaches the programs (and uprobes).
    pub fn attach(opts: &SessionOptions) -> Result<Self> {
        Self::attach_naming_with(opts, SymbolizerThread::start())
    }

    /// [`Session::attach`], naming addresses with `symbolizer` (one kept
    /// across sessions keeps what it parsed of the binaries).
    pub(crate) fn attach_naming_with(
        opts: &SessionOptions,
        symbolizer: SymbolizerThread,
    ) -> Result<Self> {
        let target = Target::open(opts.pid)?;
        // Reports name kernel frames: kallsyms loads beside the attach.
        symbolize::prime_kernel();
        let sites = match &opts.uprobe {
            Some(spec) => {
                target.require_user_space(Lacks::UprobeFunctions)?;
                uprobe::resolve_with(
                    target.view_pid(),
                    spec,
                    Some(&symbolize::go_table::go_functions),
                )?
            }
            None => Vec::new(),
        };
        let mut probe = timing::phase("load and attach", || {
            if opts.snapshots_only() {
                KernelProbe::snapshots_only(opts.pid)
            } else {
                KernelProbe::attach(opts.pid, opts.events)
            }
        })?;
        if !sites.is_empty() {
            timing::phase("attach uprobes", || probe.attach_uprobes(&sites))?;
        }
        let events = probe.take_events()?;
        Ok(Session {
            probe,
            events,
            attached_ns: monotonic_ns(),
            lost: None,
            opts: opts.clone(),
            probes: sites.len(),
            symbolizer,
            warming: false,
            stop_after_snapshot: false,
            stacks: (opts.stacks && target.kind() != Kind::KernelThread)
                .then(|| stacks::Collector::new(target.view_pid())),
            target,
            state_changes: 0,
        })
    }

    /// [`Self::attach`], telling `obs` ([`Event::Attach`]).
    pub fn attach_with(opts: &SessionOptions, obs: &mut dyn Observer) -> Result<Self> {
        let mut s = Self::attach(opts)?;
        let process = s.process_info();
        obs.on_event(&Event::Attach {
            ts_ns: s.attached_ns,
            process,
            programs: s.program_names(),
        });
        Ok(s)
    }

    /// [`Self::snapshot`], telling `obs` ([`Event::Snapshot`], the report).
    pub fn snapshot_with(&mut self, obs: &mut dyn Observer) -> Result<Report> {
        let report = self.snapshot()?;
        self.tell_snapshot(&report, obs);
        Ok(report)
    }

    /// Tells `obs` of a snapshot taken, whose report is `report`.
    pub(crate) fn tell_snapshot(&mut self, report: &Report, obs: &mut dyn Observer) {
        obs.on_event(&Event::Snapshot {
            ts_ns: monotonic_ns(),
            report,
        });
    }

    /// Detaches: the state changes still buffered are handed to `obs`,
    /// then the programs are removed, then `obs` is told
    /// ([`Event::Detach`], with how many state changes the kernel could
    /// not deliver: see [`Session::lost_events`]).
    pub fn detach(mut self, obs: &mut dyn Observer) -> Result<()> {
        if self.opts.events {
            let events = self.events.poll(Duration::ZERO)?;
            self.hand_over(events, obs);
        }
        let (state_changes, lost_events) = (self.state_changes, self.lost_events()?);
        drop(self);
        obs.on_event(&Event::Detach {
            ts_ns: monotonic_ns(),
            state_changes,
            lost_events,
        });
        Ok(())
    }

    /// Switch events the kernel could not deliver (the buffer was full),
    /// as it counted them where it dropped them: switches onto a CPU as
    /// well as off.
    pub fn lost_events(&self) -> Result<u64> {
        Ok(self.probe.events_lost()?)
    }

    /// Hands switch events to `obs`, counted.
    fn hand_over(&mut self, events: Vec<SwitchEvent>, obs: &mut dyn Observer) {
        for ev in events {
            self.state_changes += 1;
            obs.on_switch(&ev);
            obs.on_event(&Event::State(correlate::state_change(&ev)));
        }
    }

    /// The target process.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Number of uprobes attached.
    pub fn uprobes(&self) -> usize {
        self.probes
    }

    /// Names of the BPF programs loaded for this session.
    pub fn program_names(&self) -> Vec<String> {
        self.probe.program_names()
    }

    /// Watches for `window`, handing each context switch to `obs`. Returns
    /// early if the target exits.
    pub fn observe(&mut self, window: Duration, obs: &mut dyn Observer) -> Result<()> {
        self.observe_in(Window::new(Some(window), STEP).quiet(), obs)
            .map(drop)
    }

    /// [`Self::observe`] for the CLI: over `length` (`None`: until
    /// interrupted), with progress, ended by Ctrl-C when the CLI catches
    /// it; says how the window ended.
    pub(crate) fn observe_for(
        &mut self,
        length: Option<Duration>,
        obs: &mut dyn Observer,
    ) -> Result<Observed> {
        self.observe_in(Window::new(length, STEP), obs)
    }

    fn observe_in(&mut self, window: Window, obs: &mut dyn Observer) -> Result<Observed> {
        self.begin(!window.is_zero());
        let observed = window.run(&mut Watching { s: self, obs })?;
        if let Some(lost) = observed.lost() {
            obs.on_lost(lost);
            obs.on_event(&Event::Lost {
                ts_ns: monotonic_ns(),
                lost: lost.describe(self.target.pid()),
            });
            self.lost = Some(lost.clone());
        }
        Ok(observed)
    }

    /// Starts what runs beside a window: the symbolizer's warm-up and the
    /// sampling of running threads' stacks (not for an empty window).
    fn begin(&mut self, nonempty: bool) {
        // The symbolizer loads kallsyms and the binaries' debug information
        // while the session waits. Without a window there is nothing to
        // hide that work in: the report then loads only what it needs.
        if nonempty && !self.warming && self.opts.warm_up {
            self.warming = true;
            let pid = self.target.view_pid();
            // Listing the binaries walks /proc/PID/maps: on that thread too.
            self.symbolizer.warm_up(move || procfs::code_files(pid));
        }
        if let Some(c) = self.stacks.as_mut().filter(|_| nonempty) {
            c.start_sampling();
        }
    }

    /// One step of a window that observes many sessions in turn (a
    /// cgroup's): this session's due work, then at most `max` of waiting.
    /// Returns whether its target is gone.
    pub(crate) fn step(&mut self, max: Duration) -> Result<bool> {
        if self.lost.is_some() {
            return Ok(true);
        }
        self.begin(true);
        let mut w = Watching {
            s: self,
            obs: &mut (),
        };
        w.tick(Duration::ZERO)?;
        if let Some(lost) = w.gone() {
            self.lost = Some(lost);
            return Ok(true);
        }
        w.wait(max)?;
        Ok(false)
    }

    /// Stops observing context switches once the next [`Self::snapshot`]
    /// has read the kernel's side. Call it before the final snapshot when
    /// no more observation follows: the detach costs the kernel an RCU
    /// grace period, which then overlaps with building the report. (The
    /// switch records must still be kept while the task iterator reads
    /// them: a thread that woke and slept again after a detach would look
    /// blocked since its last recorded switch.)
    pub fn stop_observing(&mut self) -> Result<()> {
        self.stop_after_snapshot = true;
        Ok(())
    }

    /// Whether the target is gone, and how.
    pub fn lost(&mut self) -> Option<&Lost> {
        if self.lost.is_none() {
            self.lost = self.target.lost();
        }
        self.lost.as_ref()
    }

    /// The ring the options name, or the process's own (found in `maps`).
    fn ring(
        opts: &SessionOptions,
        pid: u32,
        maps: Option<&ProcessMaps>,
    ) -> Result<Option<RingView>> {
        if opts.no_ring {
            return Ok(None);
        }
        if let Some(p) = &opts.ring {
            return Ok(Some(RingView::open(p)?));
        }
        // The first ring the process maps that it wrote (a forked child may
        // still map its parent's ring), read through the process's own view
        // of files, with its thread ids made ours.
        let Some(maps) = maps else {
            return Ok(None);
        };
        match RingView::of_process_in(pid, maps).map_err(Error::from) {
            Ok(r) if r.written_by(pid) => Ok(Some(r)),
            Ok(_) => Ok(None),
            // No ring is normal for --pid: kernel state and the user pc
            // still tell a lot. So is a process that just exited.
            Err(Error::Ring(ReadError::NoRing(_) | ReadError::NoSuchProcess(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn process_info(&mut self) -> ProcessInfo {
        let lost = self.lost().cloned();
        process_info(&self.target, lost.as_ref())
    }

    /// Every thread's joined state now: kernel view (task iterator and
    /// sched_switch), ring or uprobe location, symbolized and grouped.
    pub fn snapshot(&mut self) -> Result<Report> {
        let mut report = self.snapshot_ungrouped()?;
        analyze::groups(&mut report);
        Ok(report)
    }

    /// [`Self::snapshot`] without the groups: for commands that filter
    /// threads first and then group once.
    pub(crate) fn snapshot_ungrouped(&mut self) -> Result<Report> {
        // The ring is a file: it is read on another thread while the kernel
        // is asked for its side (on 100,000 threads, each takes a third of
        // a second).
        let (opts, pid, view) = (&self.opts, self.target.pid(), self.target.view_pid());
        let kind = self.target.kind();
        // One view of the process's map for the stages that need it (the
        // ring finder, lock names): its file mappings are listed once.
        let (maps, unreadable) = match ProcessMaps::open(view) {
            Ok(m) => (Some(m), None),
            Err(e) if kind != Kind::KernelThread && self.target.lost().is_none() => {
                let path = format!("/proc/{view}/maps");
                let e = crate::discover::unreadable(pid, &path, e, Lacks::Maps);
                (None, Some(e.into()))
            }
            Err(_) => (None, None),
        };
        let (ring, kernel) = std::thread::scope(|s| {
            let ring =
                s.spawn(|| timing::phase("read ring", || Self::ring(opts, pid, maps.as_ref())));
            let alive = self.target.lost().is_none();
            let kernel = self
                .probe
                .snapshot(alive)
                .map(|k| (k.switches, k.uprobe_hits, k.tasks));
            (ring.join().expect("the ring reader does not panic"), kernel)
        });
        if self.stop_after_snapshot {
            self.probe.detach_switches()?;
        }
        let (ring, (switches, hits, tasks)) = (ring?, kernel?);
        let user_stacks = self.collect_stacks(&tasks);
        // Goroutines are read right after the kernel snapshot, their
        // threads' states being the snapshot's.
        let go = (self.target.lost().is_none() && kind != Kind::KernelThread)
            .then(|| {
                timing::phase("read goroutines", || {
                    let exe = PathBuf::from(format!("/proc/{view}/exe"));
                    // The function table (stripped binaries keep it):
                    // roots a symbol table no longer names, frame sizes.
                    let table = symbolize::gopclntab::GoBinary::open(&exe).ok().flatten();
                    let table = table
                        .as_ref()
                        .map(|t| t as &dyn collect::runtime::go::FuncTable);
                    collect::runtime::go::collect(pid, view, maps.as_ref(), table)
                })
            })
            .flatten();
        // Python frames are read while the native stacks are unwound, at
        // the same moment of the blocked threads.
        let python = match (&maps, self.target.lost()) {
            (Some(m), None) => timing::phase("read python", || {
                read_python(pid, view, m, &futex_waits(&tasks))
            }),
            _ => None,
        };
        let locks = self.collect_locks(&tasks);
        // Checked again after the snapshot: if the pid was reused while the
        // iterator ran, its records may describe a stranger.
        let lost_now = self.lost().is_some();
        let mut report = if lost_now {
            // Kernel stacks by id, read once each (taken only with events).
            let mut stacks = HashMap::new();
            for r in switches.values().filter(|r| r.switches > 0) {
                if let std::collections::hash_map::Entry::Vacant(e) = stacks.entry(r.kstack_id) {
                    e.insert(self.probe.kernel_stack(r.kstack_id).unwrap_or_default());
                }
            }
            correlate::after_exit(&AfterExit {
                process: self.process_info(),
                switches: &switches,
                stacks: &stacks,
                ring: ring.as_ref(),
                window_ns: monotonic_ns().saturating_sub(self.attached_ns),
            })
        } else {
            let lookup = ProcLookup::new(self.target.pid());
            let now_ns = tasks.first().map_or_else(monotonic_ns, |t| t.now_ns);
            let inputs = LiveInputs {
                process: self.process_info(),
                tasks: &tasks,
                clock: Clock {
                    attached_ns: self.attached_ns,
                    now_ns,
                    switches: self.probe.watches_switches(),
                },
                ring: ring.as_ref(),
                go: go.as_ref().and_then(|g| g.as_ref().ok()),
                python: python.as_ref().and_then(|p| p.as_ref().ok()),
                uprobe_hits: &hits,
                lookup: &lookup,
            };
            timing::phase("correlate", || correlate::live(&inputs))
        };
        if let Ok(Some(slots)) = self.probe.slot_stats() {
            report
                .warnings
                .extend(collect::kernel::switch::slot_warnings(&slots));
        }
        match &go {
            Some(Err(why)) => report.warnings.push(why.clone()),
            Some(Ok(g)) if g.unreadable > 0 => report.warnings.push(format!(
                "{} goroutines of this {} program could not be read (freed while read)",
                g.unreadable, g.version
            )),
            _ => {}
        }
        let space = match (&ring, lost_now) {
            (Some(r), true) => UserSpace::Modules(&r.modules),
            (Some(r), false) => UserSpace::LiveWithModules(view, &r.modules),
            (None, _) => UserSpace::Live(view),
        };
        timing::phase("symbolize", || {
            symbolize::fill(&mut report, &space, &mut self.symbolizer)
        });
        let stacks = user_stacks.and_then(|p| self.symbolize_stacks(&mut report, p, &space));
        if !lost_now {
            name_semaphores(&mut report, view, maps.as_ref());
        }
        let lock_names = match &locks {
            Some(l) if !lost_now => lock_names(&l.first, view, maps.as_ref()),
            _ => HashMap::new(),
        };
        if let Some((user, frames)) = &stacks {
            analyze::stacks::attach(&mut report, user, frames);
            analyze::cgo::join_c_frames(&mut report);
        }
        match &python {
            Some(Ok(snap)) if !lost_now => analyze::python::merge(&mut report, snap),
            Some(Err(why)) => report.warnings.push(why.clone()),
            _ => {}
        }
        let py_snap = python.as_ref().and_then(|p| p.as_ref().ok());
        match (&locks, lost_now) {
            (Some(l), false) => timing::phase("locks", || {
                lock_waits(&mut report, l, &lock_names, py_snap);
            }),
            (None, false) => {
                if let Some(snap) = py_snap {
                    analyze::python::locks(&mut report, snap);
                }
            }
            _ => {}
        }
        self.tell_what_is_missing(&mut report, unreadable, &hits);
        Ok(report)
    }
}

/// One snapshot of process `opts.pid` now, without a window: load the
/// task iterator, read every thread's state, unload (when the returned
/// report is made, nothing of it is left in the kernel). Unless `opts`
/// asks for uprobes or events, nothing is attached that runs while the
/// target does, whatever `opts.switches` says (a switch recorded between
/// attach and snapshot would tell nothing a snapshot needs): taking it
/// costs the target nothing. What
/// `rip-probe serve` takes of each target every interval; `--duration 0`
/// takes the same.
pub fn snapshot_now(opts: &SessionOptions) -> Result<Report> {
    snapshot_naming_with(opts, SymbolizerThread::start())
}

/// [`snapshot_now`], naming addresses with `symbolizer`: `serve` keeps
/// one across its passes, so that a binary's debug information is parsed
/// once, not at every snapshot of every process that maps it.
pub(crate) fn snapshot_naming_with(
    opts: &SessionOptions,
    symbolizer: SymbolizerThread,
) -> Result<Report> {
    let opts = SessionOptions {
        switches: false,
        ..opts.clone()
    };
    let mut s = Session::attach_naming_with(&opts, symbolizer)?;
    s.observe(Duration::ZERO, &mut ())?;
    s.stop_observing()?;
    s.snapshot()
}

/// The CPython interpreter of process `pid` (its files seen through
/// `/proc/VIEW`), read with the locks of the threads of `futex` (tid →
/// the futex it sleeps on) (`Err`: one was found but is not read, and
/// why); `None` when it runs none.
fn read_python(
    pid: u32,
    view: u32,
    maps: &ProcessMaps,
    futex: &HashMap<u64, u64>,
) -> Option<std::result::Result<crate::collect::runtime::python::Snapshot, String>> {
    use crate::collect::{memory::ProcessMemory, namespaces::TidMap, runtime::python::Python};
    Some(Python::detect(view, maps)?.map(|p| {
        let mem = ProcessMemory::new(pid);
        // A process in a pid namespace of its own records its threads'
        // ids as that namespace numbers them: the kernel's waits are
        // looked up by those, and what is read is renamed to ours.
        let ids = TidMap::of(view);
        let mut snap = match &ids {
            Some(ids) => {
                let ns = ids.to_ns();
                let theirs: HashMap<u64, u64> = futex
                    .iter()
                    .filter_map(|(&t, &f)| Some((*ns.get(&u32::try_from(t).ok()?)?, f)))
                    .collect();
                let mut snap = p.read(&mem, &theirs);
                snap.map_tids(|t| ids.host(t).map(u64::from));
                snap
            }
            None => p.read(&mem, futex),
        };
        // The waits a cycle could run through, looked at again as the
        // futex evidence's are.
        p.look_again(&mem, &mut snap, futex, SECOND_LOOK, &mut |tids| {
            collect::locks::proc_waits_now(view, tids)
        });
        snap
    }))
}

/// The futex each blocked thread of `tasks` sleeps on, by tid (a
/// `futex` wait's address: its first argument).
fn futex_waits(tasks: &[rip_ebpf::TaskRecord]) -> HashMap<u64, u64> {
    tasks
        .iter()
        .filter(|t| correlate::thread_state(t.state, t.on_cpu).is_blocked())
        .filter(|t| t.regs.syscall_nr == collect::locks::SYS_FUTEX)
        .map(|t| (u64::from(t.tid), t.regs.args[0]))
        .collect()
}

/// How often a session's window drains its programs and looks at the
/// target.
const STEP: Duration = Duration::from_millis(50);

/// The session's window, in a module of its own: the trait it implements
/// is the crate's, not part of the public API.
mod watching {
    use std::time::Duration;

    use super::{Lost, Observer, Result, Session, Watch};

    /// A session's window: the user stacks sampled drained, the context
    /// switches handed to the observer, the kernel programs kept fed.
    pub(super) struct Watching<'a> {
        pub(super) s: &'a mut Session,
        pub(super) obs: &'a mut dyn Observer,
    }

    impl Watch for Watching<'_> {
        fn tick(&mut self, _elapsed: Duration) -> Result<()> {
            if let Some(c) = &mut self.s.stacks {
                c.drain();
            }
            Ok(())
        }

        fn gone(&mut self) -> Option<Lost> {
            self.s.target.lost()
        }

        fn wait(&mut self, max: Duration) -> Result<()> {
            let s = &mut *self.s;
            if s.opts.events {
                let mut events = s.events.poll(max)?;
                if s.events.waiting_for_ids() {
                    // Inside a pid namespace, a thread created since the
                    // last pass: one more learns its id there.
                    s.probe.tasks()?;
                    events.extend(s.events.release_held());
                }
                s.hand_over(events, self.obs);
            } else {
                s.target.wait_exit(max);
            }
            Ok(s.probe.prepare()?)
        }
    }
}
use watching::Watching;

/// How long after the first look a cycle of waits is looked at again:
/// long enough for a hot lock to change hands (its holders keep it
/// microseconds to a few milliseconds), short beside a real deadlock.
const SECOND_LOOK: std::time::Duration = std::time::Duration::from_millis(5);

/// From this many threads to look at on, the waits between a lock's two
/// reads come from one pass of the lean task iterator instead of each
/// thread's /proc file: at 100,000 waiters the files cost about 950 ms,
/// the pass about 100 ms of CPU; below a thousand the files cost
/// milliseconds and the pass would load one more program.
const WAITS_BY_ITERATOR_AT: usize = 1_000;

/// The lock evidence of one snapshot: the futex waits read (each lock,
/// the threads' waits, each lock again), then, for the waits a cycle can
/// be made of, the same read [`SECOND_LOOK`] later.
struct LockSnapshot {
    first: collect::locks::LockEvidence,
    second: Option<collect::locks::LockEvidence>,
}

impl Session {
    /// Reads the lock evidence for the futex waiters of the kernel
    /// snapshot `tasks`, right after it.
    fn collect_locks(&mut self, tasks: &[rip_ebpf::TaskRecord]) -> Option<LockSnapshot> {
        if self.target.lost().is_some() || self.target.kind() == Kind::KernelThread {
            return None;
        }
        let pid = self.target.view_pid();
        let waits: Vec<(u32, collect::locks::WaitKey)> = tasks
            .iter()
            .filter(|t| correlate::thread_state(t.state, t.on_cpu).is_blocked())
            .filter_map(|t| {
                Some((
                    t.tid,
                    collect::locks::wait_key(t.regs.syscall_nr, &t.regs.args)?,
                ))
            })
            .collect();
        if waits.is_empty() {
            return None;
        }
        let probe = &mut self.probe;
        let mut now_of = |tids: &[u32]| {
            if tids.len() >= WAITS_BY_ITERATOR_AT
                && let Ok(now) = probe.waits()
            {
                let now = now.iter().map(|t| {
                    let blocked = correlate::thread_state(t.state, t.on_cpu).is_blocked();
                    (t.tid, blocked, t.syscall_nr, t.arg0)
                });
                return collect::locks::waits_in_tasks(now, tids);
            }
            collect::locks::proc_waits_now(pid, tids)
        };
        timing::phase("read locks", || {
            let first = collect::locks::evidence(pid, &waits, &mut now_of);
            let again = collect::locks::chained(&first, &waits);
            let second = (!again.is_empty()).then(|| {
                std::thread::sleep(SECOND_LOOK);
                collect::locks::evidence(pid, &again, &mut now_of)
            });
            Some(LockSnapshot { first, second })
        })
    }
}

/// Names for the locks the evidence `ev` read in process `pid` (whose map
/// is `maps`), by address.
fn lock_names(
    ev: &collect::locks::LockEvidence,
    pid: u32,
    maps: Option<&ProcessMaps>,
) -> HashMap<u64, Option<String>> {
    let mut data = symbolize::data::DataNames::new(pid, maps);
    ev.locks
        .values()
        .flatten()
        .flat_map(|r| [r.first.addr, r.first.futex])
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .map(|a| (a, data.name(a)))
        .collect()
}

/// Names the semaphores goroutines wait on that are in a global variable
/// (`main.mu`, `pkg.wg+0x8`), as locks are named.
fn name_semaphores(report: &mut Report, pid: u32, maps: Option<&ProcessMaps>) {
    let mut data = None;
    for w in report
        .tasks
        .iter_mut()
        .filter_map(|t| t.go.as_mut()?.waits_on.as_mut())
        .filter(|w| w.kind == crate::model::GoWaitKind::Semaphore)
    {
        let data = data.get_or_insert_with(|| symbolize::data::DataNames::new(pid, maps));
        w.name = w.addrs.first().and_then(|&a| data.name(a));
    }
}

/// The lock stage of analyze: who waits for whom from the evidence, then
/// (with the CPython interpreter's read, `python`) who holds the
/// `threading` locks: a waiter's `threading` object replaces the futex
/// word its wait was judged by, and an `RLock`'s owner is an edge of the
/// wait graph. A cycle is a deadlock only if the second look found it
/// again.
fn lock_waits(
    report: &mut Report,
    locks: &LockSnapshot,
    names: &HashMap<u64, Option<String>>,
    python: Option<&crate::collect::runtime::python::Snapshot>,
) {
    let mut cycles = analyze::waits::fill(report, &locks.first, names);
    let mut runtime = std::collections::BTreeMap::new();
    if let Some(snap) = python {
        analyze::python::locks(report, snap);
        cycles = analyze::waits::cycles(report);
        runtime = analyze::python::again(report, snap);
    }
    if !cycles.is_empty() {
        let none = collect::locks::LockEvidence::default();
        analyze::waits::confirm(
            report,
            &cycles,
            locks.second.as_ref().unwrap_or(&none),
            &runtime,
        );
    }
}

/// What a report cannot show, said in it rather than left out.
impl Session {
    fn tell_what_is_missing(
        &self,
        report: &mut Report,
        maps: Option<Error>,
        hits: &HashMap<u32, rip_ebpf::FnHit>,
    ) {
        let mut notes = Vec::new();
        notes.extend(self.target.kind_note());
        if self.target.kind() == Kind::KernelThread {
            // Its registers are the kernel's: any "system call" or user pc
            // read from them would be invented.
            for t in &mut report.threads {
                t.syscall = None;
                t.location = None;
            }
        }
        if let Some(e) = maps {
            notes.push(format!(
                "partial report: {}: the threads' kernel state is shown, but no ring, \
                 symbols, user stacks or lock names",
                e.one_line()
            ));
        }
        // A thread's ring slot wins over its last uprobe hit as its
        // location: say how many hits that hides.
        let hidden = report
            .threads
            .iter()
            .filter(|t| {
                t.location
                    .as_ref()
                    .is_some_and(|l| matches!(l.source, crate::model::LocationSource::Ring))
                    && u32::try_from(t.tid).is_ok_and(|tid| hits.contains_key(&tid))
            })
            .count();
        if hidden > 0 {
            notes.push(format!(
                "--uprobe: the last function entered is not shown for {hidden} thread{} with a \
                 ring slot: the slot's last snap is the location (add --no-ring to see the \
                 uprobe hits)",
                if hidden == 1 { "" } else { "s" }
            ));
        }
        if report.threads.is_empty() && self.lost.is_none() {
            let listed = crate::collect::procfs::tids(self.target.pid()).map_or(0, |t| t.len());
            if listed > 0 {
                notes.push(format!(
                    "incomplete report: the kernel's task iterator returned no thread of pid {} \
                     although /proc lists {listed}",
                    self.target.pid()
                ));
            }
        }
        // First: they qualify everything below them.
        report.warnings.splice(0..0, notes);
    }
}

/// The user stacks being read, and the collector to put back after.
type PendingStacks = std::thread::JoinHandle<(stacks::Collector, stacks::UserStacks)>;

/// The user stacks stage: collect (unwind the blocked threads now, take
/// the running ones' samples), symbolize each distinct stack once, give
/// each thread its stack.
impl Session {
    /// Starts reading the blocked threads' stacks now, on a thread of its
    /// own, while the rest of the report is made.
    fn collect_stacks(&mut self, tasks: &[rip_ebpf::TaskRecord]) -> Option<PendingStacks> {
        if self.target.lost().is_some() {
            return None;
        }
        let mut collector = self.stacks.take()?;
        let blocked: Vec<(u32, rip_ebpf::UserRegs)> = tasks
            .iter()
            .filter(|t| t.on_cpu == 0 && correlate::thread_state(t.state, t.on_cpu).is_blocked())
            .map(|t| (t.tid, t.regs))
            .collect();
        Some(std::thread::spawn(move || {
            let user = timing::phase("unwind stacks", || collector.snapshot(&blocked));
            (collector, user)
        }))
    }

    /// The stacks read, and their frames.
    fn symbolize_stacks(
        &mut self,
        report: &mut Report,
        pending: PendingStacks,
        space: &UserSpace<'_>,
    ) -> Option<(
        stacks::UserStacks,
        Vec<std::sync::Arc<[crate::model::Frame]>>,
    )> {
        let Ok((collector, user)) = pending.join() else {
            report
                .warnings
                .push("no user stacks: reading them failed".into());
            return None;
        };
        self.stacks = Some(collector);
        let frames = timing::phase("symbolize stacks", || {
            symbolize::stacks::frames_of(&user.stacks, space, &mut self.symbolizer)
        });
        // What naming the stacks had to say (a JIT's perf map refused, a
        // debug file unreadable) belongs to this report, not the next.
        for w in self.symbolizer.take_warnings() {
            if !report.warnings.contains(&w) {
                report.warnings.push(w);
            }
        }
        Some((user, frames))
    }
}
