//! pprof profiles (`--pprof FILE`): the reports of `offcpu`, `--pid`,
//! `calls` and `leaks` as gzipped `profile.proto`, which `go tool pprof`,
//! Pyroscope and Parca read. Each is a function of its report (and the
//! binaries' build-ids the command read): the stacks become locations
//! (address, mapping, functions with inlined ones, file and line), the
//! figures become sample values.

use std::{
    collections::HashMap,
    io::{self, Write},
};

use prost::Message;

use super::protos::pprof::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use crate::model::{
    Coroutine, Frame, ProcessInfo, Report,
    calls::CallsReport,
    leaks::{LeaksReport, ResourceKind},
    offcpu::OffCpuReport,
};

/// GNU build-ids of the binaries a report's frames are in, by the path the
/// frames give (`Frame::module`), as lowercase hex.
pub type BuildIds = HashMap<String, String>;

/// The mapping kernel frames are put in.
const KERNEL: &str = "[kernel]";

/// A profile being built: strings, functions, locations and mappings
/// each entered once.
struct Builder<'a> {
    p: Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64), u64>,
    locations: HashMap<String, u64>,
    mappings: HashMap<String, usize>,
    build_ids: &'a BuildIds,
}

impl<'a> Builder<'a> {
    /// A profile of process `process` whose samples hold `types` (type,
    /// unit), `default` shown first.
    fn new(
        process: &ProcessInfo,
        types: &[(&str, &str)],
        default: &str,
        build_ids: &'a BuildIds,
    ) -> Self {
        let mut b = Builder {
            p: Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            mappings: HashMap::new(),
            build_ids,
        };
        b.string("");
        for (t, u) in types {
            let vt = ValueType {
                r#type: b.string(t),
                unit: b.string(u),
            };
            b.p.sample_type.push(vt);
        }
        b.p.default_sample_type = b.string(default);
        // The executable is the first mapping, as pprof expects the main
        // binary to be (its addresses set by its frames, if any).
        if let Some(exe) = &process.exe {
            b.mapping(exe, u64::MAX, None);
        }
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn comment(&mut self, s: &str) {
        let i = self.string(s);
        self.p.comment.push(i);
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let key = (self.string(name), self.string(file.unwrap_or("")));
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        self.p.function.push(Function {
            id,
            name: key.0,
            system_name: key.0,
            filename: key.1,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    /// The mapping of `module`, widened to hold `addr` (its start is where
    /// file offset 0 would be: `addr - offset`; `addr` `u64::MAX`: none
    /// yet).
    fn mapping(&mut self, module: &str, addr: u64, offset: Option<u64>) -> u64 {
        let start = offset.map_or(addr, |o| addr.saturating_sub(o));
        let limit = addr.saturating_add(1) * u64::from(addr != u64::MAX);
        let i = match self.mappings.get(module) {
            Some(&i) => i,
            None => {
                let filename = self.string(module);
                let build_id = match self.build_ids.get(module) {
                    Some(id) => self.string(id),
                    None => 0,
                };
                self.p.mapping.push(Mapping {
                    id: self.p.mapping.len() as u64 + 1,
                    memory_start: start,
                    memory_limit: limit,
                    file_offset: 0,
                    filename,
                    build_id,
                    has_functions: true,
                    ..Mapping::default()
                });
                self.mappings
                    .insert(module.to_string(), self.p.mapping.len() - 1);
                self.p.mapping.len() - 1
            }
        };
        let m = &mut self.p.mapping[i];
        m.memory_start = m.memory_start.min(start);
        m.memory_limit = m.memory_limit.max(limit);
        m.id
    }

    /// The location of a user (or Python) frame.
    fn frame(&mut self, f: &Frame) -> u64 {
        let name = frame_name(f);
        let key = format!(
            "{}\0{:x}\0{}\0{:?}\0{}",
            f.module.as_deref().unwrap_or(""),
            f.addr,
            name,
            f.line,
            f.python
        );
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        // The innermost inlined function first, the function the address
        // is in last (pprof's order); each with its own line.
        let mut lines = Vec::new();
        for i in f.inlined.iter().rev() {
            let fid = self.function(&i.function, i.file.as_deref());
            lines.push(Line {
                function_id: fid,
                line: i.line.map_or(0, i64::from),
                column: 0,
            });
        }
        let fid = self.function(&name, f.file.as_deref());
        lines.push(Line {
            function_id: fid,
            line: f.line.map_or(0, i64::from),
            column: f.column.map_or(0, i64::from),
        });
        let (mapping_id, address) = match (&f.module, f.python) {
            // A Python frame's address is its code object's: no binary's.
            (Some(m), false) => {
                let id = self.mapping(m, f.addr, f.module_offset);
                let m = &mut self.p.mapping[id as usize - 1];
                m.has_filenames |= f.file.is_some();
                m.has_line_numbers |= f.line.is_some();
                m.has_inline_frames |= !f.inlined.is_empty();
                (id, f.addr)
            }
            _ => (0, if f.python { 0 } else { f.addr }),
        };
        self.location(key, mapping_id, address, lines)
    }

    /// The location of a kernel frame.
    fn kernel(&mut self, f: &Frame) -> u64 {
        let name = f
            .function
            .clone()
            .unwrap_or_else(|| format!("{:#x}", f.addr));
        let key = format!("[k]\0{:x}\0{name}", f.addr);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let fid = self.function(&name, None);
        let mapping_id = self.mapping(KERNEL, f.addr, None);
        let line = Line {
            function_id: fid,
            line: 0,
            column: 0,
        };
        self.location(key, mapping_id, f.addr, vec![line])
    }

    /// A location that is no code address: a placeholder such as `[no
    /// user stack]`, or a function known by name only.
    fn named(&mut self, name: &str) -> u64 {
        let key = format!("[named]\0{name}");
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let fid = self.function(name, None);
        let line = Line {
            function_id: fid,
            line: 0,
            column: 0,
        };
        self.location(key, 0, 0, vec![line])
    }

    fn location(&mut self, key: String, mapping_id: u64, address: u64, line: Vec<Line>) -> u64 {
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(Location {
            id,
            mapping_id,
            address,
            line,
        });
        self.locations.insert(key, id);
        id
    }

    /// The locations of a stack: kernel frames (innermost first), then the
    /// user frames (innermost first); `[no user stack]` when there are
    /// none of either.
    fn stack(&mut self, kernel: &[Frame], user: &[Frame]) -> Vec<u64> {
        let mut ids: Vec<u64> = kernel.iter().map(|f| self.kernel(f)).collect();
        ids.extend(user.iter().map(|f| self.frame(f)));
        if ids.is_empty() {
            ids.push(self.named("[no user stack]"));
        }
        ids
    }

    fn label_str(&mut self, key: &str, value: &str) -> Label {
        Label {
            key: self.string(key),
            str: self.string(value),
            num: 0,
            num_unit: 0,
        }
    }

    fn label_num(&mut self, key: &str, value: i64) -> Label {
        Label {
            key: self.string(key),
            str: 0,
            num: value,
            num_unit: 0,
        }
    }

    fn sample(&mut self, location_id: Vec<u64>, value: Vec<i64>, label: Vec<Label>) {
        self.p.sample.push(Sample {
            location_id,
            value,
            label,
        });
    }

    fn finish(mut self, duration_ns: u64, warnings: &[String]) -> Profile {
        for m in self
            .p
            .mapping
            .iter_mut()
            .filter(|m| m.memory_start == u64::MAX)
        {
            m.memory_start = 0;
        }
        self.p.duration_nanos = clamp(duration_ns);
        for w in warnings {
            self.comment(w);
        }
        self.p
    }
}

/// A frame's function name: demangled, else module+offset, else the
/// address (as the folded stacks name it).
fn frame_name(f: &Frame) -> String {
    match (&f.function, &f.module, f.module_offset) {
        (Some(func), _, _) => func.clone(),
        (None, Some(m), Some(off)) => {
            let base = m.rsplit('/').next().unwrap_or(m);
            format!("{base}+{off:#x}")
        }
        _ => format!("{:#x}", f.addr),
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Writes `p` gzipped, as pprof files are.
fn write(p: &Profile, w: &mut dyn Write) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())?;
    gz.finish()?;
    Ok(())
}

/// The profile of `rip-probe offcpu`: per stack, the periods off the CPU
/// (`periods/count`) and their time (`offcpu/nanoseconds`, shown by
/// default); labels `state` (blocked or preempted), `threads` (how many
/// threads the stack was seen in) and `snap` (the last snap).
pub fn offcpu_profile(r: &OffCpuReport, build_ids: &BuildIds) -> Profile {
    let mut b = Builder::new(
        &r.process,
        &[("periods", "count"), ("offcpu", "nanoseconds")],
        "offcpu",
        build_ids,
    );
    for s in &r.stacks {
        let locs = b.stack(&s.kernel_stack, &s.frames);
        let mut labels = vec![
            b.label_str("state", if s.preempted { "preempted" } else { "blocked" }),
            b.label_num("threads", s.tids.len() as i64),
        ];
        if let Some(snap) = &s.snap {
            labels.push(b.label_str("snap", &snap.describe()));
        }
        b.sample(locs, vec![clamp(s.count), clamp(s.off_cpu_ns)], labels);
    }
    b.finish(r.window_ns, &r.warnings)
}

/// The profile of `rip-probe --pid N`: one sample per thread, as Go's
/// goroutine profile has one per goroutine (`threads/count`), with the
/// time it has been blocked (`blocked/nanoseconds`; a lower bound where
/// the report says so, label `blocked=at least`); labels `state`,
/// `syscall`, `comm` and `tid`. Its stack is the kernel's (when taken),
/// then the user stack, else its last location.
///
/// A Go program's goroutines are samples beside the threads, one per
/// goroutine (`goroutines/count`, with how long it has waited at least,
/// `waiting/nanoseconds`): its stack (a goroutine on a thread has none of
/// its own: its location, else `[no user stack]`), labels `goroutine`
/// (its id), `state` (`running`, `runnable`, `waiting`, `syscall`),
/// `wait_reason` in the runtime's words, `tid` on a thread, and its
/// pprof labels as the program set them.
///
/// The other runtimes' coroutines (asyncio tasks, librip coroutines and
/// tokio tasks) are samples of their own, one per task (`tasks/count`,
/// with how long it has been idle, `idle/nanoseconds`, where the runtime
/// records it: asyncio does not): its stack (an asyncio task's await
/// chain, innermost first; else its last snap), labels `task` (its id),
/// `origin`, `name`, `state` (`polling`, `idle`, `exited`), `tid` while a
/// thread polls it, and `awaits` (the address of the future an asyncio
/// task awaits, so tasks waiting on one future can be focused on
/// together).
///
/// Each kind of sample holds 0 in the other kinds' values, so each
/// value's total stays its own.
pub fn threads_profile(r: &Report, build_ids: &BuildIds) -> Profile {
    let goroutines: Vec<_> = r
        .tasks
        .iter()
        .filter_map(|t| t.go.as_ref().map(|g| (t, g)))
        .collect();
    let others: Vec<_> = r.tasks.iter().filter(|t| t.go.is_none()).collect();
    let mut types = vec![("threads", "count"), ("blocked", "nanoseconds")];
    let go_at = types.len();
    if !goroutines.is_empty() {
        types.extend([("goroutines", "count"), ("waiting", "nanoseconds")]);
    }
    let tasks_at = types.len();
    if !others.is_empty() {
        types.extend([("tasks", "count"), ("idle", "nanoseconds")]);
    }
    // A sample's values: `count` and `ns` at `at`, 0 elsewhere.
    let values = |at: usize, count: i64, ns: i64| {
        let mut v = vec![0; types.len()];
        v[at] = count;
        v[at + 1] = ns;
        v
    };
    let mut b = Builder::new(&r.process, &types, "threads", build_ids);
    for t in &r.threads {
        let user: Vec<Frame> = match (&t.location, t.frames.is_empty()) {
            (Some(l), true) => vec![l.frame.clone()],
            _ => t.frames.to_vec(),
        };
        let locs = b.stack(&t.kernel_stack, &user);
        let mut labels = vec![
            b.label_str("state", t.state.as_str()),
            b.label_str("comm", &t.name),
            b.label_num("tid", clamp(t.tid)),
        ];
        if let Some(s) = &t.syscall {
            labels.push(b.label_str("syscall", &s.name));
        }
        if let Some(bl) = &t.blocked {
            labels.push(b.label_str("blocked", if bl.exact { "exact" } else { "at least" }));
        }
        let blocked = t.blocked.as_ref().map_or(0, |bl| clamp(bl.ns));
        b.sample(locs, values(0, 1, blocked), labels);
    }
    // Goroutines and tasks share stacks by the thousand: each made its
    // locations once.
    let mut stacks: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut shared = |b: &mut Builder<'_>, frames: &std::sync::Arc<[Frame]>, t: &Coroutine| match (
        frames.is_empty(),
        &t.location,
    ) {
        (true, Some(l)) => b.stack(&[], std::slice::from_ref(&l.frame)),
        (true, None) => b.stack(&[], &[]),
        (false, _) => stacks
            .entry(frames.as_ptr() as *const u8 as usize)
            .or_insert_with(|| b.stack(&[], frames))
            .clone(),
    };
    for (t, g) in goroutines {
        let locs = shared(&mut b, &g.stack, t);
        let mut labels = vec![
            b.label_num("goroutine", clamp(t.id)),
            b.label_str("state", g.status.as_str()),
        ];
        if let Some(w) = &g.wait_reason {
            labels.push(b.label_str("wait_reason", w));
        }
        if let Some(tid) = t.polling_tid {
            labels.push(b.label_num("tid", i64::from(tid)));
        }
        for l in g.labels.iter() {
            labels.push(b.label_str(&l.key, &l.value));
        }
        let waited = t.idle_ns.or(t.polling_ns).map_or(0, clamp);
        b.sample(locs, values(go_at, 1, waited), labels);
    }
    let no_frames: std::sync::Arc<[Frame]> = std::sync::Arc::from(Vec::new());
    for t in others {
        let frames = t.python.as_ref().map_or(&no_frames, |p| &p.frames);
        let locs = shared(&mut b, frames, t);
        let mut labels = vec![
            b.label_num("task", clamp(t.id)),
            b.label_str("origin", t.origin.as_str()),
            b.label_str("state", t.state.as_str()),
        ];
        if !t.name.is_empty() {
            labels.push(b.label_str("name", &t.name));
        }
        if let Some(tid) = t.polling_tid {
            labels.push(b.label_num("tid", i64::from(tid)));
        }
        if let Some(a) = t.python.as_ref().and_then(|p| p.awaits.as_ref()) {
            for addr in &a.addrs {
                labels.push(b.label_str("awaits", &format!("{addr:#x}")));
            }
        }
        let idle = t.idle_ns.map_or(0, clamp);
        b.sample(locs, values(tasks_at, 1, idle), labels);
    }
    b.finish(r.window_ns, &r.warnings)
}

/// The profile of `rip-probe calls`: per function, its calls
/// (`calls/count`) and their time (`time/nanoseconds`: the mean of the
/// timed calls times their number, shown by default), at the function's
/// entry; and each slow call listed by the report with its caller's stack
/// (`slow/nanoseconds`, the other values 0 so totals stay true).
pub fn calls_profile(r: &CallsReport, build_ids: &BuildIds) -> Profile {
    let mut b = Builder::new(
        &r.process,
        &[
            ("calls", "count"),
            ("time", "nanoseconds"),
            ("slow", "nanoseconds"),
        ],
        "time",
        build_ids,
    );
    for f in &r.functions {
        let entry = Frame {
            function: Some(f.function.clone()),
            module: Some(f.module.clone()),
            module_offset: Some(f.module_offset),
            ..Frame::default()
        };
        let loc = b.frame(&entry);
        let time = f.mean_ns.unwrap_or(0).saturating_mul(f.timed);
        let labels = vec![b.label_num("timed", clamp(f.timed))];
        b.sample(vec![loc], vec![clamp(f.calls), clamp(time), 0], labels);
    }
    for s in &r.outliers {
        let mut locs = vec![b.named(&s.function)];
        locs.extend(s.stack.iter().map(|f| b.frame(f)));
        let labels = vec![b.label_num("tid", i64::from(s.tid))];
        b.sample(locs, vec![0, 0, clamp(s.duration_ns)], labels);
    }
    b.finish(r.window_ns, &r.warnings)
}

/// The profile of `rip-probe leaks --pid N`: what is still held at the end
/// of the window, by acquiring stack: `inuse_objects/count` (allocations,
/// descriptors, mappings, segments) and `inuse_space/bytes` (heap and
/// mapped bytes; 0 for descriptors), shown by default; labels `kind`,
/// `fd_kind` and `call`. When the report has what was acquired in the
/// window ([`LeaksReport::allocated`]), also `alloc_objects/count` and
/// `alloc_space/bytes` (released since or not), first, in the order of
/// Go's heap profiles: each stack's acquisitions are samples of their
/// own, whose `inuse_*` are 0, as the outstanding ones' `alloc_*` are.
pub fn leaks_profile(r: &LeaksReport, build_ids: &BuildIds) -> Profile {
    let types: &[(&str, &str)] = match r.allocated {
        Some(_) => &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        None => &[("inuse_objects", "count"), ("inuse_space", "bytes")],
    };
    let mut b = Builder::new(&r.process, types, "inuse_space", build_ids);
    let alloc = r.allocated.is_some();
    for a in r.allocated.iter().flatten() {
        let locs = b.stack(&[], &a.frames);
        let labels = vec![
            b.label_str("kind", a.kind.name()),
            b.label_str("call", &a.call),
        ];
        b.sample(locs, vec![clamp(a.count), clamp(a.bytes), 0, 0], labels);
    }
    for s in &r.stacks {
        let locs = b.stack(&[], &s.frames);
        let mut labels = vec![
            b.label_str("kind", s.kind.name()),
            b.label_str("call", &s.call),
        ];
        if let Some(k) = s.fd_kind {
            labels.push(b.label_str("fd_kind", k.name()));
        }
        let bytes = match s.kind {
            ResourceKind::Fd => 0,
            _ => clamp(s.bytes),
        };
        let mut values = vec![clamp(s.count), bytes];
        if alloc {
            values.splice(0..0, [0, 0]);
        }
        b.sample(locs, values, labels);
    }
    b.finish(r.window_ns, &r.warnings)
}

/// Writes `rip-probe offcpu`'s report as a gzipped pprof profile (see
/// [`offcpu_profile`]).
pub fn offcpu_pprof(r: &OffCpuReport, build_ids: &BuildIds, w: &mut dyn Write) -> io::Result<()> {
    write(&offcpu_profile(r, build_ids), w)
}

/// Writes `rip-probe --pid N`'s report as a gzipped pprof profile (see
/// [`threads_profile`]).
pub fn threads_pprof(r: &Report, build_ids: &BuildIds, w: &mut dyn Write) -> io::Result<()> {
    write(&threads_profile(r, build_ids), w)
}

/// Writes `rip-probe calls`'s report as a gzipped pprof profile (see
/// [`calls_profile`]).
pub fn calls_pprof(r: &CallsReport, build_ids: &BuildIds, w: &mut dyn Write) -> io::Result<()> {
    write(&calls_profile(r, build_ids), w)
}

/// Writes `rip-probe leaks --pid N`'s report as a gzipped pprof profile
/// (see [`leaks_profile`]).
pub fn leaks_pprof(r: &LeaksReport, build_ids: &BuildIds, w: &mut dyn Write) -> io::Result<()> {
    write(&leaks_profile(r, build_ids), w)
}

/// The modules a set of frames is in, for the command to read their
/// build-ids.
pub fn modules<'f>(frames: impl IntoIterator<Item = &'f Frame>) -> Vec<String> {
    let mut m: Vec<String> = frames
        .into_iter()
        .filter(|f| !f.python)
        .filter_map(|f| f.module.clone())
        .collect();
    m.sort();
    m.dedup();
    m
}

#[cfg(test)]
mod tests {
    use std::{io::Read, sync::Arc};

    use super::*;
    use crate::model::{
        AsyncioState, CoroutineState, GoWaitKind, GoWaitsOn, InlinedFrame, Origin, ProcessInfo,
        PythonTask,
        offcpu::{OffCpuStack, Periods},
    };

    fn frame(addr: u64, function: &str, line: u32) -> Frame {
        Frame {
            addr,
            function: Some(function.into()),
            file: Some("/src/app.c".into()),
            line: Some(line),
            module: Some("/usr/bin/app".into()),
            module_offset: Some(addr - 0x40_0000),
            ..Frame::default()
        }
    }

    fn report() -> OffCpuReport {
        let mut outer = frame(0x40_1200, "main", 40);
        outer.inlined.push(InlinedFrame {
            function: "serve".into(),
            file: Some("/src/serve.h".into()),
            line: Some(7),
        });
        let leaf = frame(0x40_1000, "nap", 12);
        let stack = |ns, count, preempted, frames: Vec<Frame>| OffCpuStack {
            off_cpu_ns: ns,
            count,
            preempted,
            tids: vec![11, 12],
            frames: Arc::from(frames),
            python_note: None,
            unwound: true,
            kernel_stack: Arc::from(Vec::new()),
            snap: None,
        };
        OffCpuReport {
            schema: crate::model::SCHEMA_VERSION,
            process: ProcessInfo {
                pid: 10,
                exe: Some("/usr/bin/app".into()),
                comm: Some("app".into()),
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            window_ns: 1_000_000_000,
            min_block_ns: 1000,
            kernel_stacks: false,
            total_ns: 700,
            preempted_ns: 200,
            short: Periods::default(),
            stacks: vec![
                stack(500, 3, false, vec![leaf, outer.clone()]),
                stack(200, 2, true, vec![outer]),
                stack(0, 1, false, Vec::new()),
            ],
            threads: Vec::new(),
            snaps: Vec::new(),
            warnings: vec!["a note".into()],
        }
    }

    /// The bytes written are a gzipped profile.proto that decodes to the
    /// same message, holding the report's figures, stacks leaf first,
    /// inlined functions before the function they are in, and the
    /// binary's build-id.
    #[test]
    fn a_profile_round_trips_through_gzip_and_prost() {
        let ids: BuildIds = [("/usr/bin/app".to_string(), "abcd".to_string())].into();
        let r = report();
        let mut bytes = Vec::new();
        offcpu_pprof(&r, &ids, &mut bytes).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        let p = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!(p, offcpu_profile(&r, &ids));
        assert_eq!(p.encode_to_vec(), raw, "byte for byte");
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("periods", "count"), ("offcpu", "nanoseconds")]);
        assert_eq!(s(p.default_sample_type), "offcpu");
        assert_eq!(p.duration_nanos, 1_000_000_000);
        assert_eq!(
            p.comment.iter().map(|&c| s(c)).collect::<Vec<_>>(),
            ["a note"]
        );
        let values: Vec<Vec<i64>> = p.sample.iter().map(|x| x.value.clone()).collect();
        assert_eq!(values, [vec![3, 500], vec![2, 200], vec![1, 0]]);
        // Leaf first: nap, then main with serve inlined in it.
        let names_at = |id: u64| -> Vec<(String, i64)> {
            let l = &p.location[id as usize - 1];
            assert_eq!(l.id, id);
            l.line
                .iter()
                .map(|line| {
                    let f = &p.function[line.function_id as usize - 1];
                    (s(f.name).to_string(), line.line)
                })
                .collect()
        };
        let first = &p.sample[0].location_id;
        assert_eq!(names_at(first[0]), [("nap".to_string(), 12)]);
        assert_eq!(
            names_at(first[1]),
            [("serve".to_string(), 7), ("main".to_string(), 40)]
        );
        // The same frame is one location.
        assert_eq!(p.sample[1].location_id, vec![first[1]]);
        assert_eq!(p.location[first[0] as usize - 1].address, 0x40_1000);
        // No stack: a placeholder, so the time still shows.
        assert_eq!(names_at(p.sample[2].location_id[0])[0].0, "[no user stack]");
        let m = &p.mapping[0];
        assert_eq!(s(m.filename), "/usr/bin/app");
        assert_eq!(s(m.build_id), "abcd");
        assert_eq!(m.memory_start, 0x40_0000);
        assert!(m.memory_limit > 0x40_1200);
        assert!(m.has_functions && m.has_filenames && m.has_line_numbers && m.has_inline_frames);
        let labels: Vec<(&str, &str)> = p.sample[1]
            .label
            .iter()
            .filter(|l| l.str != 0)
            .map(|l| (s(l.key), s(l.str)))
            .collect();
        assert_eq!(labels, [("state", "preempted")]);
    }
    fn task(id: u64, origin: Origin, frames: &Arc<[Frame]>, idle_ns: Option<u64>) -> Coroutine {
        Coroutine {
            origin,
            id,
            generation: 0,
            name: format!("t{id}"),
            state: CoroutineState::Idle,
            polling_tid: None,
            polls: 0,
            idle_ns,
            polling_ns: None,
            lower_bound: false,
            since_unix_ns: None,
            created_unix_ns: None,
            location: Some(crate::model::Location {
                source: crate::model::LocationSource::Ring,
                seq: Some(1),
                ago_ns: None,
                frame: frame(0x40_1300, "snap_site", 3),
            }),
            history: Vec::new(),
            go: None,
            python: (origin == Origin::Asyncio).then(|| PythonTask {
                state: AsyncioState::Pending,
                frames: frames.clone(),
                awaits: Some(GoWaitsOn {
                    kind: GoWaitKind::Future,
                    addrs: vec![0xf00],
                    name: None,
                }),
                changing: false,
            }),
        }
    }

    /// `--pid --pprof` of a process with asyncio and tokio tasks: one
    /// `tasks` sample per task beside the threads' values (0 there), its
    /// stack the await chain (an asyncio task) or its last snap (a
    /// tokio task), labelled with its runtime, name, state and the future
    /// it awaits; shared chains made into locations once.
    #[test]
    fn tasks_are_samples_of_their_own_in_the_threads_profile() {
        let chain: Arc<[Frame]> = Arc::from(vec![
            frame(0x40_1000, "Event.wait", 9),
            frame(0x40_1100, "wait_event", 4),
        ]);
        let none: Arc<[Frame]> = Arc::from(Vec::new());
        let mut r = crate::model::tests_support::report(Vec::new());
        r.tasks = vec![
            task(1, Origin::Asyncio, &chain, None),
            task(2, Origin::Asyncio, &chain, None),
            task(3, Origin::Tokio, &none, Some(5_000)),
        ];
        let p = threads_profile(&r, &BuildIds::new());
        let s = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("threads", "count"),
                ("blocked", "nanoseconds"),
                ("tasks", "count"),
                ("idle", "nanoseconds")
            ]
        );
        let values: Vec<Vec<i64>> = p.sample.iter().map(|x| x.value.clone()).collect();
        assert_eq!(
            values,
            [vec![0, 0, 1, 0], vec![0, 0, 1, 0], vec![0, 0, 1, 5_000]]
        );
        assert_eq!(p.sample[0].location_id, p.sample[1].location_id);
        assert_eq!(p.sample[0].location_id.len(), 2);
        let leaf = |x: &Sample| {
            let l = &p.location[x.location_id[0] as usize - 1];
            s(p.function[l.line[0].function_id as usize - 1].name).to_string()
        };
        assert_eq!(leaf(&p.sample[0]), "Event.wait");
        assert_eq!(leaf(&p.sample[2]), "snap_site");
        let labels = |x: &Sample| -> Vec<(String, String)> {
            x.label
                .iter()
                .map(|l| {
                    let v = if l.str != 0 {
                        s(l.str).to_string()
                    } else {
                        l.num.to_string()
                    };
                    (s(l.key).to_string(), v)
                })
                .collect()
        };
        let want = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            labels(&p.sample[0]),
            want(&[
                ("task", "1"),
                ("origin", "asyncio"),
                ("state", "idle"),
                ("name", "t1"),
                ("awaits", "0xf00")
            ])
        );
        assert_eq!(
            labels(&p.sample[2]),
            want(&[
                ("task", "3"),
                ("origin", "tokio"),
                ("state", "idle"),
                ("name", "t3")
            ])
        );
    }
}
