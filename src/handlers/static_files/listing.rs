//! `autoindex`: the listing of a folder that has no index file, as HTML, or as JSON for a
//! client that asks for it (`Accept: application/json`, as Caddy's file browser answers).
//!
//! Owns: reading the folder, what is left out, the order, and the two forms. Left out: names
//! that start with `.` (unless `dotfiles`), files the site never sends (a FastCGI app's
//! scripts), and — without `follow_symlinks` — links that lead out of the root, so a listing
//! shows nothing the site would not serve. Order: folders first, then files, each by name
//! (bytes), as `ls` in the C locale. At most [`MAX_LISTED`] entries — the first the folder
//! yields, sorted — then a count of the rest, by name alone (no `stat`): a folder of a million
//! files costs one bounded page and a read of its names. Must not touch: which folder is
//! listed (the static handler resolved and checked it) or the connection.

use super::super::dynamic::escape_html;
use crate::http::{Request, Responder};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

/// The most entries one listing shows.
pub const MAX_LISTED: usize = 10_000;

/// One entry of a folder.
struct Listed {
    name: Vec<u8>,
    folder: bool,
    size: u64,
    modified: Option<SystemTime>,
}

/// What a folder's entries must pass to be listed.
pub(super) struct Shown<'a> {
    pub dotfiles: bool,
    /// Whether a name is one the site never sends (its extension refused).
    pub refused: &'a dyn Fn(&[u8]) -> bool,
    /// The root's real path when links must stay under it (`follow_symlinks = false`).
    pub inside: Option<&'a Path>,
}

/// Answers with the listing of `dir`, reached by the URL path `req.path` (which ends with `/`).
pub(super) fn answer(dir: &Path, shown: &Shown<'_>, req: &Request<'_>, resp: &mut Responder<'_>) {
    let Ok(read) = std::fs::read_dir(dir) else {
        resp.error(403);
        return;
    };
    let mut entries = Vec::new();
    let mut more = 0usize;
    for entry in read.flatten() {
        let name = entry.file_name().as_bytes().to_vec();
        if (name.first() == Some(&b'.') && !shown.dotfiles) || (shown.refused)(&name) {
            continue;
        }
        // Past the bound a name is only counted: no stat, no link resolved.
        if entries.len() == MAX_LISTED {
            more += 1;
            continue;
        }
        let path = entry.path();
        let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
        if let (true, Some(root)) = (is_link, shown.inside) {
            if !std::fs::canonicalize(&path).is_ok_and(|real| real.starts_with(root)) {
                continue;
            }
        }
        // A link's target tells what it is; a dangling one is left out.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        entries.push(Listed {
            name,
            folder: meta.is_dir(),
            size: if meta.is_dir() { 0 } else { meta.len() },
            modified: meta.modified().ok(),
        });
    }
    entries.sort_by(|a, b| b.folder.cmp(&a.folder).then_with(|| a.name.cmp(&b.name)));
    let json = req
        .header_values("accept")
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    let (content_type, page) = if json {
        ("application/json", as_json(&entries, more))
    } else {
        (
            "text/html; charset=utf-8",
            as_html(req.path, &entries, more),
        )
    };
    resp.status(200)
        .header("Content-Type", content_type)
        .header("Vary", "Accept")
        .body(&page);
}

/// The listing as a page: a link per entry (its name percent-encoded, shown escaped).
fn as_html(path: &str, entries: &[Listed], more: usize) -> Vec<u8> {
    let mut page = Vec::with_capacity(512 + entries.len() * 160);
    page.extend_from_slice(
        b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ",
    );
    escape_html(path, &mut page);
    page.extend_from_slice(b"</title></head>\n<body><h1>Index of ");
    escape_html(path, &mut page);
    page.extend_from_slice(
        b"</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n",
    );
    if path != "/" {
        page.extend_from_slice(b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for e in entries {
        let slash = if e.folder { "/" } else { "" };
        page.extend_from_slice(b"<tr><td><a href=\"");
        page.extend_from_slice(percent_encoded(&e.name).as_bytes());
        page.extend_from_slice(slash.as_bytes());
        page.extend_from_slice(b"\">");
        escape_html(&String::from_utf8_lossy(&e.name), &mut page);
        page.extend_from_slice(slash.as_bytes());
        page.extend_from_slice(b"</a></td><td>");
        if !e.folder {
            page.extend_from_slice(itoa::Buffer::new().format(e.size).as_bytes());
        }
        page.extend_from_slice(b"</td><td>");
        page.extend_from_slice(modified(e).as_bytes());
        page.extend_from_slice(b"</td></tr>\n");
    }
    page.extend_from_slice(b"</table>\n");
    if more > 0 {
        page.extend_from_slice(format!("<p>and {more} more entries, not listed</p>\n").as_bytes());
    }
    page.extend_from_slice(b"</body></html>\n");
    page
}

/// The listing as `{"entries": [{"name", "type", "size", "modified"}…], "more": n}`.
fn as_json(entries: &[Listed], more: usize) -> Vec<u8> {
    let list: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": String::from_utf8_lossy(&e.name),
                "type": if e.folder { "folder" } else { "file" },
                "size": e.size,
                "modified": modified(e),
            })
        })
        .collect();
    let mut page = serde_json::to_vec(&serde_json::json!({ "entries": list, "more": more }))
        .unwrap_or_default();
    page.push(b'\n');
    page
}

/// Its modification time, RFC 3339 in UTC to the second ("" when unknown).
fn modified(e: &Listed) -> String {
    e.modified
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_default()
}

/// A name as one URL path segment: every byte but the unreserved ones (RFC 3986) escaped, so
/// no name can end the attribute, start a query or climb a folder.
fn percent_encoded(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_safe_segment_and_shown_escaped() {
        assert_eq!(
            percent_encoded(b"a b/\"<x>?#%.txt"),
            "a%20b%2F%22%3Cx%3E%3F%23%25.txt"
        );
        let page = as_html(
            "/d/",
            &[Listed {
                name: b"<script>.html".to_vec(),
                folder: false,
                size: 5,
                modified: None,
            }],
            2,
        );
        let page = String::from_utf8(page).unwrap();
        assert!(
            page.contains("<a href=\"%3Cscript%3E.html\">&lt;script&gt;.html</a>"),
            "{page}"
        );
        assert!(page.contains("and 2 more entries"), "{page}");
        assert!(!page.contains("<script>"), "{page}");
    }
}
