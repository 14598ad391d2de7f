//! `cairnctl health` (is the server there: gRPC health and memcached's `version`) and
//! `cairnctl checkpoint` (the admin line, which the server refuses without `--enable-admin`:
//! its refusal is shown as it is).
//!
//! ```text
//!   health      ──> grpc.health.v1.Health/Check "" + cairn.v1.KV + cairn.v1.Watch  (--endpoint)
//!               ──> version\r\n  ──> VERSION 1.6.x                           (--memcached)
//!   checkpoint  ──> checkpoint\r\n ──> OK | CLIENT_ERROR admin commands are disabled ...
//! ```
//!
//! Non-goals: other admin lines (`config`, `failover force`): memcached's text protocol
//! (nc, telnet) has them.

use std::time::{Duration, Instant};

use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::error::{CtlError, Result};
use crate::memcached::{refusal, Memcached};
use crate::output::Out;

/// The services whose health is asked ("" is the server as a whole).
const SERVICES: [&str; 3] = ["", "cairn.v1.KV", "cairn.v1.Watch"];

/// One port's answer.
struct Check {
    port: &'static str,
    addr: String,
    ok: bool,
    status: String,
    took: Duration,
}

async fn grpc_check(endpoint: &str) -> Check {
    let started = Instant::now();
    let mut check = Check {
        port: "grpc",
        addr: endpoint.to_string(),
        ok: false,
        status: String::new(),
        took: Duration::ZERO,
    };
    let channel = match crate::grpc::connect(endpoint).await {
        Ok(c) => c,
        Err(e) => {
            check.status = e.to_string();
            return check;
        }
    };
    let mut client = HealthClient::new(channel);
    let mut parts = Vec::new();
    let mut ok = true;
    for service in SERVICES {
        let answer = client
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await;
        let status = match answer {
            Ok(r) => match ServingStatus::try_from(r.into_inner().status) {
                Ok(ServingStatus::Serving) => "SERVING".to_string(),
                Ok(s) => {
                    ok = false;
                    s.as_str_name().to_string()
                }
                Err(_) => {
                    ok = false;
                    "UNKNOWN".to_string()
                }
            },
            Err(s) => {
                ok = false;
                format!("{:?}: {}", s.code(), s.message())
            }
        };
        let name = if service.is_empty() {
            "server"
        } else {
            service
        };
        parts.push(format!("{name} {status}"));
    }
    check.ok = ok;
    check.status = parts.join(", ");
    check.took = started.elapsed();
    check
}

async fn memcached_check(memcached: &str) -> Check {
    let started = Instant::now();
    let mut check = Check {
        port: "memcached",
        addr: memcached.to_string(),
        ok: false,
        status: String::new(),
        took: Duration::ZERO,
    };
    let answer = match Memcached::connect(memcached).await {
        Ok(mut mc) => mc.call("version", Some(Duration::from_secs(10))).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(line) if line.starts_with("VERSION ") => {
            check.ok = true;
            check.status = line;
        }
        Ok(line) => check.status = format!("unexpected reply: {line}"),
        Err(e) => check.status = e.to_string(),
    }
    check.took = started.elapsed();
    check
}

pub async fn health(endpoint: &str, memcached: &str, out: &mut Out) -> Result<()> {
    let (grpc, mc) = tokio::join!(grpc_check(endpoint), memcached_check(memcached));
    let checks = [grpc, mc];
    if out.json_mode() {
        for c in &checks {
            out.json(&json!({
                "port": c.port,
                "address": c.addr,
                "ok": c.ok,
                "status": c.status,
                "ms": (c.took.as_secs_f64() * 1e6).round() / 1e3,
            }))?;
        }
    } else {
        let rows: Vec<Vec<String>> = checks
            .iter()
            .map(|c| {
                vec![
                    c.port.to_string(),
                    c.addr.clone(),
                    if c.ok { "ok" } else { "FAILED" }.to_string(),
                    if c.ok {
                        format!("{:.1} ms", c.took.as_secs_f64() * 1e3)
                    } else {
                        "-".into()
                    },
                    c.status.clone(),
                ]
            })
            .collect();
        out.table(&["PORT", "ADDRESS", "HEALTH", "TIME", "ANSWER"], &rows)?;
    }
    match checks.iter().find(|c| !c.ok) {
        None => Ok(()),
        Some(c) => Err(CtlError::Unhealthy(format!(
            "{} at {}: {}",
            c.port, c.addr, c.status
        ))),
    }
}

pub async fn checkpoint(memcached: &str, out: &mut Out) -> Result<()> {
    let mut mc = Memcached::connect(memcached).await?;
    let started = Instant::now();
    // A checkpoint writes every item (throttled by checkpoint_rate_mb_s): no time limit.
    let reply = mc.call("checkpoint", None).await?;
    if refusal(&reply) {
        return Err(CtlError::Refused {
            addr: memcached.to_string(),
            reply,
        });
    }
    if reply != "OK" {
        return Err(CtlError::Protocol {
            addr: memcached.to_string(),
            reply,
        });
    }
    let took = started.elapsed().as_secs_f64();
    if out.json_mode() {
        out.json(&json!({"checkpoint": "OK", "seconds": took}))
    } else {
        out.line(&format!("OK: checkpoint taken in {took:.3} s"))
    }
}
