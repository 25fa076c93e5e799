//! The master↔worker control protocol: one line of text per message on the socket pair each
//! worker inherits. The master sends `ping`, `reopen`, `upstreams`, `upstream-health`,
//! `certificate`, `no-certificate` and `hosts`; a worker sends `ready`, `error`, `pong`,
//! `stuck`, `unresponsive`, `ejected`, `meters`, `want-certificate` and `hosts-taken`.
//!
//! Owns: the messages and their one spelling (written with [`Message::line`], read with
//! [`Message::parse`]). Must not touch: what either side does about a message.
//!
//! Why lines of text rather than a binary format: an operator can read them with `strace`,
//! and there are a handful a second at most.

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Master → worker: report your figures (also the health check).
    Ping,
    /// Worker → master: every engine thread is serving.
    Ready { pid: u32 },
    /// Worker → master: it cannot start, and why (its last words).
    Error(String),
    /// Worker → master: every engine thread is turning, and its figures (an app's sd_notify
    /// `WATCHDOG=1`: none).
    Pong(Figures),
    /// Worker → master: these engine threads (`cpuN,…`) have not turned lately; not a pong.
    Stuck(String),
    /// App → master (sd_notify `STOPPING=1`): it is stopping by itself.
    Stopping,
    /// Master → worker: reopen the access logs (SIGUSR1, logrotate's convention).
    Reopen,
    /// Master → front worker: the app processes its threads forward to, nearest first (JSON
    /// of [`crate::topology::nearest::Tiers`]).
    Upstreams(String),
    /// Master → worker: a certificate store pair, new or changed (JSON of
    /// [`crate::certs::store::StoreCert`]).
    Certificate(String),
    /// Front worker → master: this app process (its endpoint, as `Endpoint`'s display
    /// writes it) let several requests in a row time out: a failed ping, whatever its
    /// socket's `connect` says (the kernel completes handshakes for a stopped process).
    Unresponsive(String),
    /// Master → worker: an upstream server's active check changed its state
    /// (`GROUP ADDRESS up|down`).
    UpstreamHealth(String),
    /// Worker → master, after a pong: the upstream servers it has ejected now, `GROUP
    /// ADDRESS` pairs (none: no message; each pong clears the last).
    Ejected(String),
    /// Front worker → master: a request waits for the pool's app, which has no ready
    /// process — start it if it sleeps (see `supervisor::app_on_request`).
    WantApp,
    /// Worker → master (`[server.acme] on_demand`): a handshake is held for this name,
    /// which has no certificate yet — send its pair, or `no-certificate`.
    WantCertificate(String),
    /// Master → worker: this name gets no certificate now (refused, or its order failed);
    /// the handshakes held for it go on, and fail.
    NoCertificate(String),
    /// Worker → master, after a pong: its sites' figures (`metrics = true`), JSON of
    /// `[(site, MeterFigures)]`.
    Meters(String),
    /// Worker → master, after a pong: each response cache's figures, JSON of
    /// `[(store, Counts)]` (`proxy::cache_store::store_counts`).
    Caches(String),
    /// Master → worker: the pool's session ticket keys, rotated (`tls::tickets::encode`).
    TicketKeys(String),
    /// Master → worker: take what this names out of the response caches
    /// (`proxy::cache_purge::Purge::line`).
    Purge(String),
    /// Master → dispatcher: its port's hosts changed (JSON of
    /// [`crate::server::hosts_update::HostsUpdate`]); its threads take them without a restart.
    Hosts(String),
    /// Dispatcher → master: every thread took the hosts of this update's generation.
    HostsTaken(u64),
}

/// What a worker's pong tells of it, over its life: requests served, connection tasks that
/// panicked (and were contained), requests a front forwarded off its node, connections open
/// now, accepted, and accepted on the CPU that received them (`SO_INCOMING_CPU`: steering's
/// hit rate), and a front's queue for its app processes (`max_requests_per_process`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub requests: u64,
    pub panics: u64,
    pub remote: u64,
    pub connections: u64,
    pub accepted: u64,
    pub steered: u64,
    pub queue: crate::proxy::queue::QueueFigures,
    /// How many sets of session ticket keys it took (the one it started with counts).
    pub ticket_keys: u64,
    /// Its response caches' figures (`cache_responses`).
    pub cache: crate::proxy::cache_store::Counts,
}

impl Message {
    /// The message as one line, newline included.
    pub fn line(&self) -> String {
        match self {
            Message::Ping => "ping\n".into(),
            Message::Ready { pid } => format!("ready {pid}\n"),
            // A newline inside would end the message early.
            Message::Error(why) => format!("error {}\n", why.replace('\n', " ")),
            Message::Pong(f) => {
                let (q, c) = (&f.queue, &f.cache);
                format!(
                    "pong {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
                    f.requests,
                    f.panics,
                    f.remote,
                    f.connections,
                    f.accepted,
                    f.steered,
                    q.waiting,
                    q.queued_total,
                    q.rejected_total,
                    q.wait_micros_total,
                    f.ticket_keys,
                    c.hits,
                    c.misses,
                    c.stored,
                    c.evicted,
                    c.bytes,
                    c.entries,
                    c.stale,
                    c.disk_bytes,
                    c.disk_entries
                )
            }
            Message::Stuck(threads) => format!("stuck {threads}\n"),
            Message::Stopping => "stopping\n".into(),
            Message::Reopen => "reopen\n".into(),
            Message::Upstreams(json) => format!("upstreams {}\n", json.replace('\n', " ")),
            Message::UpstreamHealth(what) => {
                format!("upstream-health {}\n", what.replace('\n', " "))
            }
            Message::Ejected(what) => format!("ejected {}\n", what.replace('\n', " ")),
            // JSON escapes the PEM's newlines.
            Message::Certificate(json) => format!("certificate {}\n", json.replace('\n', " ")),
            Message::Unresponsive(endpoint) => {
                format!("unresponsive {}\n", endpoint.replace('\n', " "))
            }
            Message::Meters(json) => format!("meters {}\n", json.replace('\n', " ")),
            Message::Caches(json) => format!("caches {}\n", json.replace('\n', " ")),
            Message::WantCertificate(name) => format!("want-certificate {}\n", one_word(name)),
            Message::WantApp => "want-app\n".to_string(),
            Message::NoCertificate(name) => format!("no-certificate {}\n", one_word(name)),
            // Hex and commas: one word.
            Message::TicketKeys(keys) => format!("ticket-keys {}\n", one_word(keys)),
            // A purge's value is one line (checked where it is asked for).
            Message::Purge(what) => format!("purge {}\n", what.replace('\n', " ")),
            // JSON written by serde_json has no raw newline.
            Message::Hosts(json) => format!("hosts {}\n", json.replace('\n', " ")),
            Message::HostsTaken(generation) => format!("hosts-taken {generation}\n"),
        }
    }

    /// Reads one line (with or without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Message> {
        let line = line.trim_end();
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "ping" => Message::Ping,
            "ready" => Message::Ready {
                pid: rest.parse().unwrap_or(0),
            },
            "error" => Message::Error(rest.to_string()),
            "pong" => {
                let mut n = rest.split(' ').map(|n| n.parse().unwrap_or(0));
                Message::Pong(Figures {
                    requests: n.next().unwrap_or(0),
                    panics: n.next().unwrap_or(0),
                    remote: n.next().unwrap_or(0),
                    connections: n.next().unwrap_or(0),
                    accepted: n.next().unwrap_or(0),
                    steered: n.next().unwrap_or(0),
                    queue: crate::proxy::queue::QueueFigures {
                        waiting: n.next().unwrap_or(0),
                        queued_total: n.next().unwrap_or(0),
                        rejected_total: n.next().unwrap_or(0),
                        wait_micros_total: n.next().unwrap_or(0),
                    },
                    ticket_keys: n.next().unwrap_or(0),
                    cache: crate::proxy::cache_store::Counts {
                        hits: n.next().unwrap_or(0),
                        misses: n.next().unwrap_or(0),
                        stored: n.next().unwrap_or(0),
                        evicted: n.next().unwrap_or(0),
                        bytes: n.next().unwrap_or(0),
                        entries: n.next().unwrap_or(0),
                        stale: n.next().unwrap_or(0),
                        disk_bytes: n.next().unwrap_or(0),
                        disk_entries: n.next().unwrap_or(0),
                    },
                })
            }
            "stuck" => Message::Stuck(rest.to_string()),
            "stopping" => Message::Stopping,
            "reopen" => Message::Reopen,
            "upstreams" => Message::Upstreams(rest.to_string()),
            "upstream-health" => Message::UpstreamHealth(rest.to_string()),
            "ejected" => Message::Ejected(rest.to_string()),
            "certificate" => Message::Certificate(rest.to_string()),
            "unresponsive" => Message::Unresponsive(rest.to_string()),
            "meters" => Message::Meters(rest.to_string()),
            "caches" => Message::Caches(rest.to_string()),
            "want-certificate" => Message::WantCertificate(rest.to_string()),
            "want-app" => Message::WantApp,
            "no-certificate" => Message::NoCertificate(rest.to_string()),
            "ticket-keys" => Message::TicketKeys(rest.to_string()),
            "purge" => Message::Purge(rest.to_string()),
            "hosts" => Message::Hosts(rest.to_string()),
            "hosts-taken" => Message::HostsTaken(rest.parse().ok()?),
            _ => return None,
        })
    }
}

/// A host name as one word of a line (a name from a ClientHello is the client's: anything
/// but a plain name is cut at its first space or control byte).
fn one_word(name: &str) -> &str {
    name.split(|c: char| c.is_whitespace() || c.is_control())
        .next()
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn every_message_reads_back_as_written() {
        for m in [
            Message::Ping,
            Message::Ready { pid: 42 },
            Message::Error("cannot pin thread to CPUs 3: EINVAL".into()),
            Message::Pong(super::Figures {
                requests: 123456,
                panics: 2,
                remote: 7,
                connections: 3,
                accepted: 90,
                steered: 88,
                queue: crate::proxy::queue::QueueFigures {
                    waiting: 4,
                    queued_total: 30,
                    rejected_total: 2,
                    wait_micros_total: 123_456,
                },
                ticket_keys: 3,
                cache: crate::proxy::cache_store::Counts {
                    hits: 9,
                    misses: 8,
                    stored: 7,
                    evicted: 6,
                    bytes: 5,
                    entries: 4,
                    stale: 3,
                    disk_bytes: 2,
                    disk_entries: 1,
                },
            }),
            Message::Stuck("cpu0,cpu3".into()),
            Message::Unresponsive("http://127.0.0.1:4000".into()),
            Message::WantCertificate("shop.example".into()),
            Message::NoCertificate("shop.example".into()),
            Message::Purge("prefix https://shop.example/a b".into()),
            Message::Caches("[[\"pool:shop\",{\"hits\":1}]]".into()),
            Message::Hosts("{\"generation\":3,\"groups\":[]}".into()),
            Message::HostsTaken(3),
        ] {
            assert_eq!(Message::parse(&m.line()), Some(m));
        }
        assert_eq!(
            Message::parse(&Message::Error("two\nlines".into()).line()),
            Some(Message::Error("two lines".into()))
        );
        assert_eq!(Message::parse("hello"), None);
        assert_eq!(Message::parse(""), None);
    }
}
