//! Soft affinity: when may a soft-affinity worker run outside its home node? The case study:
//! "if other NUMA nodes have available cycles, the threads from an IIS worker process may get
//! scheduled to a NUMA node that was not configured for affinity."
//!
//! Owns: the decision, a pure function of per-node load, with its thresholds and hysteresis.
//! The supervisor samples the load (`/proc/stat`) and applies the decision to the worker's
//! threads. Must not touch: anything but numbers.
//!
//! The rule, evaluated once a second:
//! - **widen** when the home node has been at least [`SATURATED`] busy for [`SUSTAIN`]
//!   consecutive samples and some other node is at most [`IDLE`] busy: the worker may also use
//!   the CPUs of every node that idle;
//! - **narrow** back to the home node when the home node has dropped to [`CALM`] or below for
//!   [`SUSTAIN`] samples, or when every node it widened to is itself at least [`SATURATED`];
//! - otherwise keep. The gap between SATURATED (0.90) and CALM (0.60), and the sustain count,
//!   keep a worker from flapping at the threshold.

/// Busy fraction at which a node counts as saturated.
pub const SATURATED: f64 = 0.90;
/// Busy fraction at or below which another node has cycles to lend.
pub const IDLE: f64 = 0.50;
/// Busy fraction at or below which the home node has calmed down.
pub const CALM: f64 = 0.60;
/// Consecutive one-second samples a condition must hold.
pub const SUSTAIN: u32 = 2;

/// What the supervisor remembers about one soft worker between samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SoftState {
    /// Nodes the worker was widened to (empty: home only).
    pub widened_to: Vec<u32>,
    saturated_for: u32,
    calm_for: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Allow these nodes besides home.
    Widen(Vec<u32>),
    Narrow,
}

/// Decides for one worker homed on `home`, given each node's busy fraction over the last
/// second. `candidates` are the nodes the pool's `cpus` allow it on.
pub fn decide(
    state: &mut SoftState,
    home: u32,
    load: &[(u32, f64)],
    candidates: &[u32],
) -> Decision {
    let busy = |n: u32| {
        load.iter()
            .find(|(id, _)| *id == n)
            .map_or(0.0, |(_, b)| *b)
    };
    let home_busy = busy(home);
    state.saturated_for = if home_busy >= SATURATED {
        state.saturated_for + 1
    } else {
        0
    };
    state.calm_for = if home_busy <= CALM {
        state.calm_for + 1
    } else {
        0
    };
    if state.widened_to.is_empty() {
        if state.saturated_for >= SUSTAIN {
            let idle: Vec<u32> = candidates
                .iter()
                .copied()
                .filter(|&n| n != home && busy(n) <= IDLE)
                .collect();
            if !idle.is_empty() {
                state.widened_to = idle.clone();
                state.saturated_for = 0;
                return Decision::Widen(idle);
            }
        }
        return Decision::Keep;
    }
    let others_full = state.widened_to.iter().all(|&n| busy(n) >= SATURATED);
    if state.calm_for >= SUSTAIN || others_full {
        state.widened_to.clear();
        state.calm_for = 0;
        return Decision::Narrow;
    }
    Decision::Keep
}

/// Per-CPU (busy, total) jiffies from `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Vec<(u32, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cpu")?;
            let (id, fields) = rest.split_once(' ')?;
            let id: u32 = id.parse().ok()?;
            let v: Vec<u64> = fields
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal …
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            Some((id, total - idle, total))
        })
        .collect()
}

/// Busy fraction per node between two `/proc/stat` samples.
pub fn node_load(
    before: &[(u32, u64, u64)],
    after: &[(u32, u64, u64)],
    node_of: impl Fn(u32) -> Option<u32>,
) -> Vec<(u32, f64)> {
    let mut acc: Vec<(u32, u64, u64)> = Vec::new();
    for &(cpu, busy, total) in after {
        let Some(&(_, b0, t0)) = before.iter().find(|(c, _, _)| *c == cpu) else {
            continue;
        };
        let Some(node) = node_of(cpu) else { continue };
        let (db, dt) = (busy.saturating_sub(b0), total.saturating_sub(t0));
        match acc.iter_mut().find(|(n, _, _)| *n == node) {
            Some(e) => {
                e.1 += db;
                e.2 += dt;
            }
            None => acc.push((node, db, dt)),
        }
    }
    acc.into_iter()
        .map(|(n, b, t)| (n, if t == 0 { 0.0 } else { b as f64 / t as f64 }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a sequence of per-second loads for a worker on node 0 of a 3-node machine.
    fn run(loads: &[[f64; 3]]) -> Vec<Decision> {
        let mut st = SoftState::default();
        loads
            .iter()
            .map(|l| decide(&mut st, 0, &[(0, l[0]), (1, l[1]), (2, l[2])], &[0, 1, 2]))
            .collect()
    }

    #[test]
    fn decisions_table() {
        use Decision::*;
        // (loads per second, expected decisions)
        let cases: Vec<(Vec<[f64; 3]>, Vec<Decision>)> = vec![
            // Saturated home, idle neighbours: widen after SUSTAIN seconds, to the idle ones.
            (
                vec![[0.95, 0.2, 0.7], [0.97, 0.1, 0.8]],
                vec![Keep, Widen(vec![1])],
            ),
            // A single busy second is not enough.
            (
                vec![[0.95, 0.1, 0.1], [0.5, 0.1, 0.1], [0.95, 0.1, 0.1]],
                vec![Keep, Keep, Keep],
            ),
            // Nobody has cycles to lend: stay home.
            (
                vec![[0.99, 0.95, 0.9], [0.99, 0.95, 0.9], [0.99, 0.95, 0.9]],
                vec![Keep, Keep, Keep],
            ),
            // Widened, then the home calms down for SUSTAIN seconds: narrow.
            (
                vec![
                    [0.95, 0.1, 0.1],
                    [0.95, 0.1, 0.1],
                    [0.5, 0.3, 0.3],
                    [0.4, 0.3, 0.3],
                ],
                vec![Keep, Widen(vec![1, 2]), Keep, Narrow],
            ),
            // Widened, home between CALM and SATURATED: hysteresis keeps it widened.
            (
                vec![
                    [0.95, 0.1, 0.1],
                    [0.95, 0.1, 0.1],
                    [0.75, 0.3, 0.3],
                    [0.8, 0.3, 0.3],
                ],
                vec![Keep, Widen(vec![1, 2]), Keep, Keep],
            ),
            // Widened, then the lending nodes fill up: narrow at once.
            (
                vec![[0.95, 0.1, 0.9], [0.95, 0.1, 0.9], [0.95, 0.92, 0.9]],
                vec![Keep, Widen(vec![1]), Narrow],
            ),
        ];
        for (loads, want) in cases {
            assert_eq!(run(&loads), want, "loads {loads:?}");
        }
    }

    #[test]
    fn candidates_limit_where_it_may_go() {
        let mut st = SoftState::default();
        let load = [(0, 0.99), (1, 0.0), (2, 0.0)];
        decide(&mut st, 0, &load, &[0, 2]);
        assert_eq!(
            decide(&mut st, 0, &load, &[0, 2]),
            Decision::Widen(vec![2]),
            "node 1 is outside the pool's cpus"
        );
    }

    #[test]
    fn load_from_proc_stat() {
        let a = parse_proc_stat("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1\n");
        assert_eq!(a, vec![(0, 10, 50), (1, 10, 50)]);
        let b = parse_proc_stat("cpu0 95 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 140 0 0 0 0 0 0\n");
        let l = node_load(&a, &b, Some);
        assert_eq!(l, vec![(0, 1.0), (1, 0.0)]);
        let one = node_load(&a, &b, |_| Some(0));
        assert_eq!(
            one,
            vec![(0, 90.0 / 190.0)],
            "jiffies summed over the node, not averaged"
        );
    }
}
