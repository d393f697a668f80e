//! `rip-probe serve` as a monitoring stack sees it: scraped by a real
//! Prometheus (Debian's, started here on loopback), whose PromQL answers
//! show a deadlock and a 100-thread pool blocked on a lock with the right
//! numbers, a process started after serve appear and a killed one
//! disappear; the deadlock's incident report written; its stacks received
//! as OTLP logs by a receiver here that decodes them with the same
//! protobuf types; SIGTERM ends it cleanly and SIGKILL leaves no BPF
//! program. Every wait polls for what it waits for, with a generous
//! deadline: nothing here times the machine.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest,
    common::v1::{AnyValue, KeyValue, any_value::Value},
};
use prost::Message;
use rip_tests::{TempDir, Workload, bpf_tests_enabled, build_c};

/// A PromQL answer: each series' labels and value.
type Series = Vec<(BTreeMap<String, String>, f64)>;

const CLI: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

/// How long any one awaited thing may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(180);

/// Polls `f` until it gives a value; fails with `what` (and the last
/// thing seen) past [`PATIENCE`].
fn until<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "{what}: not after {PATIENCE:?}; last: {last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `tests/c/service.c`: a parent and `children` processes named `tag`,
/// titled `svc: worker I`, each with `threads` pool threads blocked on
/// `g_pool_lock` (and, with `deadlock`, an ABBA deadlock in the first).
/// Returns the workload and the children's pids.
fn service(tag: &str, children: usize, threads: usize, deadlock: bool) -> (Workload, Vec<u32>) {
    let mut cmd = Command::new(build_c("service", &[]));
    cmd.args([tag, &children.to_string(), &threads.to_string()]);
    if deadlock {
        cmd.arg("deadlock");
    }
    // Room for the titles the children write over their arguments.
    cmd.arg("x".repeat(64));
    let w = Workload::start(cmd);
    let pids = w.tids("child");
    assert_eq!(pids.len(), children, "{:?}", w.lines);
    (w, pids)
}

/// A name for this test's processes that no other test's has (the
/// kernel keeps 15 bytes of it).
fn tag(what: &str) -> String {
    format!("{what}{}", std::process::id() % 100_000)
}

/// A running `rip-probe serve`, killed when dropped.
struct Serve {
    child: Child,
    /// Its metrics' address (`HOST:PORT`).
    addr: String,
}

impl Serve {
    /// Starts serve with `args`, listening on a port the kernel picks,
    /// and reads where from its first line.
    fn start(args: &[&str]) -> Serve {
        let mut child = Command::new(CLI)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rip-probe serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("rip-probe serve: metrics at http://")
            .and_then(|r| r.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("serve said {line:?}"))
            .to_string();
        Serve { child, addr }
    }

    /// Sends SIGTERM and waits for serve to end; its exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        until("serve ends after SIGTERM", || {
            self.child
                .try_wait()
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "still running".to_string())
        })
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Prometheus started on loopback with a scrape config for `target`
/// (every second), its data in a temporary directory; killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let bin = which("prometheus").expect(
            "no prometheus on PATH: `cargo xtask setup` installs Debian's prometheus package",
        );
        let dir = TempDir::new("/tmp", "prometheus");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: rip\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        // A free port: taken from the kernel, then given to Prometheus; if
        // something else took it meanwhile, Prometheus exits and another
        // is tried.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new(&bin)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start prometheus");
            let url = format!("http://127.0.0.1:{port}");
            let ready = until("prometheus is ready or exits", || {
                if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                    return Ok(Err(status));
                }
                match http_get(&format!("{url}/-/ready")) {
                    Ok((200, _, _)) => Ok(Ok(())),
                    other => Err(format!("{other:?}")),
                }
            });
            match ready {
                Ok(()) => {
                    return Prometheus {
                        child,
                        url,
                        _dir: dir,
                    };
                }
                Err(status) => eprintln!("prometheus on port {port} exited: {status}; again"),
            }
        }
        panic!("prometheus did not start on any of five ports");
    }

    /// The samples of the instant query `q`: each series' labels and value.
    fn query(&self, q: &str) -> Result<Series, String> {
        let url = format!("{}/api/v1/query?query={}", self.url, encode(q));
        let (status, _, body) = http_get(&url)?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("{status}: {body}"));
        }
        Ok(v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                let value = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect())
    }

    /// Polls until the query `q` gives exactly one sample equal to
    /// `want`; returns its labels.
    fn until_value(&self, q: &str, want: f64) -> BTreeMap<String, String> {
        until(&format!("PromQL {q} == {want}"), || {
            let r = self.query(q)?;
            match r.as_slice() {
                [(labels, v)] if *v == want => Ok(labels.clone()),
                _ => Err(format!("{r:?}")),
            }
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of program `name` on PATH.
fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// GETs `url`: status, content type, body (any status is an answer).
fn http_get(url: &str) -> Result<(u16, String, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut r = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, ctype, body))
}

/// The deadlock and the 100-thread pool in Prometheus's answers; a
/// process started later appears, a killed one disappears; the incident
/// written once, its path in the metrics; SIGTERM ends serve with 0.
#[test]
fn prometheus_sees_the_deadlock_the_pool_and_processes_come_and_go() {
    if !bpf_tests_enabled("prometheus_sees_the_deadlock_the_pool_and_processes_come_and_go") {
        return;
    }
    let tag = tag("svcprom");
    let (_pool, pids) = service(&tag, 1, 100, true);
    let pool = pids[0];
    let reports = TempDir::new("/tmp", "serve-reports");
    let reports_dir = reports.path().display().to_string();
    let serve = Serve::start(&[
        "--comm",
        &tag,
        "--interval",
        "1s",
        "--stuck",
        "1h",
        "--reports",
        &reports_dir,
    ]);
    // The endpoint speaks OpenMetrics.
    let (status, ctype, body) = until("serve's metrics list the pool", || {
        let r = http_get(&format!("http://{}/metrics", serve.addr))?;
        if r.2.contains(&format!("rip_deadlocks{{pid=\"{pool}\"")) {
            Ok(r)
        } else {
            Err(r.2)
        }
    });
    assert_eq!(status, 200);
    assert!(
        ctype.starts_with("application/openmetrics-text; version=1.0.0"),
        "{ctype}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(!body.contains("tid="), "no thread label: {body}");

    let prom = Prometheus::start(&serve.addr);
    let p = format!("pid=\"{pool}\"");
    // 100 pool threads and the two of the deadlock wait for locks; with
    // the main thread in pause(), 103 sleep.
    prom.until_value(&format!("rip_deadlocks{{{p}}}"), 1.0);
    prom.until_value(&format!("rip_lock_waiters{{{p}}}"), 102.0);
    let labels = prom.until_value(&format!("rip_threads{{{p},state=\"sleeping\"}}"), 103.0);
    assert_eq!(labels.get("comm"), Some(&tag), "{labels:?}");
    prom.until_value(&format!("sum(rip_threads{{{p}}})"), 103.0);
    // The threads were blocked before serve started: at least a second
    // by the time a later snapshot reads them.
    until("the longest-blocked thread passes 1s", || {
        let r = prom.query(&format!("rip_longest_blocked_seconds{{{p}}} >= 1"))?;
        if r.len() == 1 {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    });
    prom.until_value(&format!("rip_incidents_total{{{p}}}"), 1.0);
    let info = prom.until_value(&format!("rip_incident_info{{{p}}}"), 1.0);
    let path = info.get("path").expect("the incident's path");
    assert!(path.starts_with(&reports_dir), "{path}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(report["process"]["pid"], pool);
    assert_eq!(report["deadlocks"].as_array().map(Vec::len), Some(1));
    let text = std::fs::read_to_string(path.replace(".json", ".txt")).unwrap();
    assert!(text.contains("DEADLOCK"), "{text}");

    // A process started after serve appears...
    let (late, late_pids) = service(&tag, 1, 3, false);
    let lp = format!("pid=\"{}\"", late_pids[0]);
    prom.until_value(&format!("rip_lock_waiters{{{lp}}}"), 3.0);
    prom.until_value(&format!("rip_threads{{{lp},state=\"sleeping\"}}"), 4.0);
    // ...and goes when it is killed (its parent killed, it dies with it).
    drop(late);
    until("the killed process leaves the metrics", || {
        let r = prom.query(&format!("rip_threads{{{lp}}}"))?;
        if r.is_empty() {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    });
    // The pool stays, its incident written once.
    prom.until_value(&format!("rip_deadlocks{{{p}}}"), 1.0);
    let written = std::fs::read_dir(reports.path()).unwrap().count();
    assert_eq!(written, 2, "one incident: its JSON and its text");
    assert!(serve.terminate().success());
}

/// The value of attribute `key` in `attrs`.
fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

/// serve's stacks reach an OTLP/HTTP receiver as logs it decodes: the
/// pool's group of 100 threads, its state, wait, stack and process.
#[test]
fn otlp_receiver_decodes_the_snapshots_stacks() {
    if !bpf_tests_enabled("otlp_receiver_decodes_the_snapshots_stacks") {
        return;
    }
    let receiver = tiny_http::Server::http("127.0.0.1:0").expect("listen");
    let port = receiver.server_addr().to_ip().unwrap().port();
    let (_pool, pids) = service(&tag("svcotlp"), 1, 100, false);
    let pool = pids[0];
    let serve = Serve::start(&[
        "--pid",
        &pool.to_string(),
        "--interval",
        "1s",
        "--otlp",
        &format!("http://127.0.0.1:{port}"),
    ]);
    let deadline = Instant::now() + PATIENCE;
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no OTLP batch with the pool's group");
        let Some(mut req) = receiver.recv_timeout(left).expect("receive") else {
            continue;
        };
        assert_eq!(req.url(), "/v1/logs");
        let ctype = req
            .headers()
            .iter()
            .find(|h| h.field.equiv("Content-Type"))
            .map(|h| h.value.to_string());
        assert_eq!(ctype.as_deref(), Some("application/x-protobuf"));
        let mut body = Vec::new();
        req.as_reader().read_to_end(&mut body).unwrap();
        req.respond(tiny_http::Response::empty(200)).unwrap();
        let batch = ExportLogsServiceRequest::decode(&body[..]).expect("an OTLP logs request");
        let mine = batch.resource_logs.iter().find(|rl| {
            rl.resource.as_ref().is_some_and(|r| {
                attr(&r.attributes, "process.pid") == Some(&Value::IntValue(i64::from(pool)))
            })
        });
        let Some(rl) = mine else { continue };
        let title = attr(
            &rl.resource.as_ref().unwrap().attributes,
            "process.command_line",
        );
        assert_eq!(title, Some(&Value::StringValue("svc: worker 0".into())));
        let records: Vec<_> = rl.scope_logs.iter().flat_map(|s| &s.log_records).collect();
        if let Some(r) = records
            .iter()
            .find(|r| attr(&r.attributes, "rip.threads") == Some(&Value::IntValue(100)))
        {
            break (*r).clone();
        }
    };
    assert_eq!(
        attr(&found.attributes, "thread.state"),
        Some(&Value::StringValue("sleeping".into()))
    );
    assert_eq!(
        attr(&found.attributes, "rip.wait"),
        Some(&Value::StringValue("futex_wait".into()))
    );
    let Some(Value::StringValue(stack)) = attr(&found.attributes, "code.stacktrace") else {
        panic!("no stack: {found:?}");
    };
    assert!(stack.contains("pool_thread"), "{stack}");
    let Some(Value::ArrayValue(tids)) = attr(&found.attributes, "rip.tids") else {
        panic!("no tids: {found:?}");
    };
    assert_eq!(tids.values.len(), 100);
    assert!(serve.terminate().success());
}

/// serve SIGKILLed while a snapshot holds its programs leaves none.
#[test]
fn sigkill_of_serve_leaves_no_bpf_program() {
    if !bpf_tests_enabled("sigkill_of_serve_leaves_no_bpf_program") {
        return;
    }
    let (_w, pids) = service(&tag("svckill"), 1, 20, false);
    let mut serve = Serve::start(&["--pid", &pids[0].to_string(), "--interval", "10ms"]);
    let serve_pid = serve.child.id();
    let progs = until("serve holds a snapshot's programs", || {
        let p = rip_tests::bpf_programs_held_by(serve_pid);
        if p.is_empty() {
            Err("none yet".into())
        } else {
            Ok(p)
        }
    });
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    until("the kernel frees serve's programs", || {
        let left = rip_tests::bpf_programs_still_loaded(&progs);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
}
