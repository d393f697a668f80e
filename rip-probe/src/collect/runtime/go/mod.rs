//! Go's runtime: every goroutine of an unmodified, live Go process, read
//! from its memory with `process_vm_readv` (never ptrace, never a signal)
//! — status, wait reason in the runtime's words, waiting since when (a
//! lower bound: the runtime stamps it at the first GC that finds the
//! goroutine waiting), the thread it runs on, where it was created, its
//! stack, and the channel or semaphore it waits on.
//!
//! Collect reads ([`collect`]) into a [`GoSnapshot`]; the seam turns the
//! snapshot into the one coroutine model ([`Origin::Go`]).

pub(crate) mod binary;
pub(crate) mod code;
pub(crate) mod labels;
pub(crate) mod layout;
pub(crate) mod read;

use std::{
    collections::{HashMap, HashSet},
    os::unix::fs::MetadataExt,
    path::PathBuf,
    sync::Arc,
};

use crate::discover::maps::ProcessMaps;

use self::{
    binary::GoBinary,
    layout::Status,
    read::{RawG, Roots, WaitsOn},
};
use super::{Clock, Process, Runtime};
use crate::{
    collect::memory::{Memory, ProcessMemory},
    model::{
        Coroutine, CoroutineState, Frame, GoLabel, GoStatus, GoWaitKind, GoWaitsOn, Goroutine,
        Location, LocationSource, Origin,
    },
};

/// What a Go binary's function table (`.gopclntab`, which stripped
/// binaries keep) says, in the binary's virtual addresses: for a stripped
/// binary's roots, and to unwind a goroutine by its frames' sizes. The
/// symbolize stage's reader implements it.
pub(crate) trait FuncTable {
    /// The code `[entry, end)` of the function named `name`.
    fn func_range(&self, name: &str) -> Option<(u64, u64)>;
    /// The frame's size at `pc`: from SP there to the return address.
    fn sp_delta(&self, pc: u64) -> Option<i32>;
}

/// The goroutines of a Go process, as collect read them.
#[derive(Debug, Default)]
pub(crate) struct GoSnapshot {
    /// The Go version the binary was built with.
    pub(crate) version: String,
    /// Every goroutine but the dead, in `allgs` order.
    pub(crate) goroutines: Vec<RawG>,
    /// Wait reasons by number, in the runtime's words.
    pub(crate) reasons: Vec<String>,
    /// `g`s that could not be read (freed while read).
    pub(crate) unreadable: usize,
    /// The pprof labels sets by where `g.labels` points (goroutines share
    /// their creator's), or why one could not be read.
    pub(crate) labels: HashMap<u64, Result<Arc<[GoLabel]>, &'static str>>,
}

/// What reading a Go process gave: its goroutines, or why they could not
/// be read (for the report's warnings).
pub(crate) type Collected = Result<GoSnapshot, String>;

/// Reads the goroutines of process `pid` (`view`: its id in our /proc),
/// if it is a Go program; `None` when it is not one.
/// `table` is the binary's function table, if it could be read.
pub(crate) fn collect(
    pid: u32,
    view: u32,
    maps: Option<&ProcessMaps>,
    table: Option<&dyn FuncTable>,
) -> Option<Collected> {
    let exe = PathBuf::from(format!("/proc/{view}/exe"));
    let bin = match GoBinary::open(&exe, table) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(e) => return Some(Err(format!("goroutines not read: {e}"))),
    };
    Some(read_process(&bin, &exe, pid, maps, table))
}

fn read_process(
    bin: &GoBinary,
    exe: &PathBuf,
    pid: u32,
    maps: Option<&ProcessMaps>,
    table: Option<&dyn FuncTable>,
) -> Collected {
    let why = |what: String| {
        format!(
            "goroutines of this {} program not read: {what}",
            bin.version
        )
    };
    let layout = bin.layout.clone().map_err(why)?;
    let Some(allgs) = bin.allgs else {
        return Err(why(
            "runtime.allgs is neither in its symbol table nor found in runtime.forEachG's code"
                .into(),
        ));
    };
    let bias =
        load_bias(bin, exe, maps).ok_or_else(|| why("its executable is not mapped".into()))?;
    let mem = ProcessMemory::new(pid);
    let roots = Roots {
        allgs: allgs.wrapping_add(bias),
        semtable: bin.semtable.map(|(a, n)| (a.wrapping_add(bias), n)),
    };
    let unwind = table.map(|t| read::Unwind::new(t, bias));
    let read = read::read(&mem, &layout, roots, unwind.as_ref())
        .map_err(|e| why(format!("reading allgs: {e}")))?;
    let reasons = bin
        .wait_reasons
        .and_then(|(a, n)| wait_reasons(&mem, a.wrapping_add(bias), n))
        .or_else(|| {
            layout::reasons(&bin.version).map(|r| r.iter().map(|s| s.to_string()).collect())
        })
        .unwrap_or_default();
    let labels = read_labels(&mem, &bin.version, &read.goroutines);
    Ok(GoSnapshot {
        version: bin.version.clone(),
        goroutines: read.goroutines,
        reasons,
        unreadable: read.unreadable,
        labels,
    })
}

/// Each distinct labels set the goroutines point to, read once (a
/// goroutine's children share its set until they set their own).
fn read_labels(
    mem: &dyn Memory,
    version: &str,
    gs: &[RawG],
) -> HashMap<u64, Result<Arc<[GoLabel]>, &'static str>> {
    let mut out = HashMap::new();
    let Some(format) = layout::labels_format(version) else {
        return out;
    };
    for g in gs.iter().filter(|g| g.labels != 0) {
        out.entry(g.labels).or_insert_with(|| {
            labels::read(mem, format, g.labels).map(|v| {
                v.iter()
                    .map(|(key, value)| GoLabel {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect()
            })
        });
    }
    out
}

/// The executable's load bias: where its executable segment is mapped,
/// less where the file says it goes (0 for a non-PIE binary).
fn load_bias(bin: &GoBinary, exe: &PathBuf, maps: Option<&ProcessMaps>) -> Option<u64> {
    let ino = std::fs::metadata(exe).ok()?.ino();
    let code = maps?.executable().ok()?;
    let m = code.iter().find(|m| m.inode == ino)?;
    Some(m.start.wrapping_sub(m.offset).wrapping_sub(bin.exec_delta))
}

/// The runtime's `waitReasonStrings` (an array of Go strings), read from
/// the process: the wait reasons in its own words, whatever its version.
fn wait_reasons(mem: &dyn Memory, at: u64, size: u64) -> Option<Vec<String>> {
    if size == 0 || !size.is_multiple_of(16) || size > 16 * 256 {
        return None;
    }
    let mut hdrs = vec![0u8; size as usize];
    mem.read(at, &mut hdrs).ok()?;
    hdrs.chunks_exact(16)
        .map(|h| {
            let ptr = u64::from_le_bytes(h[..8].try_into().ok()?);
            let len = u64::from_le_bytes(h[8..].try_into().ok()?);
            if len == 0 {
                return Some(String::new());
            }
            if len > 128 {
                return None;
            }
            let mut s = vec![0u8; len as usize];
            mem.read(ptr, &mut s).ok()?;
            String::from_utf8(s).ok()
        })
        .collect()
}

/// A process's goroutines, read, for the seam.
pub(crate) struct Go<'a> {
    snap: &'a GoSnapshot,
}

/// A frame at a return address, looked up at the call (`pc - 1`).
fn at_call(pc: u64) -> Frame {
    Frame {
        addr: pc.saturating_sub(1),
        ..Frame::default()
    }
}

impl<'a> Runtime<'a> for Go<'a> {
    fn detect(process: Process<'a>) -> Option<Self> {
        process.go.map(|snap| Go { snap })
    }

    fn coroutines(&self, clock: Clock, _history: bool) -> Vec<Coroutine> {
        let now = match clock {
            Clock::Now(ns) => Some(ns),
            Clock::PostMortem => None,
        };
        // Goroutines parked at one place share one stack (collect read
        // it once): made once, and named once by the symbolize stage.
        let mut stacks: HashMap<*const u64, Arc<[Frame]>> = HashMap::new();
        // And those made by one `go` statement share its frame.
        let mut creators: HashMap<u64, Arc<Frame>> = HashMap::new();
        let mut v: Vec<Coroutine> = Vec::with_capacity(self.snap.goroutines.len());
        v.extend(self.snap.goroutines.iter().filter_map(|g| {
            let stack = stacks
                .entry(g.pcs.as_ptr())
                .or_insert_with(|| g.pcs.iter().map(|&pc| at_call(pc)).collect())
                .clone();
            // The main goroutine is the runtime's (Go's traceback names no
            // creator for it either).
            let created_by = (g.gopc != 0 && g.goid != 1).then(|| {
                creators
                    .entry(g.gopc)
                    .or_insert_with(|| Arc::new(at_call(g.gopc)))
                    .clone()
            });
            coroutine(g, stack, created_by, self.snap, now)
        }));
        v.sort_by_key(|c| c.id);
        v
    }

    fn native_addrs(c: &Coroutine) -> Vec<u64> {
        let Some(g) = &c.go else { return Vec::new() };
        g.stack
            .iter()
            .chain(g.created_by.as_deref())
            .chain(c.location.iter().map(|l| &l.frame))
            .map(|f| f.addr)
            .collect()
    }

    fn name_frames(c: &mut Coroutine, native: &HashMap<u64, Frame>) {
        Go::name_shared(c, native, &mut Named::default());
    }
}

/// Stacks (and creating frames) already named, by the address of the
/// one they were named from: goroutines that share a stack share its
/// named copy.
#[derive(Default)]
pub(crate) struct Named {
    stacks: HashMap<usize, Arc<[Frame]>>,
    creators: HashMap<usize, Arc<Frame>>,
    /// Stacks and creators whose addresses were handed to the symbolize
    /// stage already.
    listed: HashSet<usize>,
}

impl Go<'_> {
    /// [`Runtime::native_addrs`] into `out`, each shared stack's and
    /// creator's once (`named` holds what was listed, across the
    /// goroutines of a report).
    pub(crate) fn native_addrs_shared(c: &Coroutine, named: &mut Named, out: &mut Vec<u64>) {
        let Some(g) = &c.go else { return };
        if named.listed.insert(g.stack.as_ptr() as usize) {
            out.extend(g.stack.iter().map(|f| f.addr));
        }
        if let Some(f) = &g.created_by
            && named.listed.insert(Arc::as_ptr(f) as usize)
        {
            out.push(f.addr);
        }
        out.extend(c.location.iter().map(|l| l.frame.addr));
    }

    /// [`Runtime::name_frames`], naming each shared stack once (`named`
    /// holds them across the goroutines of a report).
    pub(crate) fn name_shared(c: &mut Coroutine, native: &HashMap<u64, Frame>, named: &mut Named) {
        let name = |f: &mut Frame| {
            if let Some(n) = native.get(&f.addr) {
                *f = n.clone();
            }
        };
        if let Some(l) = &mut c.location {
            name(&mut l.frame);
        }
        if let Some(g) = &mut c.go {
            let key = g.stack.as_ptr() as usize;
            g.stack = named
                .stacks
                .entry(key)
                .or_insert_with(|| {
                    let mut stack = g.stack.to_vec();
                    stack.iter_mut().for_each(name);
                    stack.into()
                })
                .clone();
            if let Some(f) = &mut g.created_by {
                *f = named
                    .creators
                    .entry(Arc::as_ptr(f) as usize)
                    .or_insert_with(|| {
                        let mut n = Frame::clone(f);
                        name(&mut n);
                        Arc::new(n)
                    })
                    .clone();
            }
        }
    }
}

/// One goroutine in the model; `None` for a status no runtime uses.
fn coroutine(
    g: &RawG,
    stack: Arc<[Frame]>,
    created_by: Option<Arc<Frame>>,
    snap: &GoSnapshot,
    now: Option<u64>,
) -> Option<Coroutine> {
    let reasons = &snap.reasons;
    let status = match g.status {
        Status::Running => GoStatus::Running,
        Status::Runnable => GoStatus::Runnable,
        Status::Waiting => GoStatus::Waiting,
        Status::Syscall => GoStatus::Syscall,
        Status::Skip | Status::Unknown => return None,
    };
    let on_thread = matches!(status, GoStatus::Running | GoStatus::Syscall);
    let wait_reason = (status == GoStatus::Waiting).then(|| {
        reasons
            .get(usize::from(g.reason))
            .cloned()
            .unwrap_or_else(|| format!("wait reason {}", g.reason))
    });
    // Stamped at a GC start while it waited: it has waited at least since.
    let waited = match (now, g.waitsince) {
        (Some(now), since)
            if since > 0 && matches!(status, GoStatus::Waiting | GoStatus::Syscall) =>
        {
            Some(now.saturating_sub(since as u64))
        }
        _ => None,
    };
    let waits_on = g.waits_on.as_ref().map(|w| match w {
        WaitsOn::Channels(c) => GoWaitsOn {
            kind: GoWaitKind::Channel,
            addrs: c.clone(),
            name: None,
        },
        WaitsOn::Semaphore(a) => GoWaitsOn {
            // A sync.Cond's waiters wait on its notify list.
            kind: if wait_reason.as_deref() == Some("sync.Cond.Wait") {
                GoWaitKind::Cond
            } else {
                GoWaitKind::Semaphore
            },
            addrs: vec![*a],
            name: None,
        },
    });
    Some(Coroutine {
        origin: Origin::Go,
        id: g.goid,
        generation: 0,
        name: String::new(),
        state: if on_thread {
            CoroutineState::Polling
        } else {
            CoroutineState::Idle
        },
        polling_tid: g.tid.filter(|_| on_thread),
        polls: 0,
        idle_ns: waited.filter(|_| !on_thread),
        polling_ns: waited.filter(|_| on_thread),
        lower_bound: waited.is_some(),
        since_unix_ns: None,
        created_unix_ns: None,
        location: stack.first().map(|f| Location {
            source: LocationSource::UserPc,
            seq: None,
            ago_ns: None,
            frame: f.clone(),
        }),
        history: Vec::new(),
        go: Some(Goroutine {
            status,
            wait_reason,
            stack,
            stack_note: g.stack_note.map(str::to_string),
            created_by,
            waits_on,
            labels: match snap.labels.get(&g.labels) {
                Some(Ok(l)) => l.clone(),
                _ => Arc::from([]),
            },
            labels_note: match snap.labels.get(&g.labels) {
                Some(Err(why)) => Some(why.to_string()),
                None if g.labels != 0 => Some("labels not read for this Go version".into()),
                _ => None,
            },
            torn: g.torn,
        }),
        python: None,
    })
}
