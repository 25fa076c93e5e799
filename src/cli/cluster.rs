//! `espalier cluster import FILE -c CONFIG`: a TOML file's pools, upstream groups and sites
//! put into the fleet's etcd once (`[server.cluster]` of CONFIG names it), each part a key of
//! its own — the way from one machine's file to a fleet's shared configuration.
//!
//! Owns: splitting FILE into its parts (each one's text as written, comments kept) and the
//! one transaction that puts them. Must not touch: etcd's client (`crate::server::cluster`)
//! or what a part means (FILE's parts are checked first as `check` would check this member's
//! configuration with them in it).

use super::args::{ClusterAction, MachineArgs};
use crate::config::cluster::{file_of, is_part_name, KINDS};
use crate::config::Config;
use crate::server::cluster::{self, Change, Written};
use std::path::Path;

pub(super) fn run(action: ClusterAction) -> Result<i32, String> {
    match action {
        ClusterAction::Import {
            file,
            config,
            machine,
            replace,
        } => import(&file, &config, &machine, replace),
    }
}

/// Each part of the TOML `text`, as a file of its own: its kind (an index into [`KINDS`]),
/// its name and its text (`[[site]]` and its keys, as written).
pub fn parts_of(text: &str) -> Result<Vec<(usize, String, String)>, String> {
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    let mut parts = Vec::new();
    for (kind, (_, key)) in KINDS.iter().enumerate() {
        let Some(list) = doc.get(key).and_then(toml_edit::Item::as_array_of_tables) else {
            continue;
        };
        for (i, table) in list.iter().enumerate() {
            let name = table.get("name").and_then(toml_edit::Item::as_str);
            let name = name.filter(|n| is_part_name(n)).ok_or_else(|| {
                format!("{key}[{i}] has no `name` a key can carry (letters, digits, `.`, `-`, `_`): give it one")
            })?;
            let mut one = toml_edit::DocumentMut::new();
            let mut single = toml_edit::ArrayOfTables::new();
            single.push(table.clone());
            one.insert(key, toml_edit::Item::ArrayOfTables(single));
            parts.push((kind, name.to_string(), one.to_string()));
        }
    }
    Ok(parts)
}

fn import(file: &Path, config: &Path, machine: &MachineArgs, replace: bool) -> Result<i32, String> {
    let topology = machine.read_placeable()?;
    // Absolute, as the validator names the files an overlay stands in for.
    let config = &std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    let c = Config::load(config, &topology).map_err(|e| e.to_string())?;
    let Some(spec) = c.server.cluster else {
        return Err(format!("{}: has no [server.cluster]: say which etcd the fleet shares, like [server.cluster] etcd = [\"http://10.0.0.1:2379\"]", config.display()));
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let parts = parts_of(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    if parts.is_empty() {
        return Err(format!(
            "{}: has no [[pool]], [[upstream]] or [[site]] to import",
            file.display()
        ));
    }
    // The parts checked as this member will read them — its own [server] (its certificate
    // store, its addresses), its files and the fleet's copy, each part in the copy's folder —
    // so that what `check` refuses never reaches the fleet. FILE's own [server], if any, is
    // not the fleet's.
    let overlay: crate::config::Overlay = (parts.iter())
        .map(|(kind, name, text)| (file_of(&spec.folder, *kind, name), Some(text.clone())))
        .collect();
    let main_text = std::fs::read_to_string(config)
        .map_err(|e| format!("cannot read {}: {e}", config.display()))?;
    Config::parse_with(&main_text, config, &topology, &overlay).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut client = cluster::connect(&spec).await?;
        let mut changes = Vec::new();
        for (kind, name, text) in parts {
            // Without --replace, a part the fleet has already is not overwritten.
            let seen = if replace {
                let key = spec.key(KINDS[kind].0, &name);
                let got = client.get(key, None).await.map_err(|e| format!("etcd: {e}"))?;
                got.kvs().first().map_or(0, |kv| kv.mod_revision())
            } else {
                0
            };
            changes.push(Change { kind, name, text: Some(text), seen });
        }
        let count = changes.len();
        match cluster::write(&mut client, &spec, changes).await {
            Written::Done(revision) => {
                println!("imported {count} part(s) under {} (etcd revision {revision})", spec.prefix);
                Ok(0)
            }
            Written::Changed if replace => Err("a part changed while it was imported: run it again".into()),
            Written::Changed => Err(format!("the fleet has some of these parts already (under {}): nothing was imported; add --replace to overwrite them", spec.prefix)),
            Written::Failed(cause) => Err(cause),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parts_of;

    #[test]
    fn a_file_splits_into_one_part_per_table_as_written() {
        let text = "[server]\nadmin = \"127.0.0.1:9\"\n\n[[pool]]\nname = \"php\"\n\n# the shop\n[[site]]\nname = \"shop\"\nroot = \"www\" # its files\n\n[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:1\"]\n";
        let parts = parts_of(text).unwrap();
        let names: Vec<(usize, &str)> = parts.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
        assert_eq!(names, [(0, "php"), (1, "api"), (2, "shop")]);
        let shop = &parts[2].2;
        assert!(
            shop.contains("[[site]]") && shop.contains("root = \"www\" # its files"),
            "{shop}"
        );
        assert!(!shop.contains("admin") && !shop.contains("php"), "{shop}");
        assert!(parts_of("[[site]]\nroot = \"x\"\n")
            .unwrap_err()
            .contains("site[0] has no `name`"));
    }
}
