//! A pool's application keys: its command and folder, when it starts (always or on demand),
//! its idle timeout, and an activated pool's own address.

use super::*;
#[test]
fn app_keys_are_validated_and_a_bare_file_name_runs_apps_in_the_current_folder() {
    let text = format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\", \"-c\", \"exec true\"]\ntransport = \"activation\"\nenvironment = {{ A = \"1\" }}\n{SITE}"
    );
    let c = Config::parse(&text, Path::new("app.toml"), &fixture("dl980")).unwrap();
    let app = c.pools[0].app.as_ref().expect("an app pool");
    assert_eq!(app.directory, std::env::current_dir().unwrap());
    assert_eq!(app.transport, Transport::Activation);
    assert_eq!(app.environment, vec![("A".to_string(), "1".to_string())]);
    assert_eq!(c.sites[0].apps[0].handler, HandlerKind::Proxy);
    // The default transport is the proxy; its timeouts default to nginx's.
    let c = parse(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{SITE}"
    ))
    .unwrap();
    let app = c.pools[0].app.as_ref().unwrap();
    assert_eq!(app.transport, Transport::Proxy);
    assert_eq!(app.response_timeout, Duration::from_secs(60));
    for (extra, key, says) in [
        ("health = \"/h\"", "pool[0].health", "applies only to a pool that runs an application"),
        ("command = [\"sh\"]\ntransport = \"activation\"\nupstream = \"unix\"", "pool[0].upstream", "applies only to transport = \"proxy\""),
        ("command = [\"sh\"]\nhealth = \"healthz\"", "pool[0].health", "is not a URL path"),
        ("command = [\"sh\"]\ntransport = \"fastcgi\"\nhealth = \"/h\"\n[[site]]\nname = \"s\"\nroot = \"/\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n#", "pool[0].health", "answers FastCGI, not HTTP"),
        ("command = [\"sh\"]\ntransport = \"fastcgi\"", "site[0].app[0].pool", "found under the site's `root`"),
        ("command = [\"sh\"]\ndirectory = \"/no/such/dir\"", "pool[0].directory", "cannot be used"),
    ] {
        // An `extra` ending in `#` brings its own site and comments out the default one.
        let site = if extra.ends_with('#') { SITE.replace('\n', "\n#") } else { SITE.to_string() };
        let e = error(&format!("[[pool]]\nname = \"p\"\n{extra}\n{site}"));
        assert!(e.contains(&format!("key `{key}`")) && e.contains(says), "{extra}: {e}");
    }
    // An activated app takes every connection of its address: no path of its own, no handler.
    let e = error("[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npath = \"/api\"\npool = \"p\"\n");
    assert!(e.contains("cannot be given only `/api`"), "{e}");
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{}",
        SITE.replace("pool = \"p\"", "pool = \"p\"\nhandler = \"dynamic\"")
    ));
    assert!(e.contains("remove `handler`"), "{e}");
    // Files beside the app are fine (from the site's root, which this site lacks).
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{}",
        SITE.replace("pool = \"p\"", "pool = \"p\"\nhandler = \"static\"")
    ));
    assert!(
        e.contains("a static path beside an application serves files from the site's `root`"),
        "{e}"
    );
}

#[test]
fn pools_start_always_below_a_hundred_and_on_demand_from_a_hundred() {
    let pools = |n: usize, extra: &str| {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[pool]]\nname = \"p{i}\"\n{}",
                if i == 0 { extra } else { "" }
            ));
        }
        text.push_str(SITE.replace("pool = \"p\"", "pool = \"p0\"").as_str());
        parse(&text).unwrap()
    };
    let small = pools(99, "");
    assert!(small.pools.iter().all(|p| p.start == StartMode::Always));
    let big = pools(100, "start = \"always\"\n");
    assert_eq!(big.pools[0].start, StartMode::Always, "said so");
    assert!(big.pools[1..]
        .iter()
        .all(|p| p.start == StartMode::OnDemand));
    assert_eq!(big.pools[1].idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
    let never = parse(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_timeout = \"0\"\n{SITE}"
    ))
    .unwrap();
    assert_eq!(never.pools[0].idle_timeout, None);
}

#[test]
fn idle_timeout_on_a_pool_that_always_runs_is_refused() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nidle_timeout = \"5m\"\n{SITE}"
    ));
    assert!(
        e.contains("test.toml:3: key `pool[0].idle_timeout`")
            && e.contains("start = \"on-demand\""),
        "{e}"
    );
    let e = error(&format!("[[pool]]\nname = \"p\"\nstart = \"lazy\"\n{SITE}"));
    assert!(
        e.contains("pool[0].start") && e.contains("\"on-demand\""),
        "{e}"
    );
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nidle_action = \"suspend\"\n{SITE}"
    ));
    assert!(
        e.contains("test.toml:3: key `pool[0].idle_action`: applies to pools that start on demand"),
        "{e}"
    );
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_action = \"pause\"\n{SITE}"
    ));
    assert!(
        e.contains("`pause` is not one of \"stop\", \"suspend\""),
        "{e}"
    );
    let c = parse(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_action = \"suspend\"\n{SITE}"
    ))
    .unwrap();
    assert_eq!(c.pools[0].idle_action, IdleAction::Suspend);
}

#[test]
fn an_activated_pools_address_is_its_own() {
    let two = |first: &str, second: &str| {
        format!("[[pool]]\nname = \"act\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[pool]]\nname = \"web\"\n[[site]]\nname = \"a\"\nbindings = [\"{first}\"]\n[[site.app]]\npool = \"act\"\n[[site]]\nname = \"b\"\nbindings = [\"{second}\"]\n[[site.app]]\npool = \"web\"\n")
    };
    let e = error(&two(
        "http://127.0.0.1:8080:a.example",
        "http://0.0.0.0:8080:b.example",
    ));
    assert!(
        e.contains("site[1].bindings[0]")
            && e.contains(
                "shared by site `a` of pool `act` (transport = \"activation\") and site `b`"
            ),
        "{e}"
    );
    // Different ports, or different addresses of one port, do not meet.
    assert!(parse(&two(
        "http://127.0.0.1:8080:a.example",
        "http://127.0.0.1:8081:b.example"
    ))
    .is_ok());
    assert!(parse(&two(
        "http://127.0.0.1:8080:a.example",
        "http://127.0.0.2:8080:b.example"
    ))
    .is_ok());
}
