//! `espalier config get|set|add|patch|rm PATH [FILE|-]`: the running server's configuration
//! API (`/config` on its admin endpoint), for scripts and hosting panels.
//!
//! Owns: the command's paths (`sites/shop`, `/config/sites/shop` and `/sites/shop` alike), the
//! body read from a file or standard input (JSON, or TOML turned into JSON), and printing the
//! answer. Must not touch: HTTP (the client is [`crate::server::admin::request_with_body`]).

use super::{AdminArgs, ConfigAction};
use crate::server::admin;
use std::path::Path;

/// The API path of a command's PATH.
fn api_path(path: &str) -> String {
    let rest = path.trim_start_matches('/');
    let rest = rest.strip_prefix("config").unwrap_or(rest);
    let rest = rest.trim_matches('/');
    if rest.is_empty() {
        "/config".into()
    } else {
        format!("/config/{rest}")
    }
}

/// FILE's object as JSON text: JSON as it is, or TOML turned into JSON; `-` is standard input.
fn body_of(file: &Path) -> Result<Vec<u8>, String> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| format!("cannot read standard input: {e}"))?
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
    };
    if serde_json::from_str::<serde_json::Value>(&text).is_ok() {
        return Ok(text.into_bytes());
    }
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| format!("{} is neither JSON nor TOML: {e}", file.display()))?;
    serde_json::to_vec(&table).map_err(|e| e.to_string())
}

/// Runs one `espalier config` command.
pub(super) fn run(action: ConfigAction) -> Result<i32, String> {
    let (method, path, body, fields, admin) = match &action {
        ConfigAction::Get { path, admin } => ("GET", path, None, Vec::new(), admin),
        ConfigAction::Set {
            path,
            file,
            if_match,
            admin,
        } => {
            let whole = api_path(path) == "/config";
            let method = if whole { "POST" } else { "PUT" };
            (method, path, Some(file), if_match_field(if_match), admin)
        }
        ConfigAction::Add { path, file, admin } => (
            "PUT",
            path,
            Some(file),
            vec![("If-None-Match", "*".to_string())],
            admin,
        ),
        ConfigAction::Patch {
            path,
            file,
            if_match,
            admin,
        } => ("PATCH", path, Some(file), if_match_field(if_match), admin),
        ConfigAction::Rm {
            path,
            if_match,
            admin,
        } => ("DELETE", path, None, if_match_field(if_match), admin),
    };
    let mut target = api_path(path);
    if method == "POST" {
        target.push_str("/load");
    }
    let body = body.map(|f| body_of(f)).transpose()?.unwrap_or_default();
    send(admin, (method, &target), &fields, &body)
}

fn if_match_field(version: &Option<String>) -> Vec<(&'static str, String)> {
    version
        .iter()
        .map(|v| ("If-Match", format!("\"{v}\"")))
        .collect()
}

/// Sends the request and prints the answer: a read's JSON on standard output (its version on
/// standard error), a write's one line; a refusal is the error.
fn send(
    args: &AdminArgs,
    (method, path): (&str, &str),
    fields: &[(&str, String)],
    body: &[u8],
) -> Result<i32, String> {
    let addr = args.address()?;
    let token = args.token(addr);
    let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, version, body) = admin::request_with_body(
        addr,
        (method, path),
        token.as_deref(),
        args.meant(),
        &fields,
        body,
    )?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    if !(200..300).contains(&status) {
        let message = v["message"].as_str().unwrap_or(text.trim());
        return Err(format!("{message} ({status})"));
    }
    if method == "GET" {
        print!("{text}");
        if let Some(version) = version {
            eprintln!("version {version}");
        }
    } else {
        let message = v["message"].as_str().unwrap_or(text.trim());
        println!("{message} (version {})", version.unwrap_or_default());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_are_taken_however_written() {
        for (given, path) in [
            ("/", "/config"),
            ("sites/shop", "/config/sites/shop"),
            ("/sites/shop/", "/config/sites/shop"),
            ("/config/sites/shop", "/config/sites/shop"),
            ("config", "/config"),
            ("server", "/config/server"),
        ] {
            assert_eq!(super::api_path(given), path, "{given}");
        }
    }
}
