//! serve's OpenMetrics endpoint: a small blocking HTTP server on its own
//! thread answering `GET /metrics` with the metrics of the last pass.
//! Scrapes never wait for a snapshot: they read what the last one left.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    thread::JoinHandle,
};

use crate::{
    error::{Error, Result},
    model::serve::ServeMetrics,
    render,
};

/// The endpoint, listening.
pub(super) struct Endpoint {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    /// Where it listens (the port the kernel chose for port 0).
    pub(super) addr: SocketAddr,
}

impl Endpoint {
    /// Listens on `addr` and answers scrapes with `metrics`.
    pub(super) fn start(addr: SocketAddr, metrics: Arc<Mutex<ServeMetrics>>) -> Result<Endpoint> {
        let server = tiny_http::Server::http(addr).map_err(|e| {
            Error::Usage(format!(
                "--listen {addr}: cannot listen there ({e}): give a free address and port"
            ))
        })?;
        let addr = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let s = server.clone();
        let thread = std::thread::Builder::new()
            .name("rip-serve-http".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let _ = answer(req, &metrics);
                }
            })
            .map_err(|e| Error::Usage(format!("cannot start the HTTP thread: {e}")))?;
        Ok(Endpoint {
            server,
            thread: Some(thread),
            addr,
        })
    }

    /// Stops listening and waits for the thread.
    pub(super) fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request: the metrics at `/metrics`, a pointer to them at
/// `/`, 404 elsewhere, 405 for anything but GET and HEAD.
fn answer(req: tiny_http::Request, metrics: &Mutex<ServeMetrics>) -> std::io::Result<()> {
    use tiny_http::{Header, Method, Response};
    let header = |v: &str| Header::from_bytes("Content-Type", v).expect("a valid header");
    if !matches!(req.method(), Method::Get | Method::Head) {
        return req.respond(Response::from_string("only GET\n").with_status_code(405));
    }
    let path = req.url().split('?').next().unwrap_or("");
    match path {
        "/metrics" => {
            let mut body = Vec::with_capacity(16 << 10);
            {
                // A poisoned lock still holds the last metrics written.
                let m = metrics.lock().unwrap_or_else(|p| p.into_inner());
                render::openmetrics(&m, &mut body)?;
            }
            req.respond(
                Response::from_data(body).with_header(header(render::OPENMETRICS_CONTENT_TYPE)),
            )
        }
        "/" => req.respond(
            Response::from_string("rip-probe serve: metrics at /metrics\n")
                .with_header(header("text/plain; charset=utf-8")),
        ),
        _ => req.respond(Response::from_string("not found\n").with_status_code(404)),
    }
}
