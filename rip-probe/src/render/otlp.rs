//! A snapshot's stacks as OpenTelemetry logs (OTLP, the project's own
//! generated protobuf types): one log record per group of threads (same
//! state, wait, location and user stack), with the thread state, the
//! wait, the members and the stack as attributes, and the group's
//! sentence as the body. Until OTLP's profiles signal settles, logs are
//! what every collector accepts.

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest,
    common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value::Value},
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber},
    resource::v1::Resource,
};

use super::text::group_sentence;
use crate::model::{Frame, Report};

fn string(s: impl Into<String>) -> AnyValue {
    AnyValue {
        value: Some(Value::StringValue(s.into())),
    }
}

fn int(i: u64) -> AnyValue {
    AnyValue {
        value: Some(Value::IntValue(i64::try_from(i).unwrap_or(i64::MAX))),
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(value),
    }
}

/// A stack as OpenTelemetry's `code.stacktrace` spells one: a line per
/// frame, innermost first.
fn stacktrace(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|f| format!("at {}", f.describe()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The log records of the reports `reports`, taken at `unix_ns`: one per
/// thread group of each; a group blocked at least `stuck_ns` (or in a
/// deadlock) is a warning, any other information.
pub fn otlp_logs(reports: &[Report], unix_ns: u64, stuck_ns: u64) -> ExportLogsServiceRequest {
    let mut resource_logs = Vec::new();
    for r in reports {
        let p = &r.process;
        let in_deadlock: std::collections::HashSet<u64> = r
            .deadlocks
            .iter()
            .flatten()
            .map(|&t| u64::from(t))
            .collect();
        let mut records = Vec::new();
        for g in &r.groups {
            let stuck = matches!(g.state, crate::model::GroupState::Thread(s) if s.is_blocked())
                && g.min_ns.is_some_and(|ns| ns >= stuck_ns);
            let deadlocked = g.ids.iter().any(|t| in_deadlock.contains(t));
            let severity = if stuck || deadlocked {
                SeverityNumber::Warn
            } else {
                SeverityNumber::Info
            };
            let mut attributes = vec![
                kv("thread.state", string(g.state.as_str())),
                kv("rip.threads", int(g.count as u64)),
                kv(
                    "rip.tids",
                    AnyValue {
                        value: Some(Value::ArrayValue(ArrayValue {
                            values: g.ids.iter().map(|&t| int(t)).collect(),
                        })),
                    },
                ),
                kv(
                    "rip.deadlocked",
                    AnyValue {
                        value: Some(Value::BoolValue(deadlocked)),
                    },
                ),
            ];
            if let Some(w) = &g.wait {
                attributes.push(kv("rip.wait", string(w)));
            }
            if let Some(ns) = g.min_ns {
                attributes.push(kv("rip.blocked_min_ns", int(ns)));
                attributes.push(kv(
                    "rip.blocked_lower_bound",
                    AnyValue {
                        value: Some(Value::BoolValue(g.lower_bound)),
                    },
                ));
            }
            if let Some(l) = &g.location {
                attributes.push(kv("rip.location", string(l.describe())));
            }
            if !g.frames.is_empty() {
                attributes.push(kv("code.stacktrace", string(stacktrace(&g.frames))));
            }
            records.push(LogRecord {
                time_unix_nano: unix_ns,
                observed_time_unix_nano: unix_ns,
                severity_number: severity as i32,
                severity_text: if severity == SeverityNumber::Warn {
                    "WARN".into()
                } else {
                    "INFO".into()
                },
                body: Some(string(group_sentence(g))),
                attributes,
                ..Default::default()
            });
        }
        let mut resource = vec![
            kv("service.name", string("rip-probe")),
            kv("process.pid", int(u64::from(p.pid))),
        ];
        if let Some(c) = &p.comm {
            resource.push(kv("process.executable.name", string(c)));
        }
        if let Some(e) = &p.exe {
            resource.push(kv("process.executable.path", string(e)));
        }
        if let Some(t) = &p.title {
            resource.push(kv("process.command_line", string(t)));
        }
        resource_logs.push(ResourceLogs {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "rip-probe".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportLogsServiceRequest { resource_logs }
}
