//! What each kind of completion does to its connection's state: a receive's buffer kept (or
//! given back, the receive armed again when it ended), a send's progress and an orphan's
//! last bytes, a readiness poll, a timer — and a connection removed once nothing of it is in
//! flight.
//!
//! Owns: those reactions. Must not touch: what is submitted when (`super`'s driver).

use super::*;

impl State {
    pub(super) fn received(&mut self, key: usize, result: i32, flags: u32) {
        let buffer = cqueue::buffer_select(flags);
        if buffer.is_some() {
            self.buffers.taken();
        }
        let Some(sock) = self.socks.get_mut(key) else {
            if let Some(id) = buffer {
                self.buffers.give_back(id);
            }
            return;
        };
        if !cqueue::more(flags) {
            sock.receiving = Receiving::Idle;
        }
        match (result, buffer) {
            (n, Some(id)) if n > 0 => {
                if sock.orphan {
                    self.buffers.give_back(id);
                } else {
                    sock.received.push_back((id, n as u32));
                    if sock.received.len() >= MAX_HELD {
                        self.cancel_receive(key);
                    }
                }
            }
            (0, _) => sock.eof = true,
            // Out of buffers (the reader arms again, on its own buffer if they are still
            // out), or stopped.
            (e, _) if -e == libc::ENOBUFS || -e == libc::ECANCELED => {}
            (e, _) => sock.recv_error = Some(-e),
        }
        if let Some(w) = self.socks[key].reader.take() {
            self.wake.push(w);
        }
    }

    pub(super) fn received_own(&mut self, key: usize, result: i32) {
        let Some(sock) = self.socks.get_mut(key) else {
            return;
        };
        sock.receiving = Receiving::Idle;
        match result {
            n if n > 0 => {
                sock.own_len = n as usize;
                sock.own_read = 0;
            }
            0 => sock.eof = true,
            e if -e == libc::ECANCELED => {}
            e => sock.recv_error = Some(-e),
        }
        if let Some(w) = sock.reader.take() {
            self.wake.push(w);
        }
    }

    pub(super) fn sent(&mut self, key: usize, result: i32) {
        let Some(sock) = self.socks.get_mut(key) else {
            return;
        };
        if result <= 0 {
            sock.send_error = Some(if result == 0 { libc::EPIPE } else { -result });
            sock.sending = false;
            sock.queued.clear();
        } else {
            sock.flown += result as usize;
            if sock.flown < sock.flying.len() {
                self.send_rest(key);
                return;
            }
            sock.flying.clear();
            sock.sending = false;
            if !sock.queued.is_empty() {
                self.start_send(key);
                return;
            }
        }
        let sock = &mut self.socks[key];
        if let Some(w) = sock.writer.take() {
            self.wake.push(w);
        }
        if sock.orphan && sock.timing {
            // All out (or failed) in time: the timer goes.
            let entry = opcode::TimeoutRemove::new(user_data(key, TIMER))
                .build()
                .user_data(user_data(key, CANCEL));
            self.push(entry);
        }
    }

    /// A dropped connection still has bytes to send: they get [`State::orphan_limit`].
    pub(super) fn send_out_orphan(&mut self, key: usize) {
        let sock = &mut self.socks[key];
        if sock.send_error.is_some() || (!sock.sending && sock.queued.is_empty()) {
            return;
        }
        if !sock.sending {
            self.start_send(key);
        }
        self.socks[key].timing = true;
        let entry = opcode::Timeout::new(&self.orphan_limit)
            .build()
            .user_data(user_data(key, TIMER));
        self.push(entry);
    }

    /// The orphan's timer ended: fired (its send is given up), or removed (all was sent).
    pub(super) fn orphan_timed_out(&mut self, key: usize, result: i32) {
        let Some(sock) = self.socks.get_mut(key) else {
            return;
        };
        sock.timing = false;
        if -result == libc::ETIME && sock.sending {
            sock.queued.clear();
            self.cancel(key, SEND);
        }
    }

    pub(super) fn polled(&mut self, key: usize) {
        if let Some(sock) = self.socks.get_mut(key) {
            sock.polling = false;
            sock.writable = !std::mem::take(&mut sock.poll_cancelled);
            if let Some(w) = sock.writer.take() {
                self.wake.push(w);
            }
        }
    }

    /// Hands back every unread buffer of `key`.
    pub(super) fn drop_received(&mut self, key: usize) {
        let sock = &mut self.socks[key];
        let held: Vec<(u16, u32)> = sock.received.drain(..).collect();
        sock.first_read = 0;
        for (id, _) in held {
            self.buffers.give_back(id);
        }
    }

    /// Removes a connection nobody holds once nothing of it is in flight; its descriptor is
    /// closed by the ring's next submission rather than by a system call of its own.
    pub(super) fn remove_if_done(&mut self, key: usize) {
        if self.socks.get(key).is_some_and(|s| s.orphan && s.idle()) {
            if let Some(fd) = self.socks.remove(key).fd {
                let entry = opcode::Close::new(types::Fd(fd.into_raw_fd()))
                    .build()
                    .user_data(user_data(0, CLOSE));
                self.push(entry);
            }
        }
    }
}
