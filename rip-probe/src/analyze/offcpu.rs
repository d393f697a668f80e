//! `rip-probe offcpu`: the kernel's sums, by (thread, stack hash, kernel
//! stack, snap), turned into the report — stacks with their threads,
//! totals by thread and by last snap — with the names symbolize gave
//! every distinct stack and snap. Nothing here reads the process.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use crate::{
    collect::{offcpu::OffCpuData, runtime::python::PyFrame},
    model::{
        Frame,
        offcpu::{OffCpuReport, OffCpuStack, Periods, SnapOffCpu, ThreadOffCpu},
    },
    util::timefmt::duration,
};

/// A stack's identity before symbolization.
#[derive(Clone, PartialEq, Eq, Hash)]
struct StackKey {
    user: Arc<[u64]>,
    unwound: bool,
    kernel: Vec<u64>,
    snap: u64,
    preempted: bool,
    python: PyKey,
}

/// The Python frames a stack's periods ran, as far as what was read
/// while they ran says.
#[derive(Clone, PartialEq, Eq, Hash)]
enum PyKey {
    /// Not a Python stack (or the process runs no CPython).
    None,
    /// Every period of it was read, with this chain (code, line, entry
    /// of each frame, innermost first; the frames in [`PyChains`]).
    Frames(Vec<(u64, Option<u32>, bool)>),
    /// Why its Python frames are not shown.
    Note(String),
}

/// The Python chains of [`PyKey::Frames`], by their identity.
type PyChains = HashMap<Vec<(u64, Option<u32>, bool)>, Vec<PyFrame>>;

/// What the Python reads of one key (`reads`, one per period read) say
/// of its `count` periods, whose native stack is `native`.
fn python_key(
    reads: Option<&Vec<Option<Vec<PyFrame>>>>,
    count: u64,
    native: Option<&Arc<[Frame]>>,
    chains: &mut PyChains,
) -> PyKey {
    let runs_python = native.is_some_and(|n| {
        n.iter()
            .any(|f| f.function.as_deref() == Some(super::python::EVAL))
    });
    let reads = reads.map_or(&[][..], |r| &r[..]);
    if reads.is_empty() {
        return if runs_python {
            PyKey::Note(
                "its Python frames were not read while it was off the CPU (its periods ended \
                 before a read): shown native"
                    .into(),
            )
        } else {
            PyKey::None
        };
    }
    if (reads.len() as u64) < count {
        return PyKey::Note(format!(
            "its Python frames were read in {} of its {count} off-CPU periods: shown native",
            reads.len()
        ));
    }
    let Some(Some(first)) = reads.first() else {
        return PyKey::Note("its Python frames changed at every read: shown native".into());
    };
    if reads.iter().any(|r| r.as_ref() != Some(first)) {
        return PyKey::Note(
            "its off-CPU periods ran different Python frames (or one changed at every read): \
             shown native"
                .into(),
        );
    }
    let id: Vec<(u64, Option<u32>, bool)> =
        first.iter().map(|f| (f.code, f.line, f.entry)).collect();
    chains.entry(id.clone()).or_insert_with(|| first.clone());
    PyKey::Frames(id)
}

#[derive(Default)]
struct Sum {
    ns: u64,
    count: u64,
    tids: BTreeSet<u32>,
}

/// Names for what the window gathered: frames from the one symbolize
/// pass, thread names from collect.
#[derive(Default)]
pub(crate) struct Names {
    /// Frames by user stack (as `OffCpuData::user_stack` gives it).
    pub user: HashMap<Arc<[u64]>, Arc<[Frame]>>,
    /// Kernel frames by address.
    pub kernel: HashMap<u64, Frame>,
    /// Snap frames by address.
    pub snaps: HashMap<u64, Frame>,
    /// Thread names by tid (`None`: the thread has exited).
    pub threads: HashMap<u32, Option<String>>,
}

/// Fills `fig`'s figures (totals, stacks, threads, snaps, and the
/// warnings the counters call for) from `data`, named by `names`.
pub(crate) fn fill(fig: &mut OffCpuReport, data: &OffCpuData, names: &Names) {
    let mut by_stack: HashMap<StackKey, Sum> = HashMap::new();
    let mut by_thread: HashMap<u32, ThreadOffCpu> = HashMap::new();
    let mut by_snap: HashMap<u64, Periods> = HashMap::new();
    let mut not_unwound_ns = 0;
    fig.short = Periods {
        count: data.stats.short,
        ns: data.stats.short_ns,
    };
    let mut chains = PyChains::new();
    for (key, total) in &data.totals {
        let (user, unwound) = data.user_stack(key);
        let python = match &data.python {
            Some(reads) => python_key(
                reads.get(key),
                total.count,
                names.user.get(&user),
                &mut chains,
            ),
            None => PyKey::None,
        };
        if !unwound {
            not_unwound_ns += total.ns;
        }
        let preempted = key.preempted != 0;
        let kernel = data
            .kernel_stacks
            .get(&key.kstack_id)
            .cloned()
            .unwrap_or_default();
        let s = by_stack
            .entry(StackKey {
                user,
                unwound,
                kernel,
                snap: key.snap,
                preempted,
                python,
            })
            .or_default();
        s.ns += total.ns;
        s.count += total.count;
        s.tids.insert(key.tid);

        let t = by_thread.entry(key.tid).or_insert_with(|| ThreadOffCpu {
            tid: key.tid,
            name: None,
            blocked_ns: 0,
            preempted_ns: 0,
            count: 0,
            whole_window: data.whole_window.contains(&key.tid),
        });
        if preempted {
            t.preempted_ns += total.ns;
            fig.preempted_ns += total.ns;
        } else {
            t.blocked_ns += total.ns;
        }
        t.count += total.count;
        fig.total_ns += total.ns;
        if key.snap != 0 {
            let p = by_snap.entry(key.snap).or_default();
            p.ns += total.ns;
            p.count += total.count;
        }
    }

    let mut stacks: Vec<(StackKey, Sum)> = by_stack.into_iter().collect();
    stacks.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then_with(|| a.0.user.cmp(&b.0.user)));
    let mut snaps: Vec<(u64, Periods)> = by_snap.into_iter().collect();
    snaps.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(&b.0)));

    let mut kernel_stacks: HashMap<Vec<u64>, Arc<[Frame]>> = HashMap::new();

    fig.stacks = stacks
        .into_iter()
        .map(|(k, s)| {
            let kernel_stack = kernel_stacks
                .entry(k.kernel.clone())
                .or_insert_with(|| {
                    k.kernel
                        .iter()
                        .map(|a| {
                            let mut f = names.kernel.get(a).cloned().unwrap_or_default();
                            f.addr = *a;
                            f
                        })
                        .collect()
                })
                .clone();
            let native = names.user.get(&k.user).cloned().unwrap_or_else(|| {
                k.user
                    .iter()
                    .map(|&addr| Frame {
                        addr,
                        ..Frame::default()
                    })
                    .collect()
            });
            // Its Python frames in place of the evaluation frames that
            // ran them, when every period of it was read running them.
            let (frames, python_note) = match &k.python {
                PyKey::None => (native, None),
                PyKey::Note(n) => (native, Some(n.clone())),
                PyKey::Frames(id) => {
                    let py = &chains[id];
                    let named: Vec<Frame> = py.iter().map(super::python::frame).collect();
                    match super::python::merged(&native, py, &named) {
                        Ok(m) => (m.into(), None),
                        // The thread did not run between its stack and its
                        // chain: its native stack was unwound short.
                        Err(_) => (
                            native,
                            Some(format!(
                                "its native stack does not have one {} frame per run of its \
                                 Python frames ({} runs; unwound short?): shown native",
                                super::python::EVAL,
                                py.iter().filter(|f| f.entry).count()
                            )),
                        ),
                    }
                }
            };
            OffCpuStack {
                off_cpu_ns: s.ns,
                count: s.count,
                preempted: k.preempted,
                tids: s.tids.into_iter().collect(),
                frames,
                python_note,
                unwound: k.unwound,
                kernel_stack,
                snap: (k.snap != 0).then(|| snap_frame(&names.snaps, k.snap)),
            }
        })
        .collect();
    fig.stacks = merge_same_names(std::mem::take(&mut fig.stacks));
    fig.snaps = snaps
        .into_iter()
        .map(|(a, p)| SnapOffCpu {
            snap: snap_frame(&names.snaps, a),
            off_cpu_ns: p.ns,
            count: p.count,
        })
        .collect();
    let mut threads: Vec<ThreadOffCpu> = by_thread.into_values().collect();
    for t in &mut threads {
        t.name = names.threads.get(&t.tid).cloned().flatten();
    }
    threads.sort_by(|a, b| {
        (b.blocked_ns + b.preempted_ns)
            .cmp(&(a.blocked_ns + a.preempted_ns))
            .then(a.tid.cmp(&b.tid))
    });
    fig.threads = threads;
    fig.warnings.extend(warnings(data, not_unwound_ns));
}

/// What the counters say the user should know.
fn warnings(d: &OffCpuData, not_unwound_ns: u64) -> Vec<String> {
    let s = &d.stats;
    let mut w = Vec::new();
    if s.time_full > 0 {
        w.push(format!(
            "{} off-CPU periods ({}) were not attributed: the kernel's table was full \
             (raise --min-block to keep fewer, shorter periods out)",
            s.time_full,
            duration(s.time_full_ns)
        ));
    }
    if not_unwound_ns > 0 {
        w.push(format!(
            "{} off CPU under stacks that were never unwound (their copies were lost while \
             many new stacks appeared at once): shown by where the thread entered the kernel",
            duration(not_unwound_ns)
        ));
    }
    if s.no_regs > 0 && s.no_regs == s.switches {
        w.push(
            "no user registers could be read at any switch: user stacks are missing".to_string(),
        );
    }
    w
}

/// A frame as a reader tells it apart: by name and line, or by address
/// where it has no name.
fn frame_key(f: &Frame) -> String {
    match &f.function {
        Some(func) => {
            let inlined: Vec<&str> = f.inlined.iter().map(|i| i.function.as_str()).collect();
            format!(
                "{func}|{:?}|{:?}|{:?}|{}",
                f.file,
                f.line,
                f.module,
                inlined.join(",")
            )
        }
        None => format!("{:#x}", f.addr),
    }
}

/// Stacks that read the same (a thread preempted at two instructions of
/// one function, no line known) are one: their times are summed under the
/// one with the most time. Keeps the order, most time first.
fn merge_same_names(stacks: Vec<OffCpuStack>) -> Vec<OffCpuStack> {
    let mut out: Vec<OffCpuStack> = Vec::with_capacity(stacks.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    for s in stacks {
        let key = format!(
            "{}/{}/{}/{}",
            s.preempted,
            s.snap.as_ref().map(frame_key).unwrap_or_default(),
            s.frames.iter().map(frame_key).collect::<Vec<_>>().join(";"),
            s.kernel_stack
                .iter()
                .map(frame_key)
                .collect::<Vec<_>>()
                .join(";"),
        );
        match index.get(&key) {
            Some(&i) => {
                let m = &mut out[i];
                m.off_cpu_ns += s.off_cpu_ns;
                m.count += s.count;
                m.unwound &= s.unwound;
                m.tids.extend(s.tids);
                m.tids.sort_unstable();
                m.tids.dedup();
            }
            None => {
                index.insert(key, out.len());
                out.push(s);
            }
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.off_cpu_ns));
    out
}

fn snap_frame(names: &HashMap<u64, Frame>, addr: u64) -> Frame {
    let mut f = names.get(&addr).cloned().unwrap_or_default();
    f.addr = addr;
    f
}

/// The share of `part` in `whole`, in percent.
pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use rip_ebpf::offcpu::{OffKey, OffTotal};

    use super::*;
    use crate::model::ProcessInfo;

    fn empty() -> OffCpuReport {
        OffCpuReport {
            schema: crate::model::SCHEMA_VERSION,
            process: ProcessInfo {
                pid: 1,
                exe: None,
                comm: None,
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            window_ns: 1_000_000_000,
            min_block_ns: 0,
            kernel_stacks: true,
            total_ns: 0,
            preempted_ns: 0,
            short: Periods::default(),
            stacks: Vec::new(),
            threads: Vec::new(),
            snaps: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn named(addr: u64, function: &str) -> Frame {
        Frame {
            addr,
            function: Some(function.into()),
            ..Frame::default()
        }
    }

    fn key(tid: u32, hash: u64, ip: u64, snap: u64, preempted: u32) -> OffKey {
        OffKey {
            tid,
            kstack_id: 1,
            hash,
            ip,
            snap,
            preempted,
            _pad: 0,
        }
    }

    fn total(ms: u64) -> OffTotal {
        OffTotal {
            ns: ms * 1_000_000,
            count: 1,
        }
    }

    /// The report made from constructed sums and names, as `rip-probe
    /// offcpu` makes it from a window: two stacks that read the same
    /// (one function, two instructions) are one, with both threads and
    /// the time of both; a stack never unwound is shown by where the
    /// thread entered the kernel, and said so; the totals add up by
    /// thread, by preemption and by snap; every name is the one given.
    fn py(code: u64, line: u32, entry: bool) -> PyFrame {
        PyFrame {
            frame: 0x9000 + code,
            code,
            function: Some(format!("f{code:x}")),
            file: Some("app.py".into()),
            line: Some(line),
            entry,
        }
    }

    /// A stack shows Python frames only when every one of its periods was
    /// read running the same ones; otherwise it stays native and says why.
    #[test]
    fn python_frames_only_where_every_period_was_read_running_them() {
        let native: Arc<[Frame]> = Arc::from(vec![
            named(0x10, "sem_wait"),
            named(0x20, crate::analyze::python::EVAL),
        ]);
        let chain = vec![py(0x70, 3, false), py(0x80, 9, true)];
        let mut chains = PyChains::new();
        let key = |reads: Vec<Option<Vec<PyFrame>>>, count| {
            let mut chains = PyChains::new();
            python_key(Some(&reads), count, Some(&native), &mut chains)
        };
        let PyKey::Frames(id) = python_key(
            Some(&vec![Some(chain.clone()), Some(chain.clone())]),
            2,
            Some(&native),
            &mut chains,
        ) else {
            panic!("two periods read alike are shown with their frames");
        };
        assert_eq!(chains[&id], chain);
        let note = |k: PyKey| match k {
            PyKey::Note(n) => n,
            _ => panic!("not a note"),
        };
        assert!(note(key(vec![Some(chain.clone())], 3)).contains("read in 1 of its 3"));
        assert!(
            note(key(
                vec![Some(chain.clone()), Some(vec![py(0x71, 4, true)])],
                2
            ))
            .contains("different Python frames")
        );
        assert!(note(key(vec![None], 1)).contains("changed at every read"));
        assert!(note(key(vec![], 1)).contains("not read"));
        // A stack that runs no Python code says nothing.
        let plain: Arc<[Frame]> = Arc::from(vec![named(0x10, "read")]);
        assert!(matches!(
            python_key(None, 1, Some(&plain), &mut chains),
            PyKey::None
        ));
    }

    #[test]
    fn a_report_is_made_from_sums_and_names_alone() {
        let read_a: Arc<[u64]> = Arc::from(vec![0x100, 0x900]);
        let read_b: Arc<[u64]> = Arc::from(vec![0x104, 0x900]);
        let data = OffCpuData {
            totals: vec![
                (key(1, 0xa, 0, 0x50, 0), total(30)),
                (key(2, 0xb, 0, 0x50, 0), total(20)),
                (key(2, 0xc, 0x700, 0, 1), total(5)),
            ],
            user_stacks: HashMap::from([(0xa, read_a.clone()), (0xb, read_b.clone())]),
            kernel_stacks: HashMap::from([(1, vec![0xffff_0001])]),
            whole_window: vec![1],
            ..OffCpuData::default()
        };
        let read =
            |ip| -> Arc<[Frame]> { Arc::from(vec![named(ip, "read_all"), named(0x900, "main")]) };
        let names = Names {
            user: HashMap::from([(read_a, read(0x100)), (read_b, read(0x104))]),
            kernel: HashMap::from([(0xffff_0001, named(0, "pipe_read"))]),
            snaps: HashMap::from([(0x50, named(0, "serve"))]),
            threads: HashMap::from([(1, Some("reader".into())), (2, None)]),
        };
        let mut r = empty();
        fill(&mut r, &data, &names);
        assert_eq!((r.total_ns, r.preempted_ns), (55_000_000, 5_000_000));
        let [read_all, entered] = &r.stacks[..] else {
            panic!("two stacks: {:?}", r.stacks);
        };
        assert_eq!(read_all.off_cpu_ns, 50_000_000);
        assert_eq!(read_all.tids, [1, 2]);
        assert!(read_all.unwound && !read_all.preempted);
        assert_eq!(read_all.frames[0].function.as_deref(), Some("read_all"));
        assert_eq!(
            read_all.kernel_stack[0].function.as_deref(),
            Some("pipe_read")
        );
        assert_eq!(read_all.kernel_stack[0].addr, 0xffff_0001);
        let snap = read_all.snap.as_ref().expect("a snap");
        assert_eq!((snap.addr, snap.function.as_deref()), (0x50, Some("serve")));
        assert!(!entered.unwound && entered.preempted);
        assert_eq!(
            entered.frames.iter().map(|f| f.addr).collect::<Vec<_>>(),
            [0x700],
            "not unwound: where the thread entered the kernel, unnamed"
        );
        assert!(
            r.warnings.iter().any(|w| w.contains("never unwound")),
            "{:?}",
            r.warnings
        );
        let threads: Vec<_> = r
            .threads
            .iter()
            .map(|t| {
                (
                    t.tid,
                    t.name.as_deref(),
                    t.blocked_ns,
                    t.preempted_ns,
                    t.whole_window,
                )
            })
            .collect();
        assert_eq!(
            threads,
            [
                (1, Some("reader"), 30_000_000, 0, true),
                (2, None, 20_000_000, 5_000_000, false),
            ]
        );
        assert_eq!(r.snaps.len(), 1);
        assert_eq!(r.snaps[0].off_cpu_ns, 50_000_000);
    }
}
