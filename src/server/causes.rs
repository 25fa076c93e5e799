//! An error in one line with the causes under it: a client library's top error often says
//! only which layer failed ("client error (Connect)", hickory's "proto error"), and the
//! reason a user can act on — a refused connection, a timeout, a certificate — is its source.
//!
//! Owns: that text. Must not touch: which errors are said, or where.

/// `e`, then each cause under it not already said, joined by `: `.
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::causes;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("proto error")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_cause_under_a_bare_wrapper_is_said() {
        let e = Wrapped(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "request timed out",
        ));
        assert_eq!(causes(&e), "proto error: request timed out");
    }
}
