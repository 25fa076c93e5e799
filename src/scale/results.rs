//! What a scaling run measured, as the report reads it and `results.json` keeps it.
//!
//! Owns: [`Row`], [`Isolation`], [`ScaleResults`]. Must not touch: measuring (the parent) or
//! rendering (`super::report`).

use super::plan::{Configuration, ScalePlan, Workload};
use super::transport::Transport;
use crate::bench::result::Latency;
use serde::{Deserialize, Serialize};

/// One measurement: a configuration at a step under a workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub workload: Workload,
    pub configuration: Configuration,
    pub units: usize,
    pub cpus: String,
    pub cpu_count: usize,
    pub workers: usize,
    pub rps: f64,
    pub latency_ms: Latency,
    pub errors: u64,
}

/// The isolation experiment's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Isolation {
    pub pool_a_cpus_masked: String,
    pub pool_b_cpus_masked: String,
    pub pool_b_rate: f64,
    pub pool_a_rps_unmasked: f64,
    pub pool_a_rps_masked: f64,
    pub pool_b_unmasked: Latency,
    pub pool_b_masked: Latency,
}

/// Everything the report shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleResults {
    pub date: String,
    pub machine: String,
    pub plan: ScalePlan,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// `--requests`: each cell measured this many responses, not `duration_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    pub connections: usize,
    pub rows: Vec<Row>,
    pub isolation: Option<Isolation>,
    /// How the load reached the server (reports of older versions: HTTP/1.1).
    #[serde(default)]
    pub transport: Transport,
}
