use super::super::acme_schedule::{
    BAD_NONCE_BACK_OFF, FLEET_FAILED, LONGEST_BACK_OFF, RATE_LIMITED_BACK_OFF,
};
use super::*;
use std::time::Duration;

#[test]
fn failures_back_off_doubling_and_a_rate_limit_waits_an_hour() {
    assert_eq!(back_off(1, "refused"), Duration::from_secs(60));
    assert_eq!(back_off(2, "refused"), Duration::from_secs(120));
    assert_eq!(back_off(30, "refused"), LONGEST_BACK_OFF);
    let limited = "the order was refused: API error: too many certificates (urn:ietf:params:acme:error:rateLimited)";
    assert_eq!(back_off(1, limited), RATE_LIMITED_BACK_OFF);
    assert_eq!(back_off(30, limited), LONGEST_BACK_OFF);
    // A nonce refused past the client's own retries: tried again in seconds, once.
    let nonce = "the CSR was refused: API error: JWS has an invalid anti-replay nonce (urn:ietf:params:acme:error:badNonce)";
    assert_eq!(back_off(1, nonce), BAD_NONCE_BACK_OFF);
    assert_eq!(back_off(2, nonce), Duration::from_secs(120));
    // The fleet's nonce failure, seen by a member however many it saw: seconds again.
    let fleets = format!("{FLEET_FAILED}{nonce}");
    assert_eq!(back_off(2, &fleets), BAD_NONCE_BACK_OFF);
    assert_eq!(
        back_off(2, &format!("{FLEET_FAILED}refused")),
        Duration::from_secs(120)
    );
}
