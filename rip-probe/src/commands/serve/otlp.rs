//! serve's OTLP export: log batches POSTed as protobuf to a collector's
//! `/v1/logs` (OTLP/HTTP) by a thread of their own, through a bounded
//! queue, so a slow or absent collector never holds a snapshot back: a
//! batch that finds the queue full is dropped and counted; a POST that
//! fails is retried with a growing pause, and the batch is dropped and
//! counted once every retry failed.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread::JoinHandle,
    time::Duration,
};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;

use crate::error::{Error, Result};

/// Batches waiting to be sent, at most.
const QUEUE: usize = 16;
/// Tries per batch.
const TRIES: u32 = 4;
/// The pause after the first failed try; each next one doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(200);
/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The export's counters.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Batches delivered.
    pub(super) sent: AtomicU64,
    /// Batches dropped.
    pub(super) dropped: AtomicU64,
    /// POSTs that failed.
    pub(super) failures: AtomicU64,
}

/// The exporter: its queue and its thread.
pub(super) struct Exporter {
    queue: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
    /// What it did.
    pub(super) counters: Arc<Counters>,
}

/// The URL batches are POSTed to: `URL` as given when it names a path,
/// else `URL/v1/logs` (OTLP/HTTP's path for logs); only `http://` (no TLS:
/// a collector on the host or beside it).
pub(super) fn logs_url(url: &str) -> Result<String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(Error::Usage(format!(
            "--otlp {url}: give an http:// URL of an OTLP/HTTP receiver, e.g. \
             http://127.0.0.1:4318 (an OpenTelemetry Collector's)"
        )));
    };
    match rest.split_once('/') {
        None | Some((_, "")) => Ok(format!("http://{}/v1/logs", rest.trim_end_matches('/'))),
        Some(_) => Ok(url.to_string()),
    }
}

impl Exporter {
    /// Starts the thread that POSTs batches to `url` (see [`logs_url`]).
    pub(super) fn start(url: &str) -> Result<Exporter> {
        let url = logs_url(url)?;
        let (tx, rx) = sync_channel(QUEUE);
        let counters = Arc::new(Counters::default());
        let stopping = Arc::new(AtomicBool::new(false));
        let (c, s) = (counters.clone(), stopping.clone());
        let thread = std::thread::Builder::new()
            .name("rip-serve-otlp".into())
            .spawn(move || send_all(&url, &rx, &c, &s))
            .map_err(|e| Error::Usage(format!("cannot start the OTLP thread: {e}")))?;
        Ok(Exporter {
            queue: Some(tx),
            thread: Some(thread),
            stopping,
            counters,
        })
    }

    /// Queues `batch`, or drops it (counted) when the queue is full.
    pub(super) fn send(&self, batch: &ExportLogsServiceRequest) {
        let Some(q) = &self.queue else { return };
        match q.try_send(batch.encode_to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends what is queued (one try each, no pause), then ends the thread.
    pub(super) fn stop(mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.queue.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: each batch POSTed, retried with doubling pauses.
fn send_all(url: &str, rx: &Receiver<Vec<u8>>, c: &Counters, stopping: &AtomicBool) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    for body in rx {
        let mut pause = FIRST_PAUSE;
        let mut sent = false;
        for attempt in 0..TRIES {
            let ok = agent
                .post(url)
                .header("Content-Type", "application/x-protobuf")
                .send(&body[..])
                .is_ok();
            if ok {
                sent = true;
                break;
            }
            c.failures.fetch_add(1, Ordering::Relaxed);
            if stopping.load(Ordering::Relaxed) || attempt + 1 == TRIES {
                break;
            }
            std::thread::sleep(pause);
            pause *= 2;
        }
        let counter = if sent { &c.sent } else { &c.dropped };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_urls() {
        assert_eq!(
            logs_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/logs"
        );
        assert_eq!(
            logs_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/logs"
        );
        assert_eq!(
            logs_url("http://c:1/custom/logs").unwrap(),
            "http://c:1/custom/logs"
        );
        let e = logs_url("https://c:1").unwrap_err().to_string();
        assert!(e.contains("http://"), "{e}");
    }
}
