//! Planning: from the logical graph to tasks (docs/architecture.md §1).
//!
//! * Parallelism is resolved per operator (its own or the job's) and checked against the
//!   max parallelism; uids are resolved (explicit or `<name>-<index>`) and must be unique.
//! * `Default` partitioning becomes forward for equal parallelism, rebalance otherwise.
//! * An edge is *chained* — a plain call inside one task, no channel — when it is forward
//!   and neither side fans in or out. Each chain × subtask is one task.

use std::collections::HashSet;

use crate::checkpoint::storage::validate_name;
use crate::error::{Error, Result};
use crate::runtime::config::JobConfig;
use crate::runtime::graph::{JobGraph, Partitioning};
use crate::state::key_group::MAX_MAX_PARALLELISM;

/// A task of the physical graph.
#[derive(Clone)]
pub(crate) struct TaskPlan {
    pub chain: Vec<usize>,
    pub subtask: u32,
    pub parallelism: u32,
    pub name: String,
}

/// The resolved physical plan.
#[derive(Clone)]
pub(crate) struct Plan {
    pub uids: Vec<String>,
    pub parallelism: Vec<u32>,
    /// `chained[e]`: edge `e` is inside a chain.
    pub chained: Vec<bool>,
    pub partitioning: Vec<Partitioning>,
    pub tasks: Vec<TaskPlan>,
}

/// Resolves `graph` under `cfg` into tasks; see the module docs.
pub(crate) fn plan(graph: &JobGraph, cfg: &JobConfig) -> Result<Plan> {
    if graph.nodes.is_empty() {
        return Err(Error::InvalidJob("the job has no operators".into()));
    }
    if cfg.max_parallelism == 0 || cfg.max_parallelism > MAX_MAX_PARALLELISM {
        return Err(Error::InvalidJob(format!(
            "max parallelism {} is outside 1..={MAX_MAX_PARALLELISM}",
            cfg.max_parallelism
        )));
    }
    let mut parallelism = Vec::new();
    let mut uids = Vec::new();
    let mut seen = HashSet::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        let p = n.parallelism.unwrap_or(cfg.parallelism);
        if p == 0 || p > cfg.max_parallelism {
            return Err(Error::InvalidJob(format!(
                "operator '{}' has parallelism {p}; it must be between 1 and the max parallelism {}",
                n.name, cfg.max_parallelism
            )));
        }
        parallelism.push(p);
        let uid = n.uid.clone().unwrap_or_else(|| format!("{}-{i}", n.name));
        validate_name("operator uid", &uid)?;
        if !seen.insert(uid.clone()) {
            return Err(Error::InvalidJob(format!(
                "two operators share the uid '{uid}'; uids must be unique"
            )));
        }
        uids.push(uid);
    }
    let mut partitioning = Vec::new();
    let mut chained = Vec::new();
    for e in &graph.edges {
        let (pf, pt) = (parallelism[e.from], parallelism[e.to]);
        let p = match e.partitioning {
            Partitioning::Default if pf == pt => Partitioning::Forward,
            Partitioning::Default => Partitioning::Rebalance,
            Partitioning::Forward if pf != pt => {
                return Err(Error::InvalidJob(format!(
                    "forward edge from '{}' (parallelism {pf}) to '{}' (parallelism {pt}) needs equal parallelism",
                    graph.nodes[e.from].name, graph.nodes[e.to].name
                )))
            }
            other => other,
        };
        partitioning.push(p);
        chained.push(
            p == Partitioning::Forward
                && graph.nodes[e.to].inputs.len() == 1
                && graph.nodes[e.from].outputs.len() == 1,
        );
    }
    let mut tasks = Vec::new();
    for (head, n) in graph.nodes.iter().enumerate() {
        let is_chained_in = n.inputs.len() == 1 && chained[n.inputs[0]];
        if is_chained_in {
            continue;
        }
        let mut chain = vec![head];
        let mut cur = head;
        while graph.nodes[cur].outputs.len() == 1 && chained[graph.nodes[cur].outputs[0]] {
            cur = graph.edges[graph.nodes[cur].outputs[0]].to;
            chain.push(cur);
        }
        let p = parallelism[head];
        let label = chain
            .iter()
            .map(|&c| graph.nodes[c].name.as_str())
            .collect::<Vec<_>>()
            .join(" -> ");
        for s in 0..p {
            tasks.push(TaskPlan {
                chain: chain.clone(),
                subtask: s,
                parallelism: p,
                name: format!("{label} ({}/{p})", s + 1),
            });
        }
    }
    Ok(Plan {
        uids,
        parallelism,
        chained,
        partitioning,
        tasks,
    })
}
