//! A request's question to another service before it is answered or lent (a path's
//! `auth = { request }`, see [`crate::routing::auth_request`]): made at the edge from the
//! request's head, the same for HTTP/1.1, HTTP/2 and HTTP/3, and owned — the head it came
//! from is borrowed from the connection's buffer, and the asking crosses an `.await`.
//!
//! Owns: [`Question`] and which of a request's facts go into it. Must not touch: the asking
//! (the service's, [`super::service::Service::ask`]) or what its answer does.

use super::Request;
use crate::routing::auth_request::AuthRequestSpec;
use std::rc::Rc;

/// What a verifier is told of a request: the request's method, target (as received: a rule's
/// rewrite is the app's business), host, scheme and client, and the fields its path sends.
#[derive(Debug)]
pub struct Question {
    pub spec: Rc<AuthRequestSpec>,
    pub method: String,
    /// The path and query as the client sent them.
    pub target: String,
    pub host: String,
    pub https: bool,
    /// The client's address as the logs write it ("" when unknown).
    pub client: String,
    /// The fields sent on, by their name in the spec, every line of each.
    pub fields: Vec<(String, Vec<u8>)>,
}

impl Question {
    /// The question a request asks before it goes on, if its path has a verifier (`spec`,
    /// from its context — see [`super::service::Route::asks`]; one asked already has none).
    pub fn of(
        spec: Option<&Rc<AuthRequestSpec>>,
        req: &Request<'_>,
        https: bool,
    ) -> Option<Question> {
        Some(Question::for_spec(Rc::clone(spec?), req, https))
    }

    fn for_spec(spec: Rc<AuthRequestSpec>, req: &Request<'_>, https: bool) -> Question {
        let mut target = String::with_capacity(req.path.len() + req.query.len() + 1);
        target.push_str(req.path);
        if !req.query.is_empty() {
            target.push('?');
            target.push_str(req.query);
        }
        let fields = req
            .headers
            .iter()
            .filter(|h| spec.send.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        Question {
            method: req.method_text.to_string(),
            target,
            host: req.host().unwrap_or_default().to_string(),
            https,
            client: req.client.to_string(),
            fields,
            spec,
        }
    }
}
