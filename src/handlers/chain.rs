//! A site's request chain as one worker thread holds it: compiled once per site at the
//! thread's start from [`RequestStep::ORDER`] (the order, and why, is written there), holding
//! only the steps the site configures. `route` runs it.
//!
//! Owns: [`Chain`]. Must not touch: what a step does (see `route`) or the site's data (the
//! parent's: it says which steps a site configures).
//!
//! A step is a variant of [`RequestStep`], not a boxed trait object: the chain is a slice of
//! small values walked by one `match`, with no allocation and no indirect call per request,
//! and a site without a feature has no step for it (its empty slices allocate nothing).

use crate::config::chain::RequestStep;

/// A site's request chain, compiled for a thread: the steps it configures, around the route
/// (which every request takes).
#[derive(Default)]
pub(super) struct Chain {
    /// Before the route: what may change the target or answer without it (rules, https).
    pub(super) before: Box<[RequestStep]>,
    /// After the route: what looks at the chosen path (access, limit, sign-in).
    pub(super) after: Box<[RequestStep]>,
}

impl Chain {
    /// A site's chain: the steps of [`RequestStep::ORDER`] it `configures`, in that order.
    pub(super) fn of(configures: impl Fn(RequestStep) -> bool) -> Chain {
        let (mut before, mut after, mut routed) = (Vec::new(), Vec::new(), false);
        for step in RequestStep::ORDER {
            let configured = match step {
                // Every request takes them; they are the chain's frame, not steps in a list.
                RequestStep::Route => {
                    routed = true;
                    false
                }
                RequestStep::Answer => false,
                step => configures(step),
            };
            if configured {
                if routed { &mut after } else { &mut before }.push(step);
            }
        }
        Chain {
            before: before.into(),
            after: after.into(),
        }
    }
}
