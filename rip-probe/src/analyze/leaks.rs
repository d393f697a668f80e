//! `rip-probe leaks`: from the table of what was still held at the end of
//! the window (collect's, already filtered of what was released), the
//! report's groups — by kind and acquiring stack, older than `--min-age`
//! — its totals and its series. Computes only: the stacks' names and the
//! descriptors' targets come from the stages below.

use std::{collections::HashMap, sync::Arc};

use crate::{
    collect::{
        leaks::{LeaksData, Table},
        ring::AllocEvidence,
    },
    model::{
        Frame,
        leaks::{
            FdKind, LeakAcquired, LeakLost, LeakPoint, LeakStack, LeakTotal, LeaksReport,
            ResourceKind,
        },
    },
};

/// Descriptor numbers or addresses kept per group.
const IDS: usize = 16;
/// Descriptor targets kept per group.
const TARGETS: usize = 4;

/// What a descriptor is, from its `/proc/PID/fd` link (`socket:[…]`,
/// `anon_inode:[eventfd]`, `/memfd:…`), else from the call that made it.
pub(crate) fn fd_kind(target: Option<&str>, call: &str) -> FdKind {
    if let Some(t) = target {
        if t.starts_with("socket:") {
            return FdKind::Socket;
        }
        if t.starts_with("pipe:") {
            return FdKind::Pipe;
        }
        if t.starts_with("/memfd:") {
            return FdKind::Memfd;
        }
        if let Some(anon) = t.strip_prefix("anon_inode:") {
            let anon = anon.trim_start_matches('[').trim_end_matches(']');
            return match anon {
                "eventfd" => FdKind::Eventfd,
                "eventpoll" => FdKind::Epoll,
                "timerfd" => FdKind::Timerfd,
                "signalfd" => FdKind::Signalfd,
                "inotify" => FdKind::Inotify,
                "pidfd" => FdKind::Pidfd,
                _ => FdKind::Other,
            };
        }
        if t.starts_with("/dev/") {
            return FdKind::Device;
        }
        if t.starts_with('/') {
            return FdKind::File;
        }
    }
    match call {
        "open" | "openat" | "openat2" | "creat" | "open_by_handle_at" => FdKind::File,
        "socket" | "accept" | "accept4" | "socketpair" => FdKind::Socket,
        "pipe" | "pipe2" => FdKind::Pipe,
        "eventfd" | "eventfd2" => FdKind::Eventfd,
        "epoll_create" | "epoll_create1" => FdKind::Epoll,
        "memfd_create" => FdKind::Memfd,
        "timerfd_create" => FdKind::Timerfd,
        "signalfd" | "signalfd4" => FdKind::Signalfd,
        "inotify_init" | "inotify_init1" => FdKind::Inotify,
        "pidfd_open" => FdKind::Pidfd,
        _ => FdKind::Other,
    }
}

/// The frames `names` has for stack `addrs`, else its bare addresses.
fn frames_of(names: &HashMap<Arc<[u64]>, Arc<[Frame]>>, addrs: &Arc<[u64]>) -> Arc<[Frame]> {
    names.get(addrs).cloned().unwrap_or_else(|| {
        addrs
            .iter()
            .map(|&a| Frame {
                addr: a,
                ..Frame::default()
            })
            .collect()
    })
}

fn kind_of(t: Table) -> ResourceKind {
    match t {
        Table::Heap => ResourceKind::Heap,
        Table::Fd => ResourceKind::Fd,
        Table::Mapping => ResourceKind::Mapping,
        Table::Shm => ResourceKind::Shm,
    }
}

/// Fills `report`'s totals, groups, series and losses from `data`, with
/// `names` (each acquiring stack's frames, by stack); resources younger
/// than `report.min_age_ns` at the end are left out.
pub(crate) fn fill(
    report: &mut LeaksReport,
    data: &LeaksData,
    names: &HashMap<Arc<[u64]>, Arc<[Frame]>>,
) {
    #[derive(Default)]
    struct Acc {
        count: u64,
        bytes: u64,
        oldest: u64,
        ids: Vec<(u64, u64)>,
        targets: Vec<String>,
    }
    let end = data.end_ns;
    let mut groups: HashMap<(ResourceKind, Option<FdKind>, &'static str, usize), Acc> =
        HashMap::new();
    let mut add = |kind,
                   fd: Option<FdKind>,
                   id: u64,
                   target: Option<&String>,
                   h: &crate::collect::leaks::Held| {
        let age = end.saturating_sub(h.at_ns);
        if age < report.min_age_ns {
            return;
        }
        let g = groups.entry((kind, fd, h.call, h.stack)).or_default();
        g.count += 1;
        g.bytes += h.bytes;
        g.oldest = g.oldest.max(age);
        g.ids.push((h.at_ns, id));
        if let Some(t) = target
            && g.targets.len() < TARGETS
            && !g.targets.contains(t)
        {
            g.targets.push(t.clone());
        }
    };
    for (&fd, h) in &data.fds {
        let target = data.fd_targets.get(&fd);
        let k = fd_kind(target.map(String::as_str), h.call);
        add(ResourceKind::Fd, Some(k), fd as u64, target, h);
    }
    for (&addr, h) in &data.mappings {
        add(ResourceKind::Mapping, None, addr, None, h);
    }
    for (&addr, h) in &data.shm {
        add(ResourceKind::Shm, None, addr, None, h);
    }
    for (&addr, h) in &data.heap {
        add(ResourceKind::Heap, None, addr, None, h);
    }
    let mut totals: Vec<LeakTotal> = Vec::new();
    let mut stacks: Vec<LeakStack> = groups
        .into_iter()
        .map(|((kind, fd_kind, call, stack), mut g)| {
            match totals.iter_mut().find(|t| t.kind == kind) {
                Some(t) => {
                    t.count += g.count;
                    t.bytes += g.bytes;
                }
                None => totals.push(LeakTotal {
                    kind,
                    count: g.count,
                    bytes: g.bytes,
                }),
            }
            // The oldest first: those are the likeliest leaks.
            g.ids.sort_unstable();
            let addrs = data
                .stacks
                .get(stack)
                .cloned()
                .unwrap_or_else(|| Arc::from(Vec::new()));
            LeakStack {
                kind,
                fd_kind,
                call: call.to_string(),
                count: g.count,
                bytes: g.bytes,
                oldest_ns: g.oldest,
                ids: g.ids.iter().take(IDS).map(|&(_, id)| id).collect(),
                targets: g.targets,
                frames: frames_of(names, &addrs),
                addrs: addrs.to_vec(),
            }
        })
        .collect();
    stacks.sort_by(|a, b| {
        heaviest_first(a.bytes, a.count, a.kind, &a.call, &a.addrs)
            .cmp(&heaviest_first(b.bytes, b.count, b.kind, &b.call, &b.addrs))
    });
    totals.sort_by_key(|t| t.kind);
    report.stacks = stacks;
    report.allocated = data.acquired.as_ref().map(|acq| {
        let mut all: Vec<LeakAcquired> = acq
            .iter()
            .map(|(&(table, call, stack), c)| {
                let addrs = data
                    .stacks
                    .get(stack)
                    .cloned()
                    .unwrap_or_else(|| Arc::from(Vec::new()));
                LeakAcquired {
                    kind: kind_of(table),
                    call: call.to_string(),
                    count: c.count,
                    bytes: c.bytes,
                    frames: frames_of(names, &addrs),
                    addrs: addrs.to_vec(),
                }
            })
            .collect();
        all.sort_by(|a, b| {
            heaviest_first(a.bytes, a.count, a.kind, &a.call, &a.addrs)
                .cmp(&heaviest_first(b.bytes, b.count, b.kind, &b.call, &b.addrs))
        });
        all
    });
    report.totals = totals;
    report.released = data
        .released
        .iter()
        .map(|(&t, c)| LeakTotal {
            kind: kind_of(t),
            count: c.count,
            bytes: c.bytes,
        })
        .collect();
    report.open_at_start = data.open_at_start;
    report.series = data
        .series
        .iter()
        .map(|p| LeakPoint {
            at_ns: p.at_ns,
            descriptors: p.fds,
            mappings: p.mappings,
            mapped_bytes: p.mapped_bytes,
            heap_count: p.heap_count,
            heap_bytes: p.heap_bytes,
            heap_calls: p.heap_calls,
        })
        .collect();
    report.lost = LeakLost {
        events: data.dropped,
        calls: data.calls_full,
        unmatched_releases: data.unmatched_releases,
        heap_calls: data.heap_full + data.heap_unmatched,
    };
    if let Some(h) = &mut report.traced.heap {
        h.calls = data.heap_calls;
        h.older_frees = data.heap_older_frees;
    }
    if data.heap_full > 0 || data.heap_unmatched > 0 {
        report.warnings.push(format!(
            "{} allocations not followed ({} with rip-probe's table of calls in flight full, {} \
             nested in another allocator call): their blocks are missing from the report",
            data.heap_full + data.heap_unmatched,
            data.heap_full,
            data.heap_unmatched
        ));
    }
    if data.dropped > 0 || data.calls_full > 0 {
        report.warnings.push(format!(
            "{} events lost (rip-probe's buffer was full) and {} calls not followed (table full): \
             the report may miss resources and count some released ones as held",
            data.dropped, data.calls_full
        ));
    }
}

/// Fills `report`'s heap totals and groups from the live samples of
/// librip's allocation sampler (`table`), with `names` (each stack's
/// frames) and `age` (a sample's age from its allocation time): one group
/// per stack, counting live samples, its bytes the estimate the samples
/// stand for (exact when every call was recorded).
pub(crate) fn fill_sampled(
    report: &mut LeaksReport,
    table: &AllocEvidence,
    names: &HashMap<Arc<[u64]>, Arc<[Frame]>>,
    age: impl Fn(u64) -> u64,
) {
    let mut by: HashMap<&[u64], (u64, f64, u64)> = HashMap::new();
    for a in &table.live {
        let e = by.entry(&a.frames).or_insert((0, 0.0, u64::MAX));
        e.0 += 1;
        e.1 += a.estimated_bytes;
        e.2 = e.2.min(a.time_ns);
    }
    let mut stacks: Vec<LeakStack> = by
        .into_iter()
        .map(|(addrs, (n, est, oldest))| LeakStack {
            kind: ResourceKind::Heap,
            fd_kind: None,
            call: SAMPLED_CALL.into(),
            count: n,
            bytes: est.round() as u64,
            oldest_ns: age(oldest),
            ids: Vec::new(),
            targets: Vec::new(),
            addrs: addrs.to_vec(),
            frames: names.get(addrs).cloned().unwrap_or_else(|| {
                addrs
                    .iter()
                    .map(|&a| Frame {
                        addr: a,
                        ..Frame::default()
                    })
                    .collect()
            }),
        })
        .collect();
    stacks.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then(a.addrs.cmp(&b.addrs))
    });
    let count = stacks.iter().map(|s| s.count).sum();
    let bytes = stacks.iter().map(|s| s.bytes).sum();
    report.totals = if count > 0 {
        vec![LeakTotal {
            kind: ResourceKind::Heap,
            count,
            bytes,
        }]
    } else {
        Vec::new()
    };
    report.stacks = stacks;
}

/// The call of a sampled heap group: the sampler records the stack, not
/// which function of the malloc family was called.
pub const SAMPLED_CALL: &str = "malloc family";

/// The order of a report's stacks: most bytes, then most acquisitions,
/// then by kind, call and stack (so that equal weights still print in one
/// order).
fn heaviest_first<'a>(
    bytes: u64,
    count: u64,
    kind: ResourceKind,
    call: &'a str,
    addrs: &'a [u64],
) -> (
    std::cmp::Reverse<u64>,
    std::cmp::Reverse<u64>,
    ResourceKind,
    &'a str,
    &'a [u64],
) {
    (
        std::cmp::Reverse(bytes),
        std::cmp::Reverse(count),
        kind,
        call,
        addrs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::ring::LiveSample;

    /// A sample weighed as librip's estimator does at mean 1000.
    fn alloc(frames: &[u64], size: u64, t: u64) -> LiveSample {
        LiveSample {
            requested: size,
            estimated_bytes: librip::reader::alloc::estimated_bytes(size, 1000),
            time_ns: t,
            frames: frames.to_vec(),
        }
    }

    #[test]
    fn samples_group_by_stack_scaled_by_the_estimator() {
        let table = AllocEvidence {
            mean: 1000,
            sampled: 3,
            dropped: 0,
            file_full: false,
            freed: 0,
            torn: 0,
            live: vec![
                alloc(&[1, 2], 100, 5),
                alloc(&[1, 2], 100, 3),
                alloc(&[1, 3], 5000, 9),
            ],
        };
        let mut r = crate::model::leaks::tests::empty_report();
        super::fill_sampled(&mut r, &table, &HashMap::new(), |t| 10 - t);
        let s = &r.stacks;
        assert_eq!(s.len(), 2);
        // 5000 bytes at mean 1000: sampled with probability 1 - e^-5.
        assert_eq!(s[0].addrs, [1, 3]);
        assert_eq!(s[0].bytes, 5034);
        assert_eq!(s[1].count, 2);
        // Each 100-byte sample stands for 100 / (1 - e^-0.1) = 1050.8 bytes.
        assert_eq!(s[1].bytes, 2102);
        assert_eq!(s[1].oldest_ns, 7);
        assert!(s.iter().all(|s| s.kind == ResourceKind::Heap));
        assert_eq!(r.totals.len(), 1);
        assert_eq!((r.totals[0].count, r.totals[0].bytes), (3, 5034 + 2102));
    }

    #[test]
    fn descriptor_kinds_from_links_then_calls() {
        assert_eq!(fd_kind(Some("socket:[123]"), "dup"), FdKind::Socket);
        assert_eq!(
            fd_kind(Some("anon_inode:[eventfd]"), "dup"),
            FdKind::Eventfd
        );
        assert_eq!(fd_kind(Some("anon_inode:[eventpoll]"), "x"), FdKind::Epoll);
        assert_eq!(fd_kind(Some("/memfd:buf (deleted)"), "x"), FdKind::Memfd);
        assert_eq!(fd_kind(Some("/etc/hostname"), "dup"), FdKind::File);
        assert_eq!(fd_kind(Some("/dev/null"), "openat"), FdKind::Device);
        assert_eq!(fd_kind(None, "pipe2"), FdKind::Pipe);
        assert_eq!(fd_kind(None, "dup"), FdKind::Other);
    }
}
