//! 0-RTT (`[server] http3_early_data`): requests a client sends in a resumed connection's
//! first flight, before the handshake completes — a flight an attacker can record and replay.
//!
//! Owns: whether a request came early, and what it takes to answer one: a request whose
//! method is not safe (RFC 9110 §9.2.1) waits until the handshake completes — a replayed
//! flight never completes one, so it never runs; a safe one is answered at once, with
//! `Early-Data: 1` (RFC 8470 §5.1) so that an application can refuse it with 425 where even a
//! GET does something. Must not touch: the endpoint's TLS (`server::quic` turns 0-RTT on) or
//! the answers.

use std::cell::Cell;
use std::rc::Rc;

/// The end of a connection's handshake, taken in 0.5-RTT: whether it completed.
pub type HandshakeEnd = std::pin::Pin<Box<dyn std::future::Future<Output = bool>>>;

/// A connection's handshake, as its requests see it.
pub(super) struct Handshake {
    /// `None` while under way; then whether it completed.
    done: Cell<Option<bool>>,
    ended: tokio::sync::Notify,
}

impl Handshake {
    /// A connection whose handshake was complete before any request (no 0-RTT).
    pub(super) fn complete() -> Rc<Handshake> {
        Rc::new(Handshake {
            done: Cell::new(Some(true)),
            ended: tokio::sync::Notify::new(),
        })
    }

    /// A connection taken in 0.5-RTT: its handshake ends when `accepted` resolves (false
    /// when the connection failed first).
    pub(super) fn pending(accepted: HandshakeEnd) -> Rc<Handshake> {
        let handshake = Rc::new(Handshake {
            done: Cell::new(None),
            ended: tokio::sync::Notify::new(),
        });
        let watched = Rc::clone(&handshake);
        tokio::task::spawn_local(async move {
            let completed = accepted.await;
            watched.done.set(Some(completed));
            watched.ended.notify_waiters();
        });
        handshake
    }

    /// Whether a request accepted now comes early (its handshake still under way).
    pub(super) fn under_way(&self) -> bool {
        self.done.get().is_none()
    }

    /// Whether the handshake completed, once it has ended.
    async fn completed(&self) -> bool {
        loop {
            if let Some(done) = self.done.get() {
                return done;
            }
            self.ended.notified().await;
        }
    }
}

/// Safe methods (RFC 9110 §9.2.1): a client does not ask for a change by them.
fn is_safe(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

/// Readies a request that `came_early` to be answered: a safe one at once, marked
/// `Early-Data: 1`; another once the handshake completed. False when it never did (the
/// connection failed): the request is not answered.
pub(super) async fn admit(
    parts: &mut http::request::Parts,
    came_early: bool,
    handshake: &Handshake,
) -> bool {
    if !came_early {
        return true;
    }
    if is_safe(&parts.method) {
        let one = http::HeaderValue::from_static("1");
        parts.headers.insert("early-data", one);
        return true;
    }
    handshake.completed().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str) -> http::request::Parts {
        let request = http::Request::builder().method(method).uri("/").body(());
        request.unwrap().into_parts().0
    }

    #[tokio::test(flavor = "current_thread")]
    async fn early_safe_requests_are_marked_and_others_wait_for_the_handshake() {
        let handshake = Rc::new(Handshake {
            done: Cell::new(None),
            ended: tokio::sync::Notify::new(),
        });
        let mut get = parts("GET");
        assert!(admit(&mut get, true, &handshake).await);
        assert_eq!(get.headers["early-data"], "1");
        // A POST waits: not answered before the handshake ends, and not marked.
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let waiting = Rc::clone(&handshake);
                let post = tokio::task::spawn_local(async move {
                    let mut post = parts("POST");
                    (admit(&mut post, true, &waiting).await, post)
                });
                tokio::task::yield_now().await;
                assert!(!post.is_finished());
                handshake.done.set(Some(true));
                handshake.ended.notify_waiters();
                let (admitted, post) = post.await.unwrap();
                assert!(admitted && !post.headers.contains_key("early-data"));
            })
            .await;
        // After the handshake, nothing is early; a failed one answers no waiting request.
        let mut late = parts("DELETE");
        assert!(admit(&mut late, false, &handshake).await);
        handshake.done.set(Some(false));
        assert!(!admit(&mut parts("PUT"), true, &handshake).await);
    }
}
