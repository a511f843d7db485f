//! The plan fingerprint: what a coordinator and a worker compare before the worker runs any
//! part of a job.
//!
//! **Why.** Every process of a cluster builds the job's graph itself, from the same binary
//! and the job's arguments (nothing but arguments is shipped). A worker started from another
//! build, or handed arguments its code reads differently, would build a different plan:
//! other uids, parallelism or record types on the channels, and then decode records with
//! the wrong codec or restore state into the wrong operator. So the coordinator sends its
//! fingerprint with Deploy and the worker refuses a plan whose fingerprint differs from the
//! one it built, naming both versions and the first difference, before anything runs.
//!
//! **What it covers:** the binary (the engine's version and a checksum of the executable,
//! so two builds of one version differ), each operator's uid, parallelism and max
//! parallelism, each edge's ends, its resolved partitioning and the record type it carries.
//! What it cannot see: a change inside a function's body that keeps the graph's shape —
//! the executable's checksum catches it when the binaries differ.

use std::sync::OnceLock;

use crate::api::stream::StreamEnvironment;
use crate::error::{Error, Result};
use crate::runtime::graph::Partitioning;

use super::proto;

/// An operator as the fingerprint sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorPrint {
    /// Its uid.
    pub uid: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// The job's max parallelism (key groups).
    pub max_parallelism: u32,
}

/// An edge between operators as the fingerprint sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgePrint {
    /// The sending operator's uid.
    pub from_uid: String,
    /// The receiving operator's uid.
    pub to_uid: String,
    /// `forward`, `rebalance`, `broadcast` or `hash`, after planning.
    pub partitioning: String,
    /// The record type's Rust name.
    pub record_type: String,
}

/// What a plan is made of, in plan order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFingerprint {
    /// The binary: the engine's version and the executable's checksum.
    pub binary_version: String,
    /// Every operator.
    pub operators: Vec<OperatorPrint>,
    /// Every edge.
    pub edges: Vec<EdgePrint>,
}

/// This process's binary: `weir VERSION (EXE, crc32c XXXXXXXX)`, computed once. The
/// checksum tells two builds of one version apart; an executable that cannot be read
/// (it was replaced on disk) is named so rather than guessed.
pub fn binary_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let name = exe
            .as_ref()
            .and_then(|p| p.file_name())
            .map_or_else(|| "unknown".into(), |n| n.to_string_lossy().into_owned());
        let crc = exe.and_then(|p| std::fs::read(p).ok()).map_or_else(
            || "unreadable".into(),
            |b| format!("crc32c {:08x}", crc32c::crc32c(&b)),
        );
        format!("weir {} ({name}, {crc})", env!("CARGO_PKG_VERSION"))
    })
}

fn partitioning_name(p: Partitioning) -> &'static str {
    match p {
        Partitioning::Default | Partitioning::Rebalance => "rebalance",
        Partitioning::Forward => "forward",
        Partitioning::Broadcast => "broadcast",
        Partitioning::KeyGroups => "hash",
    }
}

impl PlanFingerprint {
    /// The fingerprint of the job `env` has built, planned under its configuration, for the
    /// binary `binary_version` ([`binary_version`] in a real process).
    pub fn of(env: &StreamEnvironment, binary_version: &str) -> Result<Self> {
        let graph = env.graph();
        let cfg = env.config();
        let plan = crate::runtime::plan::plan(&graph, cfg)?;
        let operators = plan
            .uids
            .iter()
            .zip(&plan.parallelism)
            .map(|(uid, &parallelism)| OperatorPrint {
                uid: uid.clone(),
                parallelism,
                max_parallelism: cfg.max_parallelism,
            })
            .collect();
        let edges = graph
            .edges
            .iter()
            .enumerate()
            .map(|(i, e)| EdgePrint {
                from_uid: plan.uids[e.from].clone(),
                to_uid: plan.uids[e.to].clone(),
                partitioning: partitioning_name(plan.partitioning[i]).into(),
                record_type: e.factory.record_type().1.into(),
            })
            .collect();
        Ok(PlanFingerprint {
            binary_version: binary_version.into(),
            operators,
            edges,
        })
    }

    /// Refuses to run `theirs` (the plan `who` built: a worker, by name) where this plan is
    /// expected: the error names both binaries and the first difference, and the way out.
    pub fn check(&self, theirs: &PlanFingerprint, who: &str) -> Result<()> {
        let Some(difference) = self.first_difference(theirs) else {
            return Ok(());
        };
        Err(Error::InvalidJob(format!(
            "{who} built another plan than the coordinator: {difference}; coordinator runs \
             {}, {who} runs {} (start every worker from the coordinator's binary, with the \
             same job arguments)",
            self.binary_version, theirs.binary_version
        )))
    }

    fn first_difference(&self, theirs: &PlanFingerprint) -> Option<String> {
        if self.binary_version != theirs.binary_version {
            return Some("the binaries differ".into());
        }
        for (i, (a, b)) in self.operators.iter().zip(&theirs.operators).enumerate() {
            if a.uid != b.uid {
                return Some(format!(
                    "operator {i} is `{}` here and `{}` there",
                    a.uid, b.uid
                ));
            }
            if a.parallelism != b.parallelism || a.max_parallelism != b.max_parallelism {
                return Some(format!(
                    "operator `{}` has parallelism {} (max {}) here and {} (max {}) there",
                    a.uid, a.parallelism, a.max_parallelism, b.parallelism, b.max_parallelism
                ));
            }
        }
        if self.operators.len() != theirs.operators.len() {
            return Some(format!(
                "{} operators here and {} there",
                self.operators.len(),
                theirs.operators.len()
            ));
        }
        for (a, b) in self.edges.iter().zip(&theirs.edges) {
            if a != b {
                return Some(format!(
                    "edge {} -> {} ({}, {}) here is {} -> {} ({}, {}) there",
                    a.from_uid,
                    a.to_uid,
                    a.partitioning,
                    a.record_type,
                    b.from_uid,
                    b.to_uid,
                    b.partitioning,
                    b.record_type
                ));
            }
        }
        if self.edges.len() != theirs.edges.len() {
            return Some(format!(
                "{} edges here and {} there",
                self.edges.len(),
                theirs.edges.len()
            ));
        }
        None
    }

    /// As the control plane carries it (in Deploy and Deployed).
    pub fn to_proto(&self) -> proto::PlanFingerprint {
        proto::PlanFingerprint {
            binary_version: self.binary_version.clone(),
            operators: self
                .operators
                .iter()
                .map(|o| proto::OperatorPrint {
                    uid: o.uid.clone(),
                    parallelism: o.parallelism,
                    max_parallelism: o.max_parallelism,
                })
                .collect(),
            edges: self
                .edges
                .iter()
                .map(|e| proto::EdgePrint {
                    from_uid: e.from_uid.clone(),
                    to_uid: e.to_uid.clone(),
                    partitioning: e.partitioning.clone(),
                    record_type: e.record_type.clone(),
                })
                .collect(),
        }
    }

    /// From the control plane's message.
    pub fn from_proto(p: proto::PlanFingerprint) -> Self {
        PlanFingerprint {
            binary_version: p.binary_version,
            operators: p
                .operators
                .into_iter()
                .map(|o| OperatorPrint {
                    uid: o.uid,
                    parallelism: o.parallelism,
                    max_parallelism: o.max_parallelism,
                })
                .collect(),
            edges: p
                .edges
                .into_iter()
                .map(|e| EdgePrint {
                    from_uid: e.from_uid,
                    to_uid: e.to_uid,
                    partitioning: e.partitioning,
                    record_type: e.record_type,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    /// A keyed count at parallelism `p`, as a worker would build it from the arguments.
    fn job(p: u32) -> StreamEnvironment {
        let mut config = JobConfig::new("counts");
        config.parallelism = p;
        let env = StreamEnvironment::new(config);
        env.add_source("events", GeneratorSource::new(10))
            .uid("events")
            .map(|i: u64| (i % 10, 1u64))
            .key_by(|r: &(u64, u64)| r.0)
            .reduce(|a, b| (a.0, a.1 + b.1))
            .uid("count")
            .add_sink("out", DiscardSink);
        env
    }

    #[test]
    fn the_same_job_from_the_same_binary_matches_and_survives_the_wire() {
        let ours = PlanFingerprint::of(&job(2), "weir 0.1.0 (weir, crc32c 00000001)").unwrap();
        let theirs = PlanFingerprint::of(&job(2), "weir 0.1.0 (weir, crc32c 00000001)").unwrap();
        assert!(ours.check(&theirs, "worker 1").is_ok());
        assert_eq!(PlanFingerprint::from_proto(ours.to_proto()), ours);
        assert!(ours
            .operators
            .iter()
            .any(|o| o.uid == "count" && o.parallelism == 2));
        let keyed = ours
            .edges
            .iter()
            .find(|e| e.partitioning == "hash")
            .expect("the key_by edge");
        assert!(keyed.record_type.contains("(u64, u64)"), "{keyed:?}");
        assert!(
            binary_version().starts_with("weir "),
            "{}",
            binary_version()
        );
    }

    #[test]
    fn a_worker_of_another_version_is_refused_naming_both_versions() {
        let ours = PlanFingerprint::of(&job(2), "weir 0.1.0 (weir, crc32c 00000001)").unwrap();
        let theirs = PlanFingerprint::of(&job(2), "weir 0.2.0 (weir, crc32c 0000abcd)").unwrap();
        let e = ours
            .check(&theirs, "worker 3 at 10.0.0.7:6124")
            .unwrap_err()
            .to_string();
        assert!(e.contains("worker 3 at 10.0.0.7:6124"), "{e}");
        assert!(e.contains("weir 0.1.0 (weir, crc32c 00000001)"), "{e}");
        assert!(e.contains("weir 0.2.0 (weir, crc32c 0000abcd)"), "{e}");
        assert!(e.contains("the binaries differ"), "{e}");
        assert!(e.contains("same job arguments"), "{e}");
    }

    #[test]
    fn a_worker_that_built_another_plan_is_refused_naming_the_difference() {
        let v = "weir 0.1.0 (weir, crc32c 00000001)";
        let ours = PlanFingerprint::of(&job(2), v).unwrap();
        let theirs = PlanFingerprint::of(&job(3), v).unwrap();
        let e = ours.check(&theirs, "worker 2").unwrap_err().to_string();
        assert!(
            e.contains("parallelism 2 (max 128) here and 3 (max 128) there"),
            "{e}"
        );
        let mut retyped = ours.clone();
        retyped.edges[0].record_type = "u32".into();
        let e = ours.check(&retyped, "worker 2").unwrap_err().to_string();
        assert!(e.contains("edge events"), "{e}");
        assert!(e.contains("u32) there"), "{e}");
    }
}
