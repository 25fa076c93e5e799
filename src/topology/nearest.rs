//! Ranking by distance: which of some things placed on NUMA nodes (an app's processes, another
//! pool's threads) a worker on a given node uses first — pure.
//!
//! Owns: [`Tiers`] and [`tiers_for`]. Must not touch: what is ranked (app endpoints for the
//! proxy, hand-off sockets for `handoff`) or the distance table's source (sysfs, through
//! [`super::Topology`]).

use serde::{Deserialize, Serialize};

/// The app processes a front worker may forward to, grouped by distance from its node:
/// `tiers[0]` the nearest (its own node, when it has a ready process), then the next
/// nearest, … A thread uses the first tier that has a process; a forward off its own node is
/// counted as remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiers<E> {
    pub tiers: Vec<Vec<E>>,
    /// Whether `tiers[0]` is the front's own node (or locality is unknown: no home node).
    pub local: bool,
}

impl<E> Default for Tiers<E> {
    fn default() -> Self {
        Tiers {
            tiers: Vec::new(),
            local: true,
        }
    }
}

/// The tiers for a front worker on `front_node`, from the ready app processes `(node,
/// endpoint)`, by the kernel's distance table (`distance(a, b)`). A front or app with no home
/// node (`placement = "none"`) is equally near to all. The same ranking places a connection
/// handed to another pool (see [`crate::handoff`]), with hand-off sockets as the endpoints.
pub fn tiers_for<E: Clone>(
    front_node: Option<u32>,
    apps: &[(Option<u32>, E)],
    distance: impl Fn(u32, u32) -> u32,
) -> Tiers<E> {
    let mut ranked: Vec<(u32, &E)> = apps
        .iter()
        .map(|(node, e)| {
            let d = match (front_node, node) {
                (Some(f), Some(a)) => distance(f, *a),
                _ => 0,
            };
            (d, e)
        })
        .collect();
    ranked.sort_by_key(|&(d, _)| d);
    let mut tiers: Vec<Vec<E>> = Vec::new();
    let mut last = None;
    for (d, e) in ranked {
        if last != Some(d) {
            tiers.push(Vec::new());
            last = Some(d);
        }
        tiers.last_mut().expect("pushed above").push(e.clone());
    }
    let local = front_node.is_none_or(|f| apps.iter().any(|(n, _)| n.is_none_or(|n| n == f)));
    Tiers { tiers, local }
}

/// The nearest tier with the thread on `cpu` (if any) as a tier of its own before the rest:
/// a connection handed to the same CPU stays in its caches.
pub fn same_cpu_first<E>(tiers: Tiers<(u32, E)>, cpu: u32) -> Tiers<E> {
    let paths = |tier: Vec<(u32, E)>| tier.into_iter().map(|(_, p)| p).collect();
    let mut out: Vec<Vec<E>> = Vec::new();
    let mut rest_of = tiers.tiers.into_iter();
    if let Some(nearest) = rest_of.next() {
        let (same, rest): (Vec<_>, Vec<_>) = nearest.into_iter().partition(|(c, _)| *c == cpu);
        out.extend(
            [same, rest]
                .into_iter()
                .filter(|t| !t.is_empty())
                .map(paths),
        );
    }
    out.extend(rest_of.map(paths));
    Tiers {
        tiers: out,
        local: tiers.local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::Endpoint;
    use std::net::SocketAddr;

    fn ep(port: u16) -> Endpoint {
        Endpoint::Tcp(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// A 4-node ring: 10 to itself, 20 to its neighbours, 30 across.
    fn ring(a: u32, b: u32) -> u32 {
        match (a as i32 - b as i32).rem_euclid(4) {
            0 => 10,
            1 | 3 => 20,
            _ => 30,
        }
    }

    #[test]
    fn own_node_first_then_by_distance() {
        let apps = vec![
            (Some(0), ep(1)),
            (Some(1), ep(2)),
            (Some(2), ep(3)),
            (Some(3), ep(4)),
            (Some(1), ep(5)),
        ];
        let t = tiers_for(Some(1), &apps, ring);
        assert!(t.local);
        assert_eq!(
            t.tiers,
            vec![vec![ep(2), ep(5)], vec![ep(1), ep(3)], vec![ep(4)]]
        );
    }

    #[test]
    fn a_node_without_its_app_falls_back_to_the_nearest() {
        let apps = vec![(Some(0), ep(1)), (Some(2), ep(3))];
        let t = tiers_for(Some(3), &apps, ring);
        // Node 3: node 0 is a neighbour (20), node 2 too (20): one tier of both.
        assert_eq!(t.tiers, vec![vec![ep(1), ep(3)]]);
        assert!(
            !t.local,
            "node 3 has no process of its own: every forward is remote"
        );
        let t = tiers_for(Some(1), &[(Some(3), ep(4)), (Some(0), ep(1))], ring);
        assert_eq!(t.tiers, vec![vec![ep(1)], vec![ep(4)]]);
        assert!(!t.local);
    }

    #[test]
    fn no_home_node_means_one_tier() {
        let apps = vec![(None, ep(1)), (None, ep(2))];
        assert_eq!(
            tiers_for(Some(0), &apps, ring).tiers,
            vec![vec![ep(1), ep(2)]]
        );
        assert!(tiers_for(Some(0), &apps, ring).local);
        assert_eq!(
            tiers_for::<Endpoint>(None, &[], ring).tiers,
            Vec::<Vec<Endpoint>>::new()
        );
    }

    #[test]
    fn the_same_cpu_goes_first_then_its_tier() {
        let p = |s: &str| std::path::PathBuf::from(s);
        let tiers = Tiers {
            tiers: vec![
                vec![(0, p("a0")), (1, p("a1")), (2, p("a2"))],
                vec![(4, p("b4"))],
            ],
            local: true,
        };
        let t = same_cpu_first(tiers.clone(), 1);
        assert_eq!(
            t.tiers,
            vec![vec![p("a1")], vec![p("a0"), p("a2")], vec![p("b4")]]
        );
        let t = same_cpu_first(tiers, 7);
        assert_eq!(
            t.tiers,
            vec![vec![p("a0"), p("a1"), p("a2")], vec![p("b4")]]
        );
    }
}
