//! A site's (or path's) response chain as one worker thread holds it, for one scheme:
//! compiled once at the thread's start by walking [`ResponseStep::ORDER`], holding only the
//! steps its keys set, and run by the one response writer on every answer's head
//! (`super::Responder::response_steps`) — espalier's own, files, FastCGI, pool apps and upstreams — on
//! every protocol (an HTTP/2 or HTTP/3 answer is this head before its codec sends it).
//!
//! Owns: [`ResponseChain`]: which steps, in which order, on whose answers. Must not touch:
//! what a step does (the site's pages: `error_pages`; `headers`: `edits`; a feature that is a
//! module of its own: `crate::features`), or which chain a request gets (its route chooses by
//! site, path and scheme, and the request's context carries it).
//!
//! Two steps of the order act elsewhere, where what they change is: compression changes the
//! body, so it is decided before the head is written (a static file's coding among its cached
//! variants, an app's by `crate::proxy`'s encoding plan); the log is written once the body is
//! sent. A site that sets none of the steps' keys has no chain: its answers pay nothing.

use super::edits::FieldEdits;
use super::error_pages::ErrorPages;
use crate::config::chain::{ResponseKeys, ResponseStep};
use crate::features::HeadStep;
use std::rc::Rc;

/// One compiled step.
#[derive(Debug)]
pub(super) enum Step {
    /// The site's page for an error status of espalier's own answers.
    ErrorPage(Rc<ErrorPages>),
    /// `headers` (and HSTS, `Alt-Svc` over TLS).
    Headers(Rc<FieldEdits>),
    /// A feature that is a module of `crate::features`.
    Feature(Rc<dyn HeadStep>),
}

/// Whose answer the chain runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// espalier's own: the site's error page replaces its text.
    Own,
    /// An app's (or an upstream's): whether the site's page replaces its error is decided
    /// before its head is written (`replace_app_errors`), so the page step passes it by.
    App,
}

/// The response steps a site (or a path, over its site's) configures, in the chain's order.
#[derive(Debug)]
pub struct ResponseChain {
    steps: Box<[Step]>,
    pages: Option<Rc<ErrorPages>>,
}

impl ResponseChain {
    /// The chain of a site or path with these `pages`, field `edits` (for one scheme) and
    /// feature `keys`; `None` when it configures no step.
    pub fn of(
        pages: Option<Rc<ErrorPages>>,
        edits: Option<Rc<FieldEdits>>,
        keys: &ResponseKeys,
    ) -> Option<Rc<ResponseChain>> {
        let steps: Box<[Step]> = ResponseStep::ORDER
            .iter()
            .filter_map(|&step| match step {
                ResponseStep::ErrorPages => pages.clone().map(Step::ErrorPage),
                ResponseStep::Headers => edits.clone().map(Step::Headers),
                step => keys.step(step).map(Step::Feature),
            })
            .collect();
        (!steps.is_empty()).then(|| Rc::new(ResponseChain { steps, pages }))
    }

    /// The site's error pages, when it has some.
    pub fn pages(&self) -> Option<&ErrorPages> {
        self.pages.as_deref()
    }

    /// Its steps, in the chain's order (run by `super::Responder::response_steps`).
    pub(super) fn steps(&self) -> &[Step] {
        &self.steps
    }
}
