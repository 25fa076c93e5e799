//! A published DNS-01 record and the names it is made of: what the own zone and the RFC 2136
//! updates share.
//!
//! Owns: [`Published`], and making a fully qualified name and a TXT record. Must not touch:
//! where a record goes.

use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record};
use std::str::FromStr;

/// One TXT record published for an order, to be taken away after it.
pub struct Published {
    /// Its name (fully qualified).
    name: Name,
    value: String,
    /// The zone it was added to (RFC 2136: found by asking the server).
    zone: Name,
}

impl Published {
    pub(super) fn new(name: Name, value: &str, zone: Name) -> Published {
        Published {
            name,
            value: value.to_string(),
            zone,
        }
    }

    pub(super) fn name(&self) -> &Name {
        &self.name
    }

    pub(super) fn zone(&self) -> &Name {
        &self.zone
    }

    /// The record itself, with the TTL `ttl` (a deletion matches on the value, not the TTL).
    pub(super) fn as_record(&self, ttl: u32) -> Record {
        txt(&self.name, &self.value, ttl)
    }
}

/// `name` as a fully qualified DNS name.
pub(super) fn fqdn(name: &str) -> Result<Name, String> {
    let mut parsed = Name::from_str(name).map_err(|e| format!("`{name}` is no DNS name: {e}"))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// The TXT record `value` at `name`, kept `ttl` seconds.
pub(super) fn txt(name: &Name, value: &str, ttl: u32) -> Record {
    Record::from_rdata(
        name.clone(),
        ttl,
        RData::TXT(TXT::new(vec![value.to_string()])),
    )
}
