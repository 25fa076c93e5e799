//! What the source's own documentation claims, checked against the source: a module doc that
//! lists its children lists every one, every `unsafe` lives in `src/os` (as `os/mod.rs`
//! and `lib.rs` say), no production file is over 600 lines (the house's rule) nor any server
//! function over 100 (#56), and HTTP/1.1
//! text is parsed by the HTTP/1.1 codecs alone (with the two places the message core has
//! still to take over).

use std::path::{Path, PathBuf};

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> Vec<PathBuf> {
    let mut files = Vec::new();
    source_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    files
}

/// The `//!` doc of a file, and the child modules it declares (`mod x;`), tests left out.
fn doc_and_children(text: &str) -> (String, Vec<String>) {
    let doc: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .collect();
    let children = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("pub ").unwrap_or(l);
            let rest = rest
                .strip_prefix("pub(crate) ")
                .or_else(|| rest.strip_prefix("pub(super) "))
                .unwrap_or(rest);
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
            (!name.ends_with("tests")).then(|| name.to_string())
        })
        .collect();
    (doc.join("\n"), children)
}

/// A module's doc that names most of its children (a list of them) names them all: a child
/// added later must be written into the list, or the list stops being the map it claims to
/// be (`server`, `supervisor` and `config` had each left six out).
#[test]
fn a_module_doc_that_lists_its_children_lists_every_one() {
    let mut wrong = Vec::new();
    for file in src() {
        let text = std::fs::read_to_string(&file).unwrap();
        let (doc, children) = doc_and_children(&text);
        let named = |c: &String| {
            [format!("`{c}`"), format!("[{c}]"), format!("::{c}`")]
                .iter()
                .any(|form| doc.contains(form.as_str()))
        };
        let (listed, missing): (Vec<&String>, Vec<&String>) =
            children.iter().partition(|c| named(c));
        if listed.len() * 2 > children.len() && !missing.is_empty() {
            wrong.push(format!("{}: {missing:?}", file.display()));
        }
    }
    assert!(
        wrong.is_empty(),
        "module docs missing children they list beside: {wrong:#?}"
    );
}

/// Every `unsafe` block or function is in `src/os`, the layer that owns every syscall.
/// A file of production code is read whole by the next engineer: at most 600 lines, its unit
/// tests (a `tests.rs` beside it, or a `mod tests` block at its end) not counted.
#[test]
fn no_production_file_is_over_600_lines() {
    let long: Vec<String> = src()
        .into_iter()
        .filter(|p| !p.ends_with("tests.rs"))
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text
                .split("\n#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or("");
            let lines = code.lines().count();
            (lines > 600).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by what they own: {long:?}");
}

/// The functions of `code` (rustfmt's layout: a body ends at the first `}` at its `fn`'s
/// indentation), each as (name, lines from its `fn` to its closing brace).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        let after_fn = [
            "pub ",
            "pub(crate) ",
            "pub(super) ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .fold(text, |t, word| t.strip_prefix(word).unwrap_or(t));
        let Some(rest) = after_fn.strip_prefix("fn ") else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue; // a declaration in a trait, no body
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let closing = lines[i + 1..].iter().position(|l| {
            l.len() > indent && l.starts_with(&" ".repeat(indent)) && l[indent..].starts_with('}')
                || (indent == 0 && l.starts_with('}'))
        });
        if let Some(k) = closing {
            found.push((name, k + 2));
        }
    }
    found
}

/// No function of the server (`src/server`) is over 100 lines (issue #56: the master of
/// parts): a longer one is a part, or steps, still to name.
#[test]
fn no_server_function_is_over_100_lines() {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let long: Vec<String> = src()
        .into_iter()
        .filter(|p| p.starts_with(&server) && !p.ends_with("tests.rs"))
        .flat_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text
                .split("\n#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or("")
                .to_string();
            function_lengths(&code)
                .into_iter()
                .filter(|(_, n)| *n > 100)
                .map(move |(name, n)| format!("{}: {name} ({n} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these into named steps: {long:?}");
    // The measure itself: it finds a long function, and a short one is not.
    let body = "    let x = 1;\n".repeat(101);
    let long_one = format!("fn long() {{\n{body}}}\n\nfn short() {{\n    1\n}}\n");
    assert_eq!(
        function_lengths(&long_one),
        [("long".to_string(), 103), ("short".to_string(), 3)]
    );
}

/// HTTP/1.1 text is parsed by the HTTP/1.1 codecs alone (issue #56): a client's head
/// (`http/mod.rs`), an app's or upstream server's answer (`proxy/answer.rs`,
/// `proxy/cgi_answer.rs`, `proxy/fastcgi.rs`, `proxy/verify.rs`), and the clients espalier is
/// itself (the admin client, the health checks). Inside the server a message is structured:
/// a forwarded request's head is a `ForwardHead`, an answer's head is indexed as it is
/// written (`features::head`), and HTTP/2 and HTTP/3 make their requests and responses from
/// those. A parser anywhere else fails this test.
#[test]
fn http1_text_is_parsed_by_the_http1_codecs_alone() {
    const CODECS: [&str; 7] = [
        "src/http/mod.rs",
        "src/proxy/answer.rs",
        "src/proxy/cgi_answer.rs",
        "src/proxy/fastcgi.rs",
        "src/server/admin/client.rs",
        "src/server/upstream_probe.rs",
        "src/proxy/verify.rs",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let parsers = [
        "httparse::Request::new",
        "httparse::Response::new",
        "httparse::ParserConfig",
        "httparse::parse_headers",
    ];
    let parsing: Vec<String> = src()
        .into_iter()
        .filter(|p| !p.ends_with("tests.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let code = text
                .split("\n#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or("");
            parsers.iter().any(|call| code.contains(call))
        })
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    let stray: Vec<&String> = (parsing.iter())
        .filter(|p| !CODECS.contains(&p.as_str()))
        .collect();
    assert!(stray.is_empty(), "HTTP/1.1 text parsed outside the HTTP/1.1 codecs: {stray:?}; carry the structured message instead");
    // And every codec listed still parses: a list that only grows would hide one gone.
    let idle: Vec<&&str> = (CODECS.iter())
        .filter(|p| !parsing.iter().any(|q| q == *p))
        .collect();
    assert!(
        idle.is_empty(),
        "{idle:?} parse no HTTP/1.1 text: take them off CODECS"
    );
}

#[test]
fn every_unsafe_is_in_the_os_layer() {
    let os = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/os");
    let mut outside = Vec::new();
    for file in src().into_iter().filter(|f| !f.starts_with(&os)) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("unsafe {")
                || code.contains("unsafe fn")
                || code.contains("unsafe impl")
            {
                outside.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(outside.is_empty(), "unsafe outside src/os: {outside:#?}");
}

/// The manual's Markdown files: the README and everything under docs/.
fn manual() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files.sort();
    files
}

/// A heading's anchor as GitHub makes it: lower case, punctuation but `-` and `_` dropped,
/// spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (code blocks left out).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_of_the_manual_reaches_its_file_and_heading() {
    let mut broken = Vec::new();
    for file in manual() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, heading) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let fine = match std::fs::read_to_string(&linked) {
                Ok(t) => heading.is_empty() || anchors(&t).iter().any(|a| a == heading),
                Err(_) => heading.is_empty() && linked.exists(),
            };
            if !fine {
                broken.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links that reach nothing: {broken:#?}");
}
