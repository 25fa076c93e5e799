use super::*;
use serde_json::json;

const MAIN: &str = r#"include = ["sites.d/*.toml"]

# the shop's server
[server]
admin = "127.0.0.1:9180"   # where panels reach us

[[pool]]
name = "main"   # kept as written

[[site]]
name = "home"
bindings = ["http://127.0.0.1:8080"]

[[upstream]]
name = "api"
servers = ["127.0.0.1:9000"]
"#;

fn files() -> (tempfile::TempDir, ConfigFiles) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sites.d")).unwrap();
    std::fs::write(dir.path().join("espalier.toml"), MAIN).unwrap();
    std::fs::write(
        dir.path().join("sites.d/blog.toml"),
        "# blog, by its owner\n[[site]]\nname = \"blog\"\nbindings = [\"http://127.0.0.1:8081\"]\n",
    )
    .unwrap();
    let files = ConfigFiles::read(&dir.path().join("espalier.toml")).unwrap();
    (dir, files)
}

#[test]
fn paths_name_the_parts() {
    assert_eq!(Part::parse(""), Ok(Part::Whole));
    assert_eq!(Part::parse("/server"), Ok(Part::Server));
    assert_eq!(Part::parse("/sites"), Ok(Part::All(Kind::Site)));
    assert_eq!(
        Part::parse("/pools/shop-1/"),
        Ok(Part::One(Kind::Pool, "shop-1".into()))
    );
    assert!(Part::parse("/sites/a.b")
        .unwrap_err()
        .contains("not a site name"));
    assert!(Part::parse("/cats/x")
        .unwrap_err()
        .contains("/config/pools|sites|upstreams"));
}

#[test]
fn the_whole_is_the_files_merged_in_the_files_own_names() {
    let (_dir, files) = files();
    let whole = files.get(&Part::Whole).unwrap();
    assert_eq!(whole["server"]["admin"], "127.0.0.1:9180");
    let sites: Vec<&str> = (whole["site"].as_array().unwrap().iter())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(sites, ["home", "blog"]);
    assert_eq!(whole["upstream"][0]["servers"][0], "127.0.0.1:9000");
    assert_eq!(
        files.get(&Part::One(Kind::Site, "blog".into())),
        Some(json!({"name": "blog", "bindings": ["http://127.0.0.1:8081"]}))
    );
    assert_eq!(files.get(&Part::One(Kind::Site, "nope".into())), None);
}

#[test]
fn a_change_rewrites_its_part_alone_and_keeps_every_comment_elsewhere() {
    let (dir, mut files) = files();
    let before = files.version();
    let site =
        json!({"bindings": ["http://127.0.0.1:8090"], "root": "www", "app": [{"pool": "main"}]});
    assert_eq!(
        files.put(&Part::One(Kind::Site, "home".into()), &site),
        Ok(false)
    );
    let changes = files.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (path, text) = &changes[0];
    assert!(path.ends_with("espalier.toml"));
    let text = text.as_deref().unwrap();
    for kept in [
        "# the shop's server",
        "# where panels reach us",
        "name = \"main\"   # kept as written",
    ] {
        assert!(text.contains(kept), "{text}");
    }
    assert!(
        text.contains("[[site]]\nname = \"home\"\nbindings = [\"http://127.0.0.1:8090\"]"),
        "{text}"
    );
    assert!(text.contains("[[site.app]]\npool = \"main\""), "{text}");
    // In its place: before the upstream group, as it was.
    assert!(
        text.find("name = \"home\"") < text.find("[[upstream]]"),
        "{text}"
    );
    assert_ne!(files.version(), before);
    // What it reads back is what was put.
    let got = files.get(&Part::One(Kind::Site, "home".into())).unwrap();
    assert_eq!(got["app"][0]["pool"], "main");
    drop(dir);
}

#[test]
fn new_sites_and_pools_get_files_of_their_own_and_a_removed_one_takes_its_file() {
    let (dir, mut files) = files();
    let shop = json!({"name": "shop", "bindings": ["http://127.0.0.1:8082"]});
    assert_eq!(
        files.put(&Part::One(Kind::Site, "shop".into()), &shop),
        Ok(true)
    );
    assert_eq!(
        files.put(&Part::One(Kind::Pool, "shop".into()), &json!({})),
        Ok(true)
    );
    let group = json!({"servers": ["127.0.0.1:9001"]});
    assert_eq!(
        files.put(&Part::One(Kind::Upstream, "more".into()), &group),
        Ok(true)
    );
    let changes: std::collections::HashMap<_, _> = files.changes().into_iter().collect();
    let at = |p: &str| dir.path().join(p);
    assert_eq!(
        changes[&at("sites.d/shop.toml")].as_deref(),
        Some("[[site]]\nname = \"shop\"\nbindings = [\"http://127.0.0.1:8082\"]\n")
    );
    assert_eq!(
        changes[&at("sites.d/shop.pool.toml")].as_deref(),
        Some("[[pool]]\nname = \"shop\"\n")
    );
    assert!(changes[&at("espalier.toml")]
        .as_deref()
        .unwrap()
        .contains("name = \"more\""));
    files.delete(&Part::One(Kind::Site, "blog".into())).unwrap();
    let changes: std::collections::HashMap<_, _> = files.changes().into_iter().collect();
    assert_eq!(changes[&at("sites.d/blog.toml")], None);
    assert_eq!(
        files.delete(&Part::One(Kind::Site, "blog".into())),
        Err(Refusal(404, "there is no site `blog`".into()))
    );
}

#[test]
fn a_merge_patch_changes_what_it_names() {
    let (_dir, mut files) = files();
    let part = Part::One(Kind::Pool, "main".into());
    files
        .patch(&part, &json!({"processes": 2, "user": "www-data"}))
        .unwrap();
    files.patch(&part, &json!({"user": null})).unwrap();
    assert_eq!(
        files.get(&part),
        Some(json!({"name": "main", "processes": 2}))
    );
    let server = files.get(&Part::Server).unwrap();
    assert_eq!(server, json!({"admin": "127.0.0.1:9180"}));
}

#[test]
fn what_toml_cannot_say_or_a_name_at_odds_with_the_path_is_refused() {
    let (_dir, mut files) = files();
    let part = Part::One(Kind::Site, "home".into());
    let Err(Refusal(400, why)) = files.put(&part, &json!({"root": null})) else {
        panic!()
    };
    assert!(why.contains("`site.root` is null"), "{why}");
    let Err(Refusal(400, why)) = files.put(&part, &json!({"name": "other"})) else {
        panic!()
    };
    assert!(why.contains("names `home`"), "{why}");
    assert!(files.changes().is_empty());
}

#[test]
fn a_whole_document_replaces_everything() {
    let (dir, mut files) = files();
    let doc = json!({
        "server": {"admin": "127.0.0.1:9181"},
        "include": ["sites.d/*.toml"],
        "site": [{"name": "only", "bindings": ["http://127.0.0.1:8083"]}],
    });
    files.put(&Part::Whole, &doc).unwrap();
    let changes: std::collections::HashMap<_, _> = files.changes().into_iter().collect();
    assert_eq!(changes[&dir.path().join("sites.d/blog.toml")], None);
    assert!(changes[&dir.path().join("sites.d/only.toml")].is_some());
    let whole = files.get(&Part::Whole).unwrap();
    assert_eq!(whole["server"]["admin"], "127.0.0.1:9181");
    assert_eq!(whole["site"].as_array().unwrap().len(), 1);
    assert!(whole.get("pool").is_none());
}

#[test]
fn merge_patch_follows_rfc_7396() {
    // RFC 7396's appendix A, a few of its cases.
    for (target, patch, result) in [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (json!(["a"]), json!({"a": "b"}), json!({"a": "b"})),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
    ] {
        let mut t = target.clone();
        merge_patch(&mut t, &patch);
        assert_eq!(t, result, "{target} + {patch}");
    }
}

#[test]
fn the_version_of_an_edit_is_the_version_of_the_files_it_writes() {
    let (dir, mut files) = files();
    let main = dir.path().join("espalier.toml");
    let before = version_on_disk(&main).unwrap();
    assert_eq!(before, files.version());
    assert_eq!(before, files.version_as_read());
    let shop = json!({"bindings": ["http://127.0.0.1:8082"]});
    files
        .put(&Part::One(Kind::Site, "shop".into()), &shop)
        .unwrap();
    files.delete(&Part::One(Kind::Site, "blog".into())).unwrap();
    files
        .patch(
            &Part::One(Kind::Pool, "main".into()),
            &json!({"processes": 2}),
        )
        .unwrap();
    // A refusal names the files as they were read: a site put, one removed, a pool changed.
    assert_eq!(files.version_as_read(), before);
    assert_ne!(files.version(), before);
    for (path, text) in files.changes() {
        match text {
            Some(text) => std::fs::write(path, text).unwrap(),
            None => std::fs::remove_file(path).unwrap(),
        }
    }
    assert_eq!(version_on_disk(&main).unwrap(), files.version());
    assert_eq!(ConfigFiles::read(&main).unwrap().version(), files.version());
}

#[test]
fn a_version_hashes_each_path_and_text_in_order_whatever_their_sizes() {
    // What the chunks fed to the hash must add up to: path, 0, text, 0 for each file.
    let big = "x".repeat(200 * 1024);
    let files: Vec<(PathBuf, String)> = vec![
        ("/c/a.toml".into(), "[[site]]\n".into()),
        ("/c/b.toml".into(), big),
        ("/c/d.toml".into(), String::new()),
        ("/c/e.toml".into(), "y".repeat(64 * 1024 - 5)),
        ("/c/f.toml".into(), "z".into()),
    ];
    let mut whole = Vec::new();
    for (path, text) in &files {
        whole.extend_from_slice(path.as_os_str().as_encoded_bytes());
        whole.push(0);
        whole.extend_from_slice(text.as_bytes());
        whole.push(0);
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &whole);
    let want: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let texts = files.iter().map(|(p, t)| (p.as_path(), t.as_str()));
    assert_eq!(version_of(texts.clone().collect()), want);
    // In any order given: the paths' order is the version's.
    assert_eq!(version_of(texts.rev().collect()), want);
}
