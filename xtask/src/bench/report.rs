//! `docs/BENCHMARKS.md`: the machine, the versions, the exact commands and
//! the tables, rendered from one run's results; and the README's headline.

use std::{fmt::Write, time::Duration};

use super::{
    rows::{Measured, Tracer},
    scale::{self, ScaleResult},
    stats::thousands,
    suites::REFERENCE,
};

/// Everything one `cargo xtask bench` run found.
pub struct Report {
    /// The command that produced it.
    pub command: String,
    /// When it ran (UTC).
    pub date: String,
    /// How long it took.
    pub elapsed: Duration,
    /// CPU, cores, memory, kernel.
    pub machine: Vec<(String, String)>,
    /// Tool versions.
    pub versions: Vec<(String, String)>,
    /// The peers' Debian packages: version, or why not available.
    pub peers: Vec<(String, Result<String, String>)>,
    /// The commands that built the workloads.
    pub builds: Vec<String>,
    /// Measured rounds per row.
    pub rounds: usize,
    /// Aimed-at duration of a run, in ms.
    pub target_ms: f64,
    /// Seed of the shuffles.
    pub seed: u64,
    /// Per-call rows.
    pub per_call: Vec<Measured>,
    /// The two callgrind call counts and one of the commands.
    pub callgrind: (u64, u64, String),
    /// Overhead rows.
    pub overhead: Vec<Measured>,
    /// Scale runs (or why one failed).
    pub scale: Vec<Result<ScaleResult, String>>,
    /// The tokio workload's idle tasks (or why it failed).
    pub tokio: Result<scale::TokioResult, String>,
    /// The user stacks comparison (or why it failed).
    pub stacks: Result<super::stacks::StacksResult, String>,
    /// Reading 100,000 live slots (or why it failed).
    pub reading: Result<super::reading::ReadingResult, String>,
    /// The section of many at once (or why it failed).
    pub bulk: Result<String, String>,
    /// The section of a Go program's goroutines (or why it failed).
    pub goroutines: Result<String, String>,
    /// The allocation sampler's section (or why it failed).
    pub alloc: Result<String, String>,
    /// Notes on how the run went (a daemon started, a run skipped).
    pub notes: Vec<String>,
}

/// Nanoseconds with the precision they deserve.
pub fn ns(v: f64) -> String {
    if v.abs() < 10.0 {
        format!("{v:.2}")
    } else if v.abs() < 100.0 {
        format!("{v:.1}")
    } else {
        let s = thousands(v.abs().round() as u64);
        if v < 0.0 { format!("-{s}") } else { s }
    }
}

/// A ratio: `×1.07`, `×12.3`, `×1,688`.
pub fn ratio(v: f64) -> String {
    if v < 10.0 {
        format!("×{v:.2}")
    } else if v < 100.0 {
        format!("×{v:.1}")
    } else {
        format!("×{}", thousands(v.round() as u64))
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / 1024.0)
}

fn code(s: &str) -> String {
    format!("`{}`", s.replace('|', "\\|"))
}

fn median_of<'a>(rows: &'a [Measured], id: &str) -> Option<(&'a Measured, f64)> {
    let m = rows.iter().find(|m| m.row.id == id)?;
    Some((m, m.median()?))
}

/// The per-call result cells of a row: median and spread, or why none.
fn time_cells(m: &Measured) -> (String, String) {
    match (&m.failure, m.median(), super::stats::range(&m.per_call)) {
        (Some(f), _, _) => (f.clone(), String::new()),
        (None, Some(med), Some((lo, hi))) => {
            (format!("**{}**", ns(med)), format!("{}–{}", ns(lo), ns(hi)))
        }
        _ => ("no result".into(), String::new()),
    }
}

/// A row's involuntary context switches per run: median (min–max).
fn switch_cell(m: &Measured) -> String {
    match (
        super::stats::median(&m.switches),
        super::stats::range(&m.switches),
    ) {
        (Some(v), Some((lo, hi))) if m.failure.is_none() => format!(
            "{} ({}–{})",
            thousands(v as u64),
            thousands(lo as u64),
            thousands(hi as u64)
        ),
        _ => String::new(),
    }
}

/// The tracer troubles of `rows` after runs whose measurements stand.
fn troubles(s: &mut String, rows: &[Measured]) {
    for m in rows.iter().filter(|m| !m.troubles.is_empty()) {
        let runs = m.per_call.len() + 1;
        let _ = writeln!(
            s,
            "\n{} ({}): after {} of {runs} runs (warm-up included), {}.",
            m.row.label,
            m.row.mode.unwrap_or("per call"),
            m.troubles.len(),
            m.troubles.join("; ")
        );
    }
}

impl Report {
    /// The median ns per call of the reference row (librip's C snap).
    fn reference(&self) -> Option<f64> {
        median_of(&self.per_call, REFERENCE).map(|(_, v)| v)
    }

    /// The whole Markdown document.
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.head(&mut s);
        self.per_call_table(&mut s);
        self.overhead_table(&mut s);
        self.scale_table(&mut s);
        scale::tokio_section(&self.tokio, &mut s);
        super::stacks::render(&self.stacks, &mut s);
        super::reading::render(&self.reading, &mut s);
        match &self.bulk {
            Ok(section) => s.push_str(section),
            Err(e) => s.push_str(&format!("## Many at once\n\nNot measured: {e}\n")),
        }
        s.push('\n');
        match &self.goroutines {
            Ok(section) => s.push_str(section),
            Err(e) => s.push_str(&format!(
                "## Every goroutine of a Go program\n\nNot measured: {e}\n"
            )),
        }
        s.push('\n');
        match &self.alloc {
            Ok(section) => s.push_str(section),
            Err(e) => s.push_str(&format!(
                "## Heap tracing and the allocation sampler\n\nNot measured: {e}\n"
            )),
        }
        s.push('\n');
        self.commands(&mut s);
        self.method(&mut s);
        s
    }

    fn head(&self, s: &mut String) {
        let _ = writeln!(s, "# Benchmarks\n");
        let _ = writeln!(
            s,
            "Generated by `{}` on {} in {:.0} s; every number and command below \
             comes from that run. Regenerate with `cargo xtask bench` \
             (`--quick` for a shorter run).\n",
            self.command,
            self.date,
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(s, "## Machine\n\n| | |\n| --- | --- |");
        for (k, v) in &self.machine {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        let _ = writeln!(s, "\n## Versions\n\n| tool | version |\n| --- | --- |");
        for (k, v) in &self.versions {
            let _ = writeln!(s, "| {k} | {} |", code(v));
        }
        let _ = writeln!(s, "\nDebian packages of the peers:\n");
        let _ = writeln!(s, "| package | version |\n| --- | --- |");
        for (p, v) in &self.peers {
            let v = match v {
                Ok(v) => v.clone(),
                Err(e) => format!("not available: {e}"),
            };
            let _ = writeln!(s, "| {p} | {v} |");
        }
        s.push('\n');
    }

    fn per_call_table(&self, s: &mut String) {
        let reference = self.reference();
        let base = median_of(&self.per_call, "none").map(|(_, v)| v);
        let _ = writeln!(
            s,
            "## Recording that f ran: cost per call\n\n\
             The SystemTap talk's loop: a noinline `f()` called N times \
             (`tests/bench/loop.c`, and `tests/src/bin/rip-bench-loop.rs` for \
             Rust), each call recorded one way. Time per call of f, loop \
             included, measured by the workload itself around the loop \
             (startup and attaching excluded); median of {} interleaved \
             rounds, rows in a new random order each round. \"× snap\" is the \
             ratio to the librip snap from C; \"added\" is the median minus \
             the no-tracing row's; the last column counts the involuntary \
             context switches the workload suffered during the loop \
             (`getrusage`).\n",
            self.rounds
        );
        let _ = writeln!(
            s,
            "| way of recording | calls per run | median ns per call | min–max | × snap | added ns | instructions per call | involuntary switches per run, median (min–max) |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for m in &self.per_call {
            let (med, spread) = time_cells(m);
            let v = m.median();
            let x = match (v, reference) {
                (Some(v), Some(r)) if r > 0.0 => ratio(v / r),
                _ => String::new(),
            };
            let added = match (v, base) {
                (Some(v), Some(b)) if m.row.id != "none" => ns(v - b),
                _ => String::new(),
            };
            let instr = match &m.instructions {
                Some(Ok(i)) => format!("{i:.2}"),
                Some(Err(e)) => format!("n/a: {e}"),
                None => "—".into(),
            };
            let calls = if m.failure.is_some() {
                String::new()
            } else {
                thousands(m.calls)
            };
            let _ = writeln!(
                s,
                "| {} | {calls} | {med} | {spread} | {x} | {added} | {instr} | {} |",
                m.row.label,
                switch_cell(m)
            );
        }
        let _ = writeln!(
            s,
            "\n![per-call cost, log scale](bench-per-call.svg)\n\n\
             Instructions per call: callgrind counting inside the loop function \
             (`--toggle-collect=run_loop`) for {} and {} calls, \
             (I({1}) − I({0})) / ({1} − {0}); \"—\" where a tracer outside the \
             process does the work (callgrind cannot count it).\n",
            thousands(self.callgrind.0),
            thousands(self.callgrind.1)
        );
        let counted: Vec<String> = self
            .per_call
            .iter()
            .filter(|m| m.failure.is_none())
            .filter_map(|m| {
                let c = m.counted?;
                Some(format!(
                    "{} counted {} of {} calls",
                    m.row.label,
                    thousands(c),
                    thousands(m.calls)
                ))
            })
            .collect();
        if !counted.is_empty() {
            let _ = writeln!(
                s,
                "Check that the probes fired, last run: {}.\n",
                counted.join("; ")
            );
        }
        troubles(s, &self.per_call);
    }

    /// The overhead section alone (`cargo xtask bench --overhead-only`).
    pub fn overhead_section(&self) -> String {
        let mut s = String::new();
        self.overhead_table(&mut s);
        s
    }

    fn overhead_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "## What rip-probe costs the process it watches\n\n\
             A loop of `getppid()` (a syscall that does nothing), a ping-pong \
             of one byte between two threads over two pipes, both threads \
             pinned to CPU 0 (each round trip is two context switches), and a \
             turn passed between four threads through one mutex and a \
             condition variable each (every pass is a futex wait and a wake, \
             about four futex calls): `tests/bench/overhead.c`. Each is run \
             untraced and with a tracer \
             attached (and attached before the measured part starts), \
             interleaved, median of {} rounds. rip-probe `--pid` attaches its \
             sched_switch tracepoint program and no syscall tracepoint; at each \
             switch of a target thread the program updates that thread's entry \
             in a table (time, state); it takes no stack and wakes nobody. \
             `rip-probe locks` attaches to sys_enter_futex and sys_exit_futex \
             (filtered to the process in the kernel) and counts per futex word \
             in hash maps (waits, wakes, a log2 histogram, per waiting thread, \
             per waking stack); the bpftrace row is the same count written as \
             a bpftrace script (`hist()` of the waits per futex word, wakes \
             summed per word; its program is in the commands below). \
             `rip-probe offcpu` attaches its own sched_switch program: at each \
             switch of a target thread it reads the user registers and the \
             return addresses user space has taught it to hash (rip-ebpf's \
             `offcpu.rs` tells how) and adds the time off CPU to a \
             hash map entry per (thread, stack); BCC's offcputime (the \
             libbpf-tools build; BCC's Python tools need kernel headers this \
             kernel lacks) does the same with `bpf_get_stackid` user and \
             kernel stacks (frame pointers: it cannot unwind code built \
             without them). The last \
             column counts \
             the involuntary context switches the workload suffered during its \
             measured part (`getrusage`).\n",
            self.rounds
        );
        let _ = writeln!(
            s,
            "| workload | tracer | operations per run | median ns per operation | min–max | × untraced | involuntary switches per run, median (min–max) |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: |"
        );
        for m in &self.overhead {
            let (med, spread) = time_cells(m);
            let base = self
                .overhead
                .iter()
                .find(|b| b.row.mode == m.row.mode && b.row.tracer == Tracer::None)
                .and_then(Measured::median);
            let x = match (m.median(), base) {
                (Some(v), Some(b)) if b > 0.0 => ratio(v / b),
                _ => String::new(),
            };
            let what = match m.row.mode {
                Some("getppid") => "getppid loop (per call)",
                Some("mutex") => "4 threads passing a turn through a mutex (per pass)",
                _ => "ping-pong, one CPU (per round trip)",
            };
            let switches = switch_cell(m);
            let _ = writeln!(
                s,
                "| {what} | {} | {} | {med} | {spread} | {x} | {switches} |",
                m.row.label,
                thousands(m.calls)
            );
        }
        troubles(s, &self.overhead);
        if let (Some(locks), Some(bt)) = (
            self.slowdown("mutex-rip-probe-locks", "mutex"),
            self.slowdown("mutex-bpftrace", "mutex"),
        ) {
            let _ = writeln!(
                s,
                "\nFutex contention counted per lock on the mutex workload: \
                 `rip-probe locks` {}, bpftrace {}.",
                ratio(locks),
                ratio(bt)
            );
        }
        if let (Some(rip), Some(kernel), Some(bcc)) = (
            self.slowdown("pingpong-rip-probe-offcpu", "pingpong"),
            self.slowdown("pingpong-rip-probe-offcpu-kernel", "pingpong"),
            self.slowdown("pingpong-offcputime", "pingpong"),
        ) {
            let _ = writeln!(
                s,
                "\nOff-CPU time summed by stack on the one-CPU ping-pong: \
                 `rip-probe offcpu` {} (user stacks), {} with kernel stacks; \
                 BCC's offcputime {} (user and kernel stacks). The kernel \
                 stack walk (`bpf_get_stackid`) is most of the cost of both.",
                ratio(rip),
                ratio(kernel),
                ratio(bcc)
            );
        }
        if let Some(r) = self.slowdown("getppid-rip-probe", "getppid") {
            let _ = writeln!(
                s,
                "\nRequirement: a getppid loop slowed at most ×1.1 while rip-probe \
                 is attached. Measured: {} — {}.",
                ratio(r),
                if r <= 1.1 { "met" } else { "NOT met" }
            );
        }
        s.push('\n');
    }

    /// The ratio of row `id`'s median to row `base`'s.
    fn slowdown(&self, id: &str, base: &str) -> Option<f64> {
        let (_, v) = median_of(&self.overhead, id)?;
        let (_, b) = median_of(&self.overhead, base)?;
        (b > 0.0).then(|| v / b)
    }

    fn scale_table(&self, s: &mut String) {
        scale_section(&self.scale, s);
    }

    fn commands(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "## Exact commands\n\nRun from the workspace root; `PID` is the \
             workload's pid, `SESSION` a fresh session name per run.\n\nBuilds:\n\n```"
        );
        for b in &self.builds {
            let _ = writeln!(s, "{b}");
        }
        let _ = writeln!(
            s,
            "```\n\nTimed rows (one measured run each, with the calls the warm-up chose):\n"
        );
        for m in self.per_call.iter().chain(&self.overhead) {
            if m.commands.is_empty() {
                continue;
            }
            let mode = m.row.mode.map_or(String::new(), |m| format!("{m}, "));
            let _ = writeln!(s, "- {mode}{}:\n\n  ```", m.row.label);
            for c in &m.commands {
                let _ = writeln!(s, "  {c}");
            }
            let _ = writeln!(s, "  ```\n");
        }
        if self.per_call.iter().any(|m| m.row.tracer == Tracer::Gdb) {
            let _ = writeln!(
                s,
                "`target/bench/count-f.gdb`:\n\n```\n{}```\n",
                super::tracers::GDB_SCRIPT
            );
        }
        let _ = writeln!(
            s,
            "Instruction counts, e.g.:\n\n```\n{}\n```\n\nScale (each N):\n\n```",
            self.callgrind.2
        );
        let server = scale::server_args("target/release/rip-demo-server", "N", "RING");
        let _ = writeln!(s, "{}", server.join(" "));
        let _ = writeln!(
            s,
            "RIP_PROBE_TIMING=1 {} > report.json",
            scale::rip_probe_args("target/release/rip-probe", "PID", scale::WINDOW, true).join(" ")
        );
        let _ = writeln!(
            s,
            "# each also with --no-stacks, in turn\n# 100,000 threads (kernel.pid_max, kernel.threads-max and vm.max_map_count raised for the run):\nRIP_PROBE_TIMING=1 {} > report.json",
            scale::rip_probe_args(
                "target/release/rip-probe",
                "PID",
                std::time::Duration::ZERO,
                true
            )
            .join(" ")
        );
        let _ = writeln!(
            s,
            "{}\n```\n",
            super::proc::shell_words(&scale::gdb_args("PID"))
        );
    }

    fn method(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "## Method\n\n\
             - Each workload prints `ready` and waits for a line on stdin; the \
             bench attaches the tracer, waits until it is attached (bpftrace: \
             its BEGIN probe, which runs once every probe is attached; \
             rip-probe: its `load and attach` / `attach uprobes` timing line, \
             then until its CPU time has stopped growing for {:.1} s, since \
             rip-probe parses the kernel's BTF on a second thread right after \
             attaching), then sends the line. The workload times only its \
             measured part, with CLOCK_MONOTONIC.\n\
             - A warm-up run per row sets its calls per run so that a run lasts \
             about {:.0} ms (within fixed bounds per kind of row); the overhead \
             rows with a tracer make as many operations as their untraced row. \
             Then {} rounds, each running every row once in a new random order \
             (seed {}); the tables show medians and the spread of the rounds.\n\
             - `f` is `noinline, noipa` and increments a global; the snap, \
             marker or tracepoint is its first statement. Dynamic probes \
             (uprobes, gdb) attach to `f` of the untraced build.\n\
             - rip-probe's uprobe rows: \"library\" is `rip-bench-uprobe` \
             (`tests/src/bin/`), which calls rip-probe's `KernelProbe::attach` \
             (the sched_switch program) and `attach_uprobes` (its `fn_entry` \
             uprobe on `f`) and never reads the events; \"CLI\" is \
             `target/release/rip-probe --pid PID --uprobe f`, which attaches the \
             same and is woken by the events its sched_switch program records \
             (see the involuntary switches in the overhead table).\n\
             - The LTTng session is in snapshot mode (ring buffers in memory, \
             overwritten, nothing written to disk unless a snapshot is taken).\n\
             - Per-call times of a few ns are within what code alignment and \
             the CPU's parallel execution shift from build to build (a loop \
             with a snap can run faster than one without); callgrind's \
             instruction counts are the exact measure of what a snap adds.\n\
             - The machine may have been shared with other work during the \
             run: see the load averages above and the spread column.",
            super::tracers::RIP_PROBE_QUIET.as_secs_f64(),
            self.target_ms,
            self.rounds,
            self.seed
        );
        for n in &self.notes {
            let _ = writeln!(s, "- {n}");
        }
    }

    /// One sentence of headline figures, for the README.
    pub fn headline(&self) -> String {
        let mut parts = Vec::new();
        let pc = |id: &str| median_of(&self.per_call, id).map(|(_, v)| v);
        if let Some(snap) = self.reference() {
            let mut vs = Vec::new();
            for (id, what) in [
                ("uprobe-rip-probe-lib", "an uprobe"),
                ("usdt-bpftrace", "a USDT marker under bpftrace"),
                ("gdb", "a gdb breakpoint"),
            ] {
                if let Some(v) = pc(id) {
                    vs.push(format!(
                        "{} µs with {what} ({})",
                        format_us(v),
                        ratio(v / snap)
                    ));
                }
            }
            parts.push(format!(
                "a call of a function that records itself with a librip snap \
                 takes {} ns, call and loop included, against {}",
                ns(snap),
                vs.join(", ")
            ));
        }
        if let (Some(rip), Some(bcc)) = (
            self.slowdown("pingpong-rip-probe-offcpu", "pingpong"),
            self.slowdown("pingpong-offcputime", "pingpong"),
        ) {
            parts.push(format!(
                "`rip-probe offcpu` slows a context-switch ping-pong {} \
                 (BCC's offcputime, which also walks kernel stacks: {})",
                ratio(rip),
                ratio(bcc)
            ));
        }
        if let Some(r) = self.slowdown("getppid-rip-probe", "getppid") {
            parts.push(format!(
                "rip-probe attached slows a getppid loop {}",
                ratio(r)
            ));
        }
        if let Some(r) = self.slowdown("mutex-rip-probe-locks", "mutex") {
            let bt = self
                .slowdown("mutex-bpftrace", "mutex")
                .map_or(String::new(), |b| {
                    format!(" (bpftrace counting the same: {})", ratio(b))
                });
            parts.push(format!(
                "`rip-probe locks` slows a futex-heavy workload {}{bt}",
                ratio(r)
            ));
        }
        if let Some(Ok(big)) = self.scale.iter().rev().find(|r| r.is_ok())
            && let Some(wall) = big.rip_probe.median_wall()
        {
            let gdb = big
                .gdb
                .median_wall()
                .map_or(String::new(), |g| format!(" (gdb: {})", secs(g)));
            parts.push(format!(
                "it reports {} blocked threads in {} beyond its observation window{gdb}",
                thousands(big.threads as u64),
                secs(wall.saturating_sub(big.window))
            ));
        }
        format!(
            "On the machine of the last run ({}), {}.",
            self.date,
            parts.join("; ")
        )
    }
}

fn format_us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us < 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// The scale section: the runs of each size, the requirements and the
/// phase tables of the largest runs (also what `--scale-only` prints).
pub fn scale_section(scale: &[Result<ScaleResult, String>], s: &mut String) {
    let _ = writeln!(
        s,
        "## Scale: thousands of blocked threads\n\n\
         `rip-demo-server --workers N --spinners 0`: N pool threads blocked \
         on one mutex (after a snap each), plus a few other stuck threads. \
         Time from start to exit of each tool (rip-probe observes for {} \
         before it reports, none at 100,000 threads (`--duration 0`): \
         \"beyond the window\" subtracts it), peak RSS \
         (`ru_maxrss` from `wait4` in a small helper, `tests/bench/maxrss.c`), \
         and how many of the process's threads the report \
         lists (rip-probe: tids in `--json`; gdb: `(LWP n)` headers).\n",
        secs(scale::WINDOW)
    );
    let _ = writeln!(
        s,
        "| threads | tool | runs | time to full report (median) | beyond the window | CPU, user + system (median) | peak RSS | threads listed |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in scale {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(s, "| | failed: {e} | | | | | | |");
                continue;
            }
        };
        for (tool, t, window) in [
            ("rip-probe --pid --json", &r.rip_probe, Some(r.window)),
            (
                "rip-probe --pid --json --no-stacks",
                &r.no_stacks,
                Some(r.window),
            ),
            ("gdb thread apply all bt", &r.gdb, None),
        ] {
            let threads = thousands(r.threads as u64);
            match (&t.missing, t.median_wall()) {
                (Some(m), None) => {
                    let _ = writeln!(s, "| {threads} | {tool} | | {m} | | | | |");
                }
                (_, Some(wall)) => {
                    let beyond = window.map_or("—".into(), |w| secs(wall.saturating_sub(w)));
                    let _ = writeln!(
                        s,
                        "| {threads} | {tool} | {} | {} | {beyond} | {} | {} | {} of {threads} |",
                        t.runs.len(),
                        secs(wall),
                        t.median_cpu().map_or("—".into(), secs),
                        t.max_rss_kib().map_or(String::new(), mib),
                        thousands(t.listed as u64)
                    );
                }
                (None, None) => {}
            }
        }
    }
    if let Some(Ok(big)) = scale
        .iter()
        .rev()
        .find(|r| r.as_ref().is_ok_and(|r| r.workers <= 10_000))
        && let Some(wall) = big.rip_probe.median_wall()
    {
        let beyond = wall.saturating_sub(big.window).as_secs_f64();
        let all = big.rip_probe.listed == big.threads;
        let _ = writeln!(
            s,
            "\nRequirement: a full report for 10,000 blocked threads in at most \
             0.5 s beyond the observation window, every thread in `--json`. \
             Measured at {} threads: {beyond:.2} s beyond the window, {} of {} \
             threads listed — {}.",
            thousands(big.threads as u64),
            thousands(big.rip_probe.listed as u64),
            thousands(big.threads as u64),
            if beyond <= 0.5 && all && big.workers >= 10_000 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    if let Some(Ok(huge)) = scale
        .iter()
        .find(|r| r.as_ref().is_ok_and(|r| r.workers == scale::HUGE))
    {
        let _ = writeln!(
            s,
            "\nRequirement: `--duration 0` on 100,000 blocked threads, with user stacks, \
             in at most {} wall on a quiet machine, {} of CPU and {} MB peak RSS, every \
             thread in `--json`. CPU time is user + system: unlike wall time, it does \
             not grow when other work shares the machine.\n",
            secs(scale::HUGE_WALL),
            secs(scale::HUGE_CPU),
            scale::HUGE_RSS_KIB * 1024 / 1_000_000,
        );
        for (label, runs) in [
            ("`--no-stacks`", &huge.no_stacks),
            ("with user stacks (the default)", &huge.rip_probe),
        ] {
            let (Some(wall), Some(rss)) = (runs.median_wall(), runs.max_rss_kib()) else {
                continue;
            };
            let all = runs.listed == huge.threads;
            let _ = writeln!(
                s,
                "- {label}: {} wall, {} CPU, {}, {} of {} threads listed — {}.",
                secs(wall),
                runs.median_cpu().map_or("—".into(), secs),
                mib(rss),
                thousands(runs.listed as u64),
                thousands(huge.threads as u64),
                if wall <= scale::HUGE_WALL
                    && runs.median_cpu().is_some_and(|c| c <= scale::HUGE_CPU)
                    && rss <= scale::HUGE_RSS_KIB
                    && all
                {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    for r in scale.iter().flatten() {
        if let Some(b) = &r.baseline {
            let _ = writeln!(
                s,
                "\nThe same {} threads reported by the baseline build (`--baseline`): {}",
                thousands(r.threads as u64),
                match b {
                    Ok(n) => format!(
                        "every one of {} threads has the same state, system call, kernel \
                         and user stacks and lock wait, and the deadlocks are the same.",
                        thousands(*n as u64)
                    ),
                    Err(e) => format!("DIFFERENT: {e}"),
                }
            );
        }
    }
    for big in scale.iter().flatten().filter(|r| r.workers >= 10_000) {
        for (label, runs) in [
            ("", &big.rip_probe),
            (" with `--no-stacks`", &big.no_stacks),
        ] {
            if runs.phases.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "\nrip-probe's phases in its last run{label} at {} threads \
                 (`RIP_PROBE_TIMING=1`):\n\n| phase | ms |\n| --- | ---: |",
                thousands(big.threads as u64)
            );
            for (p, ms) in &runs.phases {
                let _ = writeln!(s, "| {p} | {ms:.1} |");
            }
        }
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{
        proc::Usage,
        rows::{Calls, Row},
        scale::ToolRuns,
    };

    fn row(id: &'static str, tracer: Tracer, mode: Option<&'static str>, ns: &[f64]) -> Measured {
        Measured {
            row: Row {
                id,
                label: id,
                exe: Err("unused".into()),
                mode,
                tracer,
                calls: Calls {
                    start: 1,
                    min: 1,
                    max: 1,
                },
                same_calls_as: None,
                callgrind: false,
            },
            calls: 1_000_000,
            per_call: ns.to_vec(),
            switches: vec![3.0, 1.0],
            counted: None,
            failure: None,
            instructions: None,
            commands: vec![format!("run {id}")],
            troubles: Vec::new(),
        }
    }

    fn sample() -> Report {
        let mut lttng = row("lttng-session", Tracer::Lttng, None, &[]);
        lttng.failure = Some("not available: lttng-tools: no mirror".into());
        let mut none = row("none", Tracer::None, None, &[2.0, 2.2, 2.1]);
        none.instructions = Some(Ok(5.0));
        let usage = |s: f64| Usage {
            wall: Duration::from_secs_f64(s),
            max_rss_kib: 40 * 1024,
            cpu: Some(Duration::from_secs_f64(s / 2.0)),
            success: true,
        };
        Report {
            command: "cargo xtask bench".into(),
            date: "2026-11-22 10:00 UTC".into(),
            elapsed: Duration::from_secs(300),
            machine: vec![("CPU".into(), "Xeon".into())],
            versions: vec![("gdb".into(), "GNU gdb 13.1".into())],
            peers: vec![
                ("gdb".into(), Ok("13.1-3".into())),
                ("lttng-tools".into(), Err("no mirror".into())),
            ],
            builds: vec!["cc -O2 loop.c".into()],
            rounds: 5,
            target_ms: 500.0,
            seed: 1,
            per_call: vec![
                none,
                row(REFERENCE, Tracer::None, None, &[3.0, 3.0, 3.1]),
                row(
                    "uprobe-rip-probe-lib",
                    Tracer::RipProbeLibrary("f"),
                    None,
                    &[24_000.0],
                ),
                row("gdb", Tracer::Gdb, None, &[150_000.0]),
                lttng,
            ],
            callgrind: (1_000_000, 2_000_000, "valgrind ...".into()),
            overhead: vec![row("getppid", Tracer::None, Some("getppid"), &[100.0]), {
                let mut r = row(
                    "getppid-rip-probe",
                    Tracer::RipProbe(None),
                    Some("getppid"),
                    &[105.0],
                );
                r.troubles.push("it said `boom`".into());
                r
            }],
            tokio: Err("not run".into()),
            scale: vec![Ok(ScaleResult {
                workers: 10_000,
                threads: 10_006,
                window: scale::WINDOW,
                rip_probe: ToolRuns {
                    runs: vec![usage(1.3), usage(1.4), usage(1.35)],
                    listed: 10_006,
                    phases: vec![("task iterator".into(), 40.0)],
                    missing: None,
                },
                no_stacks: ToolRuns {
                    runs: vec![usage(1.2), usage(1.25)],
                    listed: 10_006,
                    phases: vec![("task iterator".into(), 38.0)],
                    missing: None,
                },
                gdb: ToolRuns {
                    runs: vec![usage(20.0)],
                    listed: 10_006,
                    ..ToolRuns::default()
                },
                baseline: None,
            })],
            stacks: Err("not measured in this sample".into()),
            reading: Err("not measured in this sample".into()),
            bulk: Err("not measured in this sample".into()),
            goroutines: Err("not measured in this sample".into()),
            alloc: Err("not measured in this sample".into()),
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(ns(2.345), "2.35");
        assert_eq!(ns(23.45), "23.4");
        assert_eq!(ns(23456.7), "23,457");
        assert_eq!(ns(-0.5), "-0.50");
        assert_eq!(ns(-1500.0), "-1,500");
        assert_eq!(ratio(1.049), "×1.05");
        assert_eq!(ratio(12.34), "×12.3");
        assert_eq!(ratio(8000.0), "×8,000");
    }

    #[test]
    fn renders_every_table() {
        let md = sample().render();
        // The reference row is ×1; the uprobe row is 8,000 times it.
        assert!(
            md.contains("| snap-c | 1,000,000 | **3.00** | 3.00–3.10 | ×1.00 | 0.90 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| uprobe-rip-probe-lib | 1,000,000 | **24,000** | 24,000–24,000 | ×8,000 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| no tracing") || md.contains("| none | 1,000,000 | **2.10** |"),
            "{md}"
        );
        assert!(md.contains("| 5.00 | 2 (1–3) |"), "{md}");
        assert!(
            md.contains("| lttng-session |  | not available: lttng-tools: no mirror |"),
            "{md}"
        );
        assert!(md.contains("| lttng-tools | not available: no mirror |"));
        assert!(md.contains("×1.05 | 2 (1–3) |"), "{md}");
        assert!(md.contains("Measured: ×1.05 — met."), "{md}");
        assert!(
            md.contains(
                "getppid-rip-probe (getppid): after 1 of 2 runs (warm-up included), it said `boom`."
            ),
            "{md}"
        );
        assert!(md.contains("| 10,006 | rip-probe --pid --json | 3 | 1.35 s | 0.35 s | 0.68 s | 40 MiB | 10,006 of 10,006 |"), "{md}");
        assert!(
            md.contains(
                "| 10,006 | gdb thread apply all bt | 1 | 20.00 s | — | 10.00 s | 40 MiB |"
            ),
            "{md}"
        );
        assert!(
            md.contains("0.35 s beyond the window, 10,006 of 10,006 threads listed — met."),
            "{md}"
        );
        assert!(md.contains("| task iterator | 40.0 |"));
        assert!(
            md.contains("| 10,006 | rip-probe --pid --json --no-stacks | 2 | 1.23 s |"),
            "{md}"
        );
        assert!(md.contains("phases in its last run with `--no-stacks` at 10,006"));
        assert!(md.contains("  run gdb\n"));
        assert!(md.contains("bench-per-call.svg"));
        assert!(md.contains("- a note"));
    }

    #[test]
    fn headline() {
        let h = sample().headline();
        assert!(h.contains("librip snap takes 3.00 ns"), "{h}");
        assert!(h.contains("24 µs with an uprobe (×8,000)"), "{h}");
        assert!(h.contains("150 µs with a gdb breakpoint (×50,000)"), "{h}");
        assert!(h.contains("getppid loop ×1.05"), "{h}");
        assert!(
            h.contains(
                "10,006 blocked threads in 0.35 s beyond its observation window (gdb: 20.00 s)"
            ),
            "{h}"
        );
    }
}
