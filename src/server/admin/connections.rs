//! The admin endpoint's open connections, bounded: idle ones give way to an operator's
//! request.
//!
//! Owns: [`OpenConnections`]. Must not touch: what a connection asks (that is the endpoint's).

/// The admin connections open now, oldest first: an operator's request must get in while
/// idle connections (any local user can open them) fill the bound, so when it is full the
/// oldest that has not sent a whole request head, or whose answer is sent, is closed for the
/// newcomer. A request takes milliseconds to arrive, so it is evicted only if a flood of
/// newcomers outpaces it.
#[derive(Default)]
pub(super) struct OpenConnections {
    list: std::sync::Mutex<std::collections::VecDeque<OpenConnection>>,
    ids: std::sync::atomic::AtomicU64,
}

struct OpenConnection {
    id: u64,
    /// Its request head has arrived and its answer is not yet sent: it is being answered,
    /// not idle.
    asked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::AbortHandle,
}

impl OpenConnections {
    pub(super) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn add(
        &self,
        id: u64,
        asked: std::sync::Arc<std::sync::atomic::AtomicBool>,
        task: tokio::task::AbortHandle,
    ) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        // A task that already ended removed nothing: do not keep it.
        if !task.is_finished() {
            list.push_back(OpenConnection { id, asked, task });
        }
    }

    pub(super) fn remove(&self, id: u64) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|c| c.id != id);
    }

    /// Whether one more connection may be served: under the bound, or once the oldest silent
    /// one is closed (its task aborted, dropping its socket).
    pub(super) fn make_room(&self) -> bool {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|c| !c.task.is_finished());
        if list.len() < MAX_CONNECTIONS {
            return true;
        }
        let silent = list
            .iter()
            .position(|c| !c.asked.load(std::sync::atomic::Ordering::Relaxed));
        match silent.and_then(|k| list.remove(k)) {
            Some(oldest) => {
                oldest.task.abort();
                true
            }
            None => false,
        }
    }
}

/// Admin connections open at once (the page polls with one; a few tabs and scripts fit).
pub(super) const MAX_CONNECTIONS: usize = 32;
