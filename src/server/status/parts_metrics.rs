//! The metrics of the master's parts beside the pools': upstream servers by their active
//! checks, the certificates espalier orders, and the fleet (`[server.cluster]`).
//!
//! Owns: those metric names and their help. Must not touch: the pools' and sites' metrics
//! (the parent's and `super::super::meters`').

use super::{Status, UpstreamServerStatus};

/// A metric of each upstream server: its name, its help, and its value.
type ServerSeries = (&'static str, &'static str, fn(&UpstreamServerStatus) -> u64);
use std::fmt::Write;

impl Status {
    /// The fleet (`[server.cluster]`): etcd reachable or for how long not, the revision
    /// applied here, the members.
    pub(super) fn cluster_metrics(&self, out: &mut String) {
        let Some(c) = &self.cluster else { return };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let now = now.map_or(0, |d| d.as_secs());
        let away = c.unreachable_since.map_or(0, |t| now.saturating_sub(t)) as i64;
        for (name, help, value) in [
            (
                "espalier_cluster_reachable",
                "1 when the fleet's etcd answers this member, 0 when not",
                i64::from(c.reachable),
            ),
            (
                "espalier_cluster_unreachable_seconds",
                "how long the fleet's etcd has not answered this member (0 when it does)",
                away,
            ),
            (
                "espalier_cluster_revision",
                "the revision of the fleet's configuration applied on this member",
                c.revision,
            ),
            (
                "espalier_cluster_members",
                "the fleet's members, as their keys in etcd say",
                c.members.len() as i64,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
    }

    /// Each ordered certificate's time left, for an alert before it ends.
    pub(super) fn certificate_metrics(&self, out: &mut String) {
        if self.certificates.is_empty() {
            return;
        }
        let name = "espalier_certificate_expiry_seconds";
        let _ = writeln!(out, "# HELP {name} seconds until the certificate espalier ordered for the host name ends (negative: ended; absent: none yet)\n# TYPE {name} gauge");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        for c in &self.certificates {
            if let Some(end) = c.not_after {
                let _ = writeln!(out, "{name}{{name=\"{}\"}} {}", c.name, end as i64 - now);
            }
        }
        let name = "espalier_certificate_order_failing";
        let _ = writeln!(out, "# HELP {name} 1 when the last order of the host name's certificate failed\n# TYPE {name} gauge");
        for c in &self.certificates {
            let failing = u8::from(c.state == "failing");
            let _ = writeln!(out, "{name}{{name=\"{}\"}} {failing}", c.name);
        }
    }

    /// Each upstream server's state by the active check: 1 up (or not checked), 0 down.
    pub(super) fn upstream_metrics(&self, out: &mut String) {
        if self.upstreams.is_empty() {
            return;
        }
        let series: [ServerSeries; 2] = [
            ("espalier_upstream_server_up", "1 when the upstream server is up by its active check (or has none), 0 when it is down", |s| u64::from(s.state != "down")),
            ("espalier_upstream_server_ejected_by", "worker processes that have the upstream server ejected now, after failures in their traffic", |s| s.ejected_by as u64),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for g in &self.upstreams {
                for s in &g.servers {
                    let (upstream, server) = (&g.name, &s.address);
                    let _ = writeln!(
                        out,
                        "{name}{{upstream=\"{upstream}\",server=\"{server}\"}} {}",
                        value(s)
                    );
                }
            }
        }
    }
}
