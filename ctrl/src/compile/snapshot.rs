//! IR -> [`Snapshot`]: the listener/route tables and the policy tables of one
//! configuration, built off the hot path and published whole.

use sluice_dataplane::tables::addresses::Addresses;
use sluice_dataplane::tables::policy::PolicyTables;
use sluice_dataplane::tables::snapshot::Snapshot;

use super::ir::Ir;
use super::policy::PolicyCompileError;
use super::tables::{listener_table, TableError};

/// Builds the snapshot of a compiled configuration from its IR and its policy tables
/// (compiled once, by [`super::build()`]); an error says what could not be built (a table
/// over its cap, a Maglev size, ...), in which case the running tables stay. Its served
/// addresses are empty; [`super::build()`] sets them from the run plan
/// ([`super::addresses`]).
pub fn build(ir: &Ir, policy: PolicyTables) -> Result<Snapshot, TableError> {
    Ok(Snapshot {
        listeners: listener_table(ir)?,
        policy,
        addresses: Addresses::default(),
    })
}

/// Why [`from_ir`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FromIrError {
    /// The listener and route tables.
    #[error(transparent)]
    Tables(#[from] TableError),
    /// NetworkPolicy.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Policy(Vec<PolicyCompileError>),
}

/// The snapshot of an IR changed by hand (benchmarks and tests that edit weights or
/// backends between generations): compiles its NetworkPolicy, then [`build`]s. A
/// configuration read from manifests goes through [`super::build()`] instead.
pub fn from_ir(ir: &Ir) -> Result<Snapshot, FromIrError> {
    let policy = super::policy::compile(ir).map_err(FromIrError::Policy)?;
    Ok(build(ir, policy.tables)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_dataplane::rcu::Publisher;
    use sluice_dataplane::tables::listeners::proto;
    use sluice_dataplane::tables::maglev::Pick;
    use std::path::Path;

    fn demo() -> Ir {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo");
        crate::compile::build_paths(&[dir])
            .expect("demo compiles")
            .ir
    }

    /// A worker reading through the RCU reader sees a whole generation: after a swap to a
    /// config where echo-b has weight 0, every new pick goes to echo-a, and the old
    /// snapshot is freed on the publishing thread once the reader moved on.
    #[test]
    fn snapshots_publish_and_swap_whole() {
        let mut ir = demo();
        let first = from_ir(&ir).expect("snapshot");
        let mut publisher = Publisher::new(first, 1);
        let mut worker = publisher.reader().expect("reader");
        let pick = |s: &Snapshot, port: u16| {
            let l = s
                .listeners
                .lookup("10.77.0.10".parse().expect("ip"), 7000, proto::TCP)
                .expect("listener");
            let r = s
                .listeners
                .route(l.route(b"").expect("route"))
                .expect("route");
            r.pick(
                format!("10.77.0.1:{port}").parse().expect("src"),
                "10.77.0.10:7000".parse().expect("dst"),
                6,
            )
        };
        let (g1, s) = worker.read();
        assert_eq!(g1, 1);
        let before: Vec<Pick> = (40000..40100).map(|p| pick(s, p)).collect();
        assert!(before
            .iter()
            .any(|p| *p == Pick::Backend("10.78.0.12:7000".parse().expect("a"))));
        // Drain echo-b: weight 0.
        let route = ir
            .routes
            .iter_mut()
            .find(|r| r.name == "TCPRoute demo/echo")
            .expect("route");
        route.backends[1].weight = 0;
        assert_eq!(publisher.publish(from_ir(&ir).expect("snapshot")), 2);
        assert_eq!(
            publisher.pending(),
            1,
            "the reader may still hold generation 1"
        );
        let (g2, s) = worker.read();
        assert_eq!(g2, 2);
        for p in 40000..40100 {
            assert_eq!(
                pick(s, p),
                Pick::Backend("10.78.0.11:7000".parse().expect("a"))
            );
        }
        assert_eq!(publisher.reclaim(), 0, "generation 1 freed on this thread");
        // Policy tables travel in the same snapshot.
        let verdict = s.policy.verdict(
            "10.99.0.1".parse().expect("ip"),
            "10.78.0.11".parse().expect("ip"),
            6,
            7000,
        );
        assert!(
            !verdict.is_allow(),
            "the demo's backends only admit 10.77.0.0/24"
        );
    }
}
