use super::*;

fn smtp(host: &str, port: u16, implicit_tls: bool) -> UpstreamKind {
    UpstreamKind::Smtp(SmtpUpstream {
        host: host.into(),
        port,
        implicit_tls,
        credentials: SmtpCredentials::default(),
        client: SmtpClient::default(),
    })
}

#[test]
fn urls_parse_with_default_ports() {
    assert_eq!(
        UpstreamKind::from_url("smtp://email-smtp.eu-west-1.amazonaws.com:587").unwrap(),
        smtp("email-smtp.eu-west-1.amazonaws.com", 587, false)
    );
    assert_eq!(
        UpstreamKind::from_url("smtps://mail.example").unwrap(),
        smtp("mail.example", 465, true)
    );
    assert_eq!(
        UpstreamKind::from_url("smtp://[::1]:2526").unwrap(),
        smtp("::1", 2526, false)
    );
    assert_eq!(
        UpstreamKind::from_url("file://outbox").unwrap(),
        UpstreamKind::File(FileUpstream {
            dir: "outbox".into()
        })
    );
    assert_eq!(
        UpstreamKind::from_url("mx://").unwrap(),
        UpstreamKind::Mx(MxUpstream::default())
    );
    assert_eq!(UpstreamKind::Mx(MxUpstream::default()).to_string(), "mx://");
    assert_eq!(smtp("::1", 2526, false).to_string(), "smtp://[::1]:2526");
    assert!(UpstreamKind::from_url("mx://example.com").is_err());
    assert!(UpstreamKind::from_url("gopher://x").is_err());
    assert!(UpstreamKind::from_url("smtp://host:notaport").is_err());
}

#[test]
fn mx_keys_have_defaults_and_belong_to_mx_alone() {
    let parse = |text: &str| toml::from_str::<UpstreamConfig>(text);
    let mx_of = |cfg: UpstreamConfig| match cfg.kind {
        UpstreamKind::Mx(mx) => mx,
        other => panic!("not mx: {other}"),
    };
    let mx = mx_of(parse("url = \"mx://\"").unwrap());
    assert_eq!((mx.port(), mx.max_connections_per_domain().get()), (25, 10));
    let set = mx_of(
        parse("url = \"mx://\"\nmx_port = 2525\nnameservers = [\"127.0.0.1:5353\"]").unwrap(),
    );
    assert_eq!(set.port(), 2525);
    assert_eq!(
        set.nameservers(),
        Some(&["127.0.0.1:5353".parse().unwrap()][..])
    );
    for (key, text) in [
        ("mx_port", "url = \"smtp://h:25\"\nmx_port = 2525"),
        (
            "nameservers",
            "url = \"file://x\"\nnameservers = [\"127.0.0.1:53\"]",
        ),
        (
            "max_connections_per_domain",
            "url = \"smtp://h:25\"\nmax_connections_per_domain = 2",
        ),
        (
            "username",
            "url = \"mx://\"\nusername = \"u\"\npassword = \"p\"",
        ),
        ("nameservers", "url = \"mx://\"\nnameservers = []"),
        ("mx_port", "url = \"mx://\"\nmx_port = 0"),
        // The URL after the key: the key is still judged by the URL's kind.
        ("mx_port", "mx_port = 2525\nurl = \"smtp://h:25\""),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(&format!("upstream.{key}")), "{text}: {err}");
    }
    assert!(parse("url = \"mx://\"\nnameservers = [\"nope\"]").is_err());
}

#[test]
fn each_kind_reads_its_own_keys_and_smtp_clients_share_theirs() {
    let cfg: UpstreamConfig = toml::from_str(
        "url = \"smtps://h\"\nusername = \"u\"\npassword_env = \"P\"\ntls = \"required\"\n\
         helo_name = \"me.test\"\nmax_messages_per_connection = 3\npool_size = 2",
    )
    .unwrap();
    let UpstreamKind::Smtp(smtp) = &cfg.kind else {
        panic!("{:?}", cfg.kind)
    };
    assert_eq!(smtp.credentials.username.as_deref(), Some("u"));
    assert_eq!(smtp.credentials.password_env.as_deref(), Some("P"));
    assert_eq!(smtp.client.tls, UpstreamTls::Required);
    assert_eq!(smtp.client.helo_name(), "me.test");
    assert_eq!(smtp.client.max_messages_per_connection, 3);
    assert_eq!(cfg.pool_size.get(), 2);
    let mx: UpstreamConfig = toml::from_str("url = \"mx://\"\nhelo_name = \"mx.test\"").unwrap();
    let UpstreamKind::Mx(mx) = &mx.kind else {
        panic!("{:?}", mx.kind)
    };
    assert_eq!(mx.client.helo_name(), "mx.test");
    let file = toml::from_str::<UpstreamConfig>("url = \"file://x\"\ntls = \"none\"");
    let err = file.unwrap_err().to_string();
    assert!(
        err.contains("upstream.tls") && err.contains("file://x"),
        "{err}"
    );
}

#[test]
fn a_kind_key_after_the_url_is_refused_at_its_own_line() {
    let text = |body: &str| format!("[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\n{body}\n");
    for (body, key, line) in [
        ("url = \"mx://\"\n\nmx_port = \"x\"", "mx_port", 6),
        ("url = \"smtp://h\"\ntls = \"bogus\"", "tls", 5),
        (
            "url = \"smtp://h\"\npool_size = 2\nmx_port = 3",
            "upstream.mx_port",
            6,
        ),
        (
            "url = \"mx://\"\nnameservers = []",
            "upstream.nameservers",
            5,
        ),
        // Before the URL, the kind is not known yet: the table's line.
        ("mx_port = 3\nurl = \"smtp://h\"", "upstream.mx_port", 3),
    ] {
        let err = crate::config::Config::parse(&text(body))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{body}: {err}");
        assert!(err.contains(&format!("line {line}")), "{body}: {err}");
    }
}

#[test]
fn ses_takes_a_region_its_own_keys_and_the_shared_ones() {
    let parse = |text: &str| toml::from_str::<UpstreamConfig>(text);
    let cfg = parse(
        "url = \"ses://eu-west-1\"\nendpoint_url = \"http://127.0.0.1:4566\"\n\
         configuration_set = \"transactional\"\ntimeout_ms = 5000\npool_size = 4",
    )
    .unwrap();
    let UpstreamKind::Ses(ses) = &cfg.kind else {
        panic!("{:?}", cfg.kind)
    };
    assert_eq!(ses.region, "eu-west-1");
    assert_eq!(
        ses.keys.endpoint_url.as_deref(),
        Some("http://127.0.0.1:4566")
    );
    assert_eq!(ses.keys.configuration_set.as_deref(), Some("transactional"));
    assert_eq!((cfg.timeout_ms.get(), cfg.pool_size.get()), (5000, 4));
    assert_eq!(cfg.url(), "ses://eu-west-1");
    for bad in ["ses://", "ses://EU west", "ses://eu-west-1/x"] {
        assert!(UpstreamKind::from_url(bad).is_err(), "{bad}");
    }
    for (key, text) in [
        ("tls", "url = \"ses://eu-west-1\"\ntls = \"required\""),
        ("username", "url = \"ses://eu-west-1\"\nusername = \"u\""),
        ("helo_name", "url = \"ses://eu-west-1\"\nhelo_name = \"h\""),
        ("mx_port", "url = \"ses://eu-west-1\"\nmx_port = 25"),
        (
            "endpoint_url",
            "url = \"smtp://h:25\"\nendpoint_url = \"http://x\"",
        ),
        (
            "endpoint_url",
            "url = \"ses://eu-west-1\"\nendpoint_url = \"ftp://x\"",
        ),
        (
            "configuration_set",
            "url = \"ses://eu-west-1\"\nconfiguration_set = \"a b\"",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(&format!("upstream.{key}")), "{text}: {err}");
    }
    // An SMTP key on a ses:// table, refused at its own line.
    let text = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"ses://eu-west-1\"\n\npassword_env = \"P\"\n";
    let err = crate::config::Config::parse(text).unwrap_err().to_string();
    assert!(
        err.contains("upstream.password_env") && err.contains("line 6"),
        "{err}"
    );
}

#[test]
fn ses_checks_tenant_identities_by_default_and_refreshes_every_five_minutes() {
    let parse = |text: &str| toml::from_str::<UpstreamConfig>(text);
    let keys = |cfg: UpstreamConfig| match cfg.kind {
        UpstreamKind::Ses(ses) => ses.keys,
        other => panic!("{other:?}"),
    };
    let default = keys(parse("url = \"ses://eu-west-1\"").unwrap());
    assert!(default.check_identities);
    assert_eq!(
        default.tenant_refresh(),
        std::time::Duration::from_secs(300)
    );
    let set = keys(
        parse("url = \"ses://eu-west-1\"\ncheck_identities = false\ntenant_refresh_ms = 60000")
            .unwrap(),
    );
    assert!(!set.check_identities);
    assert_eq!(set.tenant_refresh(), std::time::Duration::from_secs(60));
    assert!(parse("url = \"ses://eu-west-1\"\ntenant_refresh_ms = 0").is_err());
    let err = parse("url = \"smtp://h:25\"\ncheck_identities = false")
        .unwrap_err()
        .to_string();
    assert!(err.contains("upstream.check_identities"), "{err}");
}

/// The `[upstream]` of a file with `keys` after `url = "smtp://mail.test:587"`, or why not.
fn xoauth2(keys: &str) -> Result<UpstreamConfig, String> {
    let text = format!("[upstream]\nurl = \"smtp://mail.test:587\"\n{keys}");
    crate::config::Config::parse(&format!("[smtp]\nlisten = [\"127.0.0.1:0\"]\n{text}"))
        .map(|mut c| c.upstreams.remove(0))
        .map_err(|e| e.to_string())
}

const MICROSOFT: &str = "[upstream.oauth]\nprovider = \"microsoft\"\ntenant_id = \"contoso.onmicrosoft.com\"\nclient_id = \"app\"\nclient_secret_env = \"M365_SECRET\"";

#[test]
fn xoauth2_keys_go_together() {
    let ok = xoauth2(&format!(
        "tls = \"required\"\nauth = \"xoauth2\"\nusername = \"printer@contoso.com\"\n{MICROSOFT}"
    ))
    .unwrap();
    let UpstreamKind::Smtp(smtp) = &ok.kind else {
        panic!("smtp")
    };
    assert_eq!(
        smtp.credentials.mailbox(),
        Some(Mailbox::Fixed("printer@contoso.com"))
    );
    let oauth = smtp.credentials.oauth.as_ref().unwrap();
    assert_eq!(
        oauth.token_url().unwrap().to_string(),
        "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
    );
    assert_eq!(
        oauth.scope(),
        Some("https://outlook.office365.com/.default")
    );

    let refused = [
        ("auth = \"xoauth2\"\nusername = \"a@b.c\"\ntls = \"required\"", "needs an [upstream.oauth]"),
        (&format!("tls = \"required\"\nusername = \"a@b.c\"\n{MICROSOFT}"), "only for auth = \"xoauth2\""),
        (&format!("auth = \"xoauth2\"\nusername = \"a@b.c\"\n{MICROSOFT}"), "tls = \"required\""),
        (&format!("tls = \"required\"\nauth = \"xoauth2\"\n{MICROSOFT}"), "needs `username`"),
        (
            &format!("tls = \"required\"\nauth = \"xoauth2\"\nusername = \"a@b.c\"\npassword = \"x\"\n{MICROSOFT}"),
            "takes no `password`",
        ),
        (
            &format!("tls = \"required\"\nauth = \"xoauth2\"\nusername = \"{{sender}}\"\n{MICROSOFT}"),
            "needs `mailboxes`",
        ),
        (
            &format!("tls = \"required\"\nauth = \"xoauth2\"\nusername = \"{{sender}}\"\nmailboxes = [\"contoso.com\"]\n{MICROSOFT}"),
            "neither an address nor an @domain",
        ),
        (
            "tls = \"required\"\nauth = \"xoauth2\"\nusername = \"a@b.c\"\n[upstream.oauth]\nprovider = \"google\"",
            "`key_file` or `key_env`",
        ),
        (
            "tls = \"required\"\nauth = \"xoauth2\"\nusername = \"a@b.c\"\n[upstream.oauth]\nprovider = \"generic\"\nclient_id = \"a\"\nclient_secret_env = \"S\"",
            "needs `token_url`",
        ),
        (
            "tls = \"required\"\nauth = \"xoauth2\"\nusername = \"a@b.c\"\n[upstream.oauth]\nprovider = \"generic\"\nclient_id = \"a\"\nclient_secret_env = \"S\"\ntoken_url = \"http://idp.example/token\"",
            "http:// only to a loopback",
        ),
        (
            "tls = \"required\"\nauth = \"xoauth2\"\nusername = \"a@b.c\"\n[upstream.oauth]\nprovider = \"microsoft\"\nclient_id = \"a\"\nclient_secret_env = \"S\"\ntenant_id = \"t\"\nkey_env = \"K\"",
            "give one of",
        ),
    ];
    for (keys, why) in refused {
        let error = xoauth2(keys).unwrap_err();
        assert!(error.contains(why), "{keys}:\n{error}");
    }
    let none = xoauth2(&format!(
        "tls = \"none\"\nauth = \"xoauth2\"\nusername = \"{{sender}}\"\nmailboxes = [\"@contoso.com\"]\n{MICROSOFT}"
    ))
    .unwrap();
    let UpstreamKind::Smtp(smtp) = &none.kind else {
        panic!("smtp")
    };
    assert_eq!(smtp.credentials.mailbox(), Some(Mailbox::Sender));
}
