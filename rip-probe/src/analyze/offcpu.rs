//! `rip-probe offcpu`: the kernel's sums, by (thread, stack hash, kernel
//! stack, snap), turned into the report — stacks with their threads,
//! totals by thread and by last snap — with every distinct stack and snap
//! symbolized once.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use crate::{
    collect::offcpu::OffCpuData,
    model::{
        Frame,
        offcpu::{OffCpuReport, OffCpuStack, Periods, SnapOffCpu, ThreadOffCpu},
    },
    symbolize::stacks::StackSymbolizer,
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
}

#[derive(Default)]
struct Sum {
    ns: u64,
    count: u64,
    tids: BTreeSet<u32>,
}

/// Fills `fig`'s figures (totals, stacks, threads, snaps, and the
/// warnings the counters call for) from `data`, naming frames with `sym`
/// (the process's, which may have named most stacks while it ran). `name`
/// gives a thread's name (None once it has exited).
pub(crate) fn fill(
    fig: &mut OffCpuReport,
    sym: &mut StackSymbolizer,
    data: &OffCpuData,
    name: impl Fn(u32) -> Option<String>,
) {
    let mut by_stack: HashMap<StackKey, Sum> = HashMap::new();
    let mut by_thread: HashMap<u32, ThreadOffCpu> = HashMap::new();
    let mut by_snap: HashMap<u64, Periods> = HashMap::new();
    let mut not_unwound_ns = 0;
    fig.short = Periods {
        count: data.stats.short,
        ns: data.stats.short_ns,
    };
    for (key, total) in &data.totals {
        let (user, unwound) = match data.user_stacks.get(&key.hash) {
            Some(s) => (s.clone(), true),
            None if key.ip != 0 => (Arc::from(vec![key.ip]), false),
            None => (Arc::from(Vec::new()), false),
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

    // Symbolize each distinct user stack, kernel stack and snap once.
    let mut user_ids: HashMap<Arc<[u64]>, usize> = HashMap::new();
    let mut users: Vec<Arc<[u64]>> = Vec::new();
    for (k, _) in &stacks {
        user_ids.entry(k.user.clone()).or_insert_with(|| {
            users.push(k.user.clone());
            users.len() - 1
        });
    }
    let refs: Vec<&[u64]> = users.iter().map(|u| &u[..]).collect();
    let user_frames: Vec<Arc<[Frame]>> = sym
        .frames_of_many(&refs)
        .into_iter()
        .map(Arc::from)
        .collect();
    let kernel_addrs: Vec<u64> = stacks.iter().flat_map(|(k, _)| k.kernel.clone()).collect();
    let kernel_names = sym.kernel(&kernel_addrs);
    let mut snap_addrs: Vec<u64> = stacks
        .iter()
        .map(|(k, _)| k.snap)
        .filter(|&a| a != 0)
        .collect();
    snap_addrs.sort_unstable();
    snap_addrs.dedup();
    let snap_refs: Vec<[u64; 1]> = snap_addrs.iter().map(|&a| [a]).collect();
    let snap_refs: Vec<&[u64]> = snap_refs.iter().map(|a| &a[..]).collect();
    let snap_names: HashMap<u64, Frame> = snap_addrs
        .iter()
        .copied()
        .zip(
            sym.frames_of_many(&snap_refs)
                .into_iter()
                .map(|mut f| f.pop().unwrap_or_default()),
        )
        .collect();
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
                            let mut f = kernel_names.get(a).cloned().unwrap_or_default();
                            f.addr = *a;
                            f
                        })
                        .collect()
                })
                .clone();
            OffCpuStack {
                off_cpu_ns: s.ns,
                count: s.count,
                preempted: k.preempted,
                tids: s.tids.into_iter().collect(),
                frames: user_frames[user_ids[&k.user]].clone(),
                unwound: k.unwound,
                kernel_stack,
                snap: (k.snap != 0).then(|| snap_frame(&snap_names, k.snap)),
            }
        })
        .collect();
    fig.stacks = merge_same_names(std::mem::take(&mut fig.stacks));
    fig.snaps = snaps
        .into_iter()
        .map(|(a, p)| SnapOffCpu {
            snap: snap_frame(&snap_names, a),
            off_cpu_ns: p.ns,
            count: p.count,
        })
        .collect();
    let mut threads: Vec<ThreadOffCpu> = by_thread.into_values().collect();
    for t in &mut threads {
        t.name = name(t.tid);
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
