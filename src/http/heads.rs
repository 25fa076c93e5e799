//! The heads of a stream's answer on their way from its forwarder to the stream: the
//! forwarder puts each in ([`AnswerHeads::send`]: an interim `100 Continue`, then the
//! answer's), structured, while the body goes through the pipe; the stream's relay takes
//! them out ([`AnswerHeads::recv`]) and makes its response from their index — no text
//! written to be parsed back (#56).
//!
//! Why not a channel: both ends run in the one task of the stream's exchange, so the heads
//! live in its frame — no allocation per request (tokio's unbounded channel made two), and a
//! `Notify` to wake the relay. At most a few heads pass (the forwarder sends one `100` and
//! one answer), so the queue holds two inline.
//!
//! Owns: the queue and its end. Must not touch: what a head says (`features::head`), or the
//! pipe (see `stream_forward`).

use crate::features::head::ClientHead;
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};

/// The heads sent and not yet taken, and whether the forwarder is done.
#[derive(Default)]
pub struct AnswerHeads {
    queue: RefCell<SmallVec<[ClientHead; 2]>>,
    closed: Cell<bool>,
    ready: tokio::sync::Notify,
}

impl AnswerHeads {
    /// A head for the stream, after those sent before it.
    pub fn send(&self, head: ClientHead) {
        self.queue.borrow_mut().push(head);
        self.ready.notify_one();
    }

    /// The forwarder is done: no head comes after those sent.
    pub fn close(&self) {
        self.closed.set(true);
        self.ready.notify_one();
    }

    /// The first head not yet taken, if one was sent.
    pub fn take(&self) -> Option<ClientHead> {
        let mut queue = self.queue.borrow_mut();
        (!queue.is_empty()).then(|| queue.remove(0))
    }

    /// The next head, once it is sent; `None` when the forwarder is done without another.
    pub async fn recv(&self) -> Option<ClientHead> {
        loop {
            if let Some(head) = self.take() {
                return Some(head);
            }
            if self.closed.get() {
                return None;
            }
            // A `notify_one` with nobody waiting is kept for the next wait: none is lost.
            self.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_come_out_in_order_and_the_end_after_them() {
        let heads = AnswerHeads::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let waiting = async {
                let status = |h: ClientHead| h.index.map_or(0, |i| i.status());
                let first = heads.recv().await.map(status);
                let second = heads.recv().await.map(status);
                (first, second, heads.recv().await.is_none())
            };
            let sending = async {
                tokio::task::yield_now().await;
                heads.send(ClientHead::bare(100, "Continue", true));
                heads.send(ClientHead::bare(200, "OK", true));
                tokio::task::yield_now().await;
                heads.close();
            };
            let (got, ()) = tokio::join!(waiting, sending);
            assert_eq!(got, (Some(100), Some(200), true));
        });
    }
}
