//! A site's own error pages (IIS `httpErrors`, nginx `error_page`): the body espalier sends
//! for a status instead of its one-line text — on its own answers (a missing file, a
//! refused path, an app that is down or late), and on an app's error answers when the site
//! asks (`replace_app_errors`).
//!
//! Owns: [`ErrorPages`] and writing a page ([`super::Responder::error_page`],
//! [`super::Responder::response_steps`]). Must not touch: reading the files (the handlers load
//! them once per thread) or which site a request is of.

/// One page: its bytes and their type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    pub content_type: &'static str,
    pub body: Box<[u8]>,
}

/// A site's pages by status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages {
    pages: Vec<(u16, ErrorPage)>,
    /// An app's own answer with a status that has a page is replaced by it.
    pub replace_app_errors: bool,
}

/// Fields of an error answer that say something the page does not: kept when a page
/// replaces espalier's text (`Allow` of a 405, `Retry-After` of a 503, …).
pub const KEPT_FIELDS: [&str; 4] = ["allow", "retry-after", "content-range", "www-authenticate"];

impl ErrorPages {
    pub fn new(pages: Vec<(u16, ErrorPage)>, replace_app_errors: bool) -> Self {
        ErrorPages {
            pages,
            replace_app_errors,
        }
    }

    /// The page for `status`, if the site has one.
    pub fn get(&self, status: u16) -> Option<&ErrorPage> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| p)
    }
}
