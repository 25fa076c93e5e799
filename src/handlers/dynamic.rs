//! The `dynamic` handler: the case study's "simple dynamic page" — HTML built per request from
//! the request itself (method, path, query, some headers), a per-thread request counter and the
//! time, so every response differs and costs real work.
//!
//! Owns: that page. Must not touch: I/O.

use crate::http::{Request, Responder};
use std::fmt::Write;

/// Escapes text for HTML (the page reflects request data, which is attacker-controlled).
pub fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Who is answering: shown on the page.
pub struct PageContext<'a> {
    pub worker: &'a str,
    pub served: u64,
    pub unix_seconds: u64,
}

/// Builds the page into `page` (reused between requests) and answers with it.
pub fn respond(
    req: &Request<'_>,
    ctx: &PageContext<'_>,
    page: &mut String,
    resp: &mut Responder<'_>,
) {
    page.clear();
    page.push_str("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>espalier dynamic page</title></head><body>\n<h1>Hello from ");
    escape_html(ctx.worker, page);
    page.push_str("</h1>\n<table>\n");
    row(page, "method", req.method_text);
    row(page, "path", req.path);
    row(page, "query", req.query);
    for name in ["host", "user-agent", "accept"] {
        row(page, name, req.header(name).unwrap_or(""));
    }
    let _ = writeln!(
        page,
        "<tr><th>body bytes</th><td>{}</td></tr>",
        req.body.len()
    );
    let _ = writeln!(
        page,
        "<tr><th>requests served by this thread</th><td>{}</td></tr>",
        ctx.served
    );
    let _ = writeln!(
        page,
        "<tr><th>unix time</th><td>{}</td></tr>",
        ctx.unix_seconds
    );
    page.push_str("</table>\n</body></html>\n");
    resp.status(200)
        .header("Content-Type", "text/html; charset=utf-8")
        .header("Cache-Control", "no-store")
        .body(page.as_bytes());
}

fn row(page: &mut String, name: &str, value: &str) {
    page.push_str("<tr><th>");
    page.push_str(name);
    page.push_str("</th><td>");
    escape_html(value, page);
    page.push_str("</td></tr>\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes() {
        let mut s = String::new();
        super::escape_html("<script>alert('x')&\"</script>", &mut s);
        assert_eq!(
            s,
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
    }
}
