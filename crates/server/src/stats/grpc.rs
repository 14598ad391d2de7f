//! The `stats grpc` block: the gRPC API's figures and the watch hub's, from the grpc crate's
//! list ([`cairn_grpc::GrpcStats::figures`]), each with its kind and description.
//!
//! Non-goals: counting them (cairn-grpc does).

use super::reading::{Reading, Readings};
use crate::Ctx;

/// The `stats grpc` block: the gRPC API's figures and the watch hub's (the grpc crate's list,
/// each with its kind and description).
pub fn grpc(ctx: &Ctx) -> Vec<Reading> {
    let mut r = Readings::default();
    r.text(
        "grpc_listen",
        "Address of the gRPC API, or off.",
        &ctx.config.grpc_listen,
    );
    for f in ctx.grpc_stats.figures(ctx.hub().map(|h| &**h)) {
        if f.counter {
            r.counter(f.name, f.help, f.value);
        } else {
            r.gauge(f.name, f.help, f.value);
        }
    }
    r.0
}
