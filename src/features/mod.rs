//! Site features that are modules of their own: each one file holding its keys' typed
//! value, its `check` and its compiled step — the pure logic, with no I/O and nothing of the
//! server's — so that adding one touches four files: its module here, its line in the list
//! (`config::chain`: its step, its keys, where it runs), its keys in the config's schema
//! (`config::raw`), and the reference.
//!
//! Owns: [`HeadStep`], what a response feature's compiled step is, and [`head`], an answer's
//! head with its index and the edits they share. Must not touch: which sites carry a step (the list
//! and the worker's compile do), the answer's body, or the socket.
//!
//! Why a trait object here when the request chain's steps are an enum: a response step runs
//! once per answer of a site that sets its keys (a site without them carries none, so pays
//! nothing), and a feature that is a type of its own is what lets one be added without
//! editing the runner.

pub mod head;
pub mod status_headers;

/// A response feature's compiled step, run on every answer of a site (or path) that sets its
/// keys, by the one response writer, in the chain's order (`config::chain::ResponseStep`).
pub trait HeadStep: std::fmt::Debug {
    /// Acts on the answer's whole head (its status, its fields; a body may follow it in the
    /// buffer, and is moved, not touched).
    fn run(&self, head: &mut head::HeadEdit<'_>);
}
