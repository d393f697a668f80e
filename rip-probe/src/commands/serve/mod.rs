//! `rip-probe serve`: a long-running agent on one host. Every
//! `--interval` it lists its targets anew (`--pid`, `--comm`, `--cgroup`,
//! or every process with a librip ring: processes that start later are
//! picked up, those gone dropped), takes a snapshot of each with no
//! window ([`crate::session::snapshot_now`]; at most `--max-targets` per
//! pass, and none begun once the interval is over: the rest first in the
//! next pass), and keeps the numbers for the OpenMetrics endpoint (each
//! snapshot's as soon as it is taken); an incident (a thread stuck past `--stuck`, a
//! deadlock) writes the full report to `--reports DIR`; `--otlp URL`
//! sends the snapshots' stacks as OTLP logs. SIGINT or SIGTERM end it
//! after the snapshot under way. A snapshot loads the task iterator
//! alone: nothing runs at the targets' context switches or calls, ever;
//! nothing stays loaded between snapshots, and what a snapshot loads is
//! held by descriptors, which the kernel closes if serve is killed.

mod http;
mod incidents;
mod otlp;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex, atomic::Ordering},
    time::{Duration, Instant},
};

use clap::Args;

use super::{output::Sink, parse_duration, targets::Named};
use crate::{
    analyze,
    error::{Error, Result},
    model::{
        Report,
        serve::{ProcessMetrics, ServeMetrics},
    },
    render,
    session::{SessionOptions, snapshot_naming_with},
    symbolize::SymbolizerThread,
    util::interrupt,
};

/// `rip-probe serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Observe these processes (repeated, or a comma list). Without
    /// --pid, --comm or --cgroup: every process that maps a librip ring.
    #[arg(long, value_name = "PID", value_delimiter = ',', num_args = 1)]
    pid: Vec<u32>,
    /// Observe every process named NAME (its comm), as they come and go.
    #[arg(long, value_name = "NAME")]
    comm: Vec<String>,
    /// Observe every process of this cgroup (v2) and those below it (a
    /// systemd service, a pod), as they come and go.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// How often to take a snapshot of every target.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    interval: Duration,
    /// Where the OpenMetrics endpoint listens (`/metrics`); port 0 lets
    /// the kernel choose one, which serve prints.
    #[arg(long, default_value = "127.0.0.1:9753")]
    listen: SocketAddr,
    /// A thread blocked at least this long is stuck: its process's report
    /// is an incident.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    stuck: Duration,
    /// Count threads blocked at least each of these (comma list):
    /// `rip_threads_blocked_over{threshold_seconds=...}`.
    #[arg(
        long,
        value_name = "DURATIONS",
        default_value = "1s,10s,60s,300s",
        value_delimiter = ',',
        value_parser = parse_duration
    )]
    blocked_over: Vec<Duration>,
    /// Write each incident's full report (JSON and text) into DIR.
    #[arg(long, value_name = "DIR")]
    reports: Option<PathBuf>,
    /// Keep at most this many incidents in --reports (the oldest go).
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_reports: usize,
    /// Send each snapshot's stacks as OTLP logs to this OTLP/HTTP
    /// receiver (`http://HOST:4318`, or a full URL ending in its path).
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// Take at most this many snapshots per interval (and begin none once
    /// the interval is over); the targets left over come first in the
    /// next one.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_targets: usize,
    /// Do not take user stacks (the cheapest snapshot).
    #[arg(long)]
    no_stacks: bool,
}

/// How often the wait between passes looks for a signal.
const SIGNAL_STEP: Duration = Duration::from_millis(100);

/// What serve keeps of one target between passes.
#[derive(Default)]
struct Kept {
    metrics: ProcessMetrics,
    /// The last error said, so that a lasting one is said once.
    last_error: Option<String>,
}

pub(crate) fn run(a: &ServeArgs, out: &mut Sink) -> Result<()> {
    if a.interval.is_zero() || a.max_targets == 0 {
        return Err(Error::Usage(
            "serve: --interval and --max-targets must be more than 0".into(),
        ));
    }
    let named = Named {
        pids: a.pid.clone(),
        comms: a.comm.clone(),
        cgroup: a.cgroup.clone(),
    };
    // Bad names are said now, before anything listens.
    named.list(true)?;
    let mut incidents = a
        .reports
        .as_deref()
        .map(|d| incidents::Incidents::new(d, a.max_reports))
        .transpose()?;
    let exporter = a.otlp.as_deref().map(otlp::Exporter::start).transpose()?;
    let metrics = Arc::new(Mutex::new(ServeMetrics::default()));
    let endpoint = http::Endpoint::start(a.listen, metrics.clone())?;
    // Said on stdout (a test or a supervisor with port 0 reads it).
    out.emit(|w| {
        writeln!(
            w,
            "rip-probe serve: metrics at http://{}/metrics",
            endpoint.addr
        )?;
        w.flush()
    })?;
    let thresholds: Vec<u64> = a.blocked_over.iter().map(|d| d.as_nanos() as u64).collect();
    let stuck_ns = a.stuck.as_nanos() as u64;
    let mut kept: BTreeMap<u32, Kept> = BTreeMap::new();
    // One symbolizer for every target and pass: a binary's debug
    // information (decompressed, indexed) is parsed once while some
    // target maps it, not again at every snapshot; what only targets now
    // gone used is dropped at each listing.
    let symbols = SymbolizerThread::start();
    let mut totals = ServeMetrics::default();
    // The last pid snapshotted: the next pass starts after it.
    let mut cursor = 0u32;
    // Armed now: a signal ends the loop instead of serve.
    interrupt::stop_requested();
    let result = loop {
        let started = Instant::now();
        let listed = match named.list(true) {
            Ok(l) => l,
            Err(e) => {
                // A cgroup removed while serving: nothing to observe, but
                // the endpoint stays, and says it.
                eprintln!("rip-probe serve: {}", e.one_line());
                Default::default()
            }
        };
        kept.retain(|pid, _| listed.pids.binary_search(pid).is_ok());
        symbols.retain_targets(listed.pids.clone());
        totals.targets = listed.pids.len() as u64;
        if let Some(i) = incidents.as_mut() {
            let gone: Vec<u32> = i.open_pids().filter(|p| !kept.contains_key(p)).collect();
            gone.into_iter().for_each(|p| i.forget(p));
        }
        // Round robin: from the first pid after the cursor, wrapping.
        let split = listed.pids.partition_point(|&p| p <= cursor);
        let order: Vec<u32> = listed.pids[split..]
            .iter()
            .chain(&listed.pids[..split])
            .copied()
            .collect();
        let mut reports: Vec<Report> = Vec::new();
        let mut interrupted = false;
        for (n, &pid) in order.iter().enumerate() {
            if interrupt::interrupted().is_some() {
                interrupted = true;
                break;
            }
            // The pass's bound: at most --max-targets snapshots, and none
            // begun once the interval is over; the rest come first in the
            // next pass.
            if n == a.max_targets || started.elapsed() >= a.interval {
                totals.deferred += (order.len() - n) as u64;
                break;
            }
            cursor = pid;
            let mut opts = SessionOptions::new(pid);
            opts.stacks = !a.no_stacks;
            opts.warm_up = false;
            let t0 = Instant::now();
            let snap = snapshot_naming_with(&opts, symbols.clone());
            let k = kept.entry(pid).or_default();
            k.metrics.pid = pid;
            k.metrics.snapshot_ns = t0.elapsed().as_nanos() as u64;
            match snap {
                Ok(r) if r.process.alive => {
                    let h = analyze::health::health(&r, &thresholds, stuck_ns);
                    k.metrics.comm = r.process.comm.clone().unwrap_or_default();
                    k.last_error = None;
                    if let Some(i) = incidents.as_mut() {
                        match i.note(pid, h.is_incident(), &r, unix_ns()) {
                            Ok(Some(path)) => {
                                k.metrics.incidents += 1;
                                k.metrics.incident_path = Some(path.display().to_string());
                            }
                            Ok(None) => {}
                            Err(e) => eprintln!("rip-probe serve: {}", e.one_line()),
                        }
                    }
                    k.metrics.health = Some(h);
                    reports.push(r);
                }
                // Gone while it was read: dropped, as at the next listing.
                Ok(_) | Err(Error::Discover(crate::discover::Error::NoSuchProcess(_))) => {
                    kept.remove(&pid);
                }
                Err(e) => {
                    k.metrics.errors += 1;
                    let said = e.one_line();
                    if k.last_error.as_ref() != Some(&said) {
                        eprintln!("rip-probe serve: pid {pid}: {said}");
                        k.last_error = Some(said);
                    }
                }
            }
            // Scrapes see each snapshot as it is taken.
            publish(&metrics, &kept, &totals, exporter.as_ref());
            // What each snapshot allocated and freed (its kernel tables,
            // its stacks): handed back to the system, so that memory stays
            // flat over many targets.
            #[cfg(target_env = "gnu")]
            // SAFETY: malloc_trim has no preconditions.
            unsafe {
                libc::malloc_trim(0);
            }
        }
        if let Some(x) = &exporter
            && !reports.is_empty()
        {
            x.send(&render::otlp_logs(&reports, unix_ns(), stuck_ns));
        }
        drop(reports);
        totals.passes += u64::from(!interrupted);
        totals.pass_ns = started.elapsed().as_nanos() as u64;
        publish(&metrics, &kept, &totals, exporter.as_ref());
        if interrupted {
            break Ok(());
        }
        // Until the next pass, or a signal.
        let next = started + a.interval;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if interrupt::interrupted().is_some() {
                break;
            }
            std::thread::sleep(left.min(SIGNAL_STEP));
        }
        if interrupt::interrupted().is_some() {
            break Ok(());
        }
    };
    endpoint.stop();
    if let Some(x) = exporter {
        x.stop();
    }
    result
}

/// The metrics the endpoint serves from now on.
fn publish(
    metrics: &Mutex<ServeMetrics>,
    kept: &BTreeMap<u32, Kept>,
    totals: &ServeMetrics,
    exporter: Option<&otlp::Exporter>,
) {
    let mut m = totals.clone();
    m.processes = kept.values().map(|k| k.metrics.clone()).collect();
    if let Some(x) = exporter {
        m.otlp_sent = x.counters.sent.load(Ordering::Relaxed);
        m.otlp_dropped = x.counters.dropped.load(Ordering::Relaxed);
        m.otlp_failures = x.counters.failures.load(Ordering::Relaxed);
    }
    *metrics.lock().unwrap_or_else(|p| p.into_inner()) = m;
}

/// Now, in nanoseconds since the Unix epoch.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
