//! When the store's certificates are looked at and ordered again: a failed order's back-off
//! (doubling, an hour at least after a rate limit), a pair's renewal time from its files
//! (jittered), and when a name is looked at next.
//!
//! Owns: that schedule, pure but for reading a pair's files. Must not touch: ordering
//! (`super::acme`).

use std::path::Path;
use std::time::{Duration, SystemTime};

/// The first retry after a failed order, doubled after each failure in a row up to
/// [`LONGEST_BACK_OFF`].
const FIRST_BACK_OFF: Duration = Duration::from_secs(60);
pub(super) const LONGEST_BACK_OFF: Duration = Duration::from_secs(6 * 3600);

/// The least wait after a directory said its rate limit was reached
/// (`urn:ietf:params:acme:error:rateLimited`): public CAs count orders per hour and per
/// week, so a minute's back-off would only spend more of the allowance.
pub(super) const RATE_LIMITED_BACK_OFF: Duration = Duration::from_secs(3600);

/// The wait after a first failure whose cause is the directory refusing a request's nonce
/// (`urn:ietf:params:acme:error:badNonce`) once the client's own retries with fresh nonces
/// ran out: a hiccup of the exchange, not of the name or the account (RFC 8555 §6.5 has
/// clients try again; pebble refuses 5 % of nonces on purpose), so the order is made again
/// in seconds rather than a minute.
pub(super) const BAD_NONCE_BACK_OFF: Duration = Duration::from_secs(5);

/// How a member says that another member's order of the name failed (its cause after it):
/// the fleet's failure, which lives under a lease for the first back-off's time.
pub(super) const FLEET_FAILED: &str = "the fleet's order failed: ";

/// How long a name waits after `failures` failed orders in a row, the last one's cause
/// `cause`.
pub(super) fn back_off(failures: u32, cause: &str) -> Duration {
    // A fleet's nonce failure seen by a member (the one that ordered, too, when its retry
    // comes before etcd lets the failure's lease go — its lessor looks every 500 ms) is
    // not a failure of its own: counted as one, it doubled the wait to two minutes.
    if (failures <= 1 || cause.starts_with(FLEET_FAILED)) && cause.contains("badNonce") {
        return BAD_NONCE_BACK_OFF;
    }
    let doubled = FIRST_BACK_OFF * 2u32.saturating_pow(failures.saturating_sub(1)).min(1 << 10);
    let wait = doubled.min(LONGEST_BACK_OFF);
    if cause.contains("rateLimited") {
        wait.max(RATE_LIMITED_BACK_OFF)
    } else {
        wait
    }
}

/// A task looks at its pair again at least this often while it sleeps (a pair replaced by
/// hand is then seen, and a clock that jumped is caught up).
pub(super) const LOOK_AGAIN: Duration = Duration::from_secs(3600);

/// When a name whose pair is `pair` is looked at next: when it is due, but within
/// [`LOOK_AGAIN`] (a pair replaced by hand is then seen, and a clock that jumped caught up);
/// at once when it has none.
pub(super) fn next_look(pair: Option<(SystemTime, SystemTime)>) -> SystemTime {
    let now = SystemTime::now();
    pair.map_or(now, |(due, _)| due.min(now + LOOK_AGAIN))
}

/// `name`'s chain in `store`, when both its files are there.
pub(super) fn read_pair(store: &Path, name: &str) -> Option<Vec<u8>> {
    let stem = crate::certs::store::stem(name);
    std::fs::metadata(store.join(format!("{stem}.key"))).ok()?;
    std::fs::read(store.join(format!("{stem}.pem"))).ok()
}

/// When `name`'s pair in `store` is due for renewal, jittered by up to a fiftieth of its
/// lifetime (names issued together are not all renewed in the same second), and its end;
/// `None` when it has none, or one that cannot be read.
pub(super) fn pair_due(store: &Path, name: &str) -> Option<(SystemTime, SystemTime)> {
    let chain = read_pair(store, name)?;
    let (from, until) = crate::certs::renewal::lifetime(&chain).ok()?;
    let life = until.duration_since(from).unwrap_or_default();
    let jitter = life.mul_f64(fastrand::f64() / 50.0);
    Some((
        crate::certs::renewal::renew_at(from, until).checked_sub(jitter)?,
        until,
    ))
}
