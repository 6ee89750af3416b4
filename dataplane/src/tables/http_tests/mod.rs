//! Unit tests of HTTP matching and the writers, with literal requests, and a property
//! test of [`HttpRoutes::find`] against a reference evaluator.

use super::*;

mod props;

fn req<'a>(path: &'a str, headers: &'a [Header<'a>]) -> Request<'a> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    Request {
        method: "GET",
        scheme: "http",
        authority: "www.example.com",
        path,
        query,
        headers,
        port: 80,
        source: "10.0.0.1".parse().expect("ip"),
    }
}

fn re(p: &str) -> Box<Regex> {
    Box::new(Regex::new(p).expect("regex"))
}

fn path(m: StrMatch) -> RequestMatch {
    RequestMatch {
        path: Some(m),
        ..RequestMatch::default()
    }
}

#[test]
fn paths_exact_prefix_segments_regex_and_case() {
    let r = |p| req(p, &[]);
    let exact = path(StrMatch::Exact("/foo".into()));
    assert!(exact.holds(&r("/foo")));
    assert!(
        exact.holds(&r("/foo?x=1")),
        "the query is not part of the path"
    );
    assert!(!exact.holds(&r("/foo/")));
    assert!(!exact.holds(&r("/FOO")));
    let mut folded = exact.clone();
    folded.ignore_case = true;
    assert!(folded.holds(&r("/FoO")));

    let prefix = path(StrMatch::Prefix("/foo".into()));
    assert!(prefix.holds(&r("/foobar")));
    assert!(!prefix.holds(&r("/fo")));

    let seg = path(StrMatch::PathPrefix("/foo".into()));
    assert!(seg.holds(&r("/foo")));
    assert!(seg.holds(&r("/foo/")));
    assert!(seg.holds(&r("/foo/bar")));
    assert!(!seg.holds(&r("/foobar")));
    let root = path(StrMatch::PathPrefix("".into()));
    assert!(root.holds(&r("/")) && root.holds(&r("/anything")));

    let rx = path(StrMatch::Regex(re("/v[0-9]+/.*")));
    assert!(rx.holds(&r("/v12/x")));
    assert!(!rx.holds(&r("/a/v12/x")), "anchored at the start");
    assert!(
        !path(StrMatch::Regex(re("/v[0-9]+"))).holds(&r("/v1/x")),
        "and the end"
    );
    let mut rx_folded = rx.clone();
    rx_folded.ignore_case = true;
    assert!(
        !rx_folded.holds(&r("/V1/x")),
        "ignoreUriCase leaves expressions alone"
    );
}

#[test]
fn method_scheme_authority_port_sources() {
    let mut q = req("/", &[]);
    let m = RequestMatch {
        method: Some("POST".into()),
        ..RequestMatch::default()
    };
    assert!(!m.holds(&q));
    q.method = "POST";
    assert!(m.holds(&q));
    q.method = "post";
    assert!(!m.holds(&q), "methods are case-sensitive");

    let m = RequestMatch {
        scheme: Some(StrMatch::Exact("https".into())),
        ..RequestMatch::default()
    };
    assert!(!m.holds(&q));
    q.scheme = "https";
    assert!(m.holds(&q));

    let m = RequestMatch {
        authority: Some(StrMatch::Prefix("www.".into())),
        port: Some(80),
        ..RequestMatch::default()
    };
    assert!(m.holds(&q));
    q.port = 8080;
    assert!(!m.holds(&q));

    let m = RequestMatch {
        sources: Box::new([
            ("192.0.2.0".parse().expect("ip"), 24),
            ("fd00::".parse().expect("ip"), 8),
        ]),
        ..RequestMatch::default()
    };
    q.source = "192.0.2.77".parse().expect("ip");
    assert!(m.holds(&q));
    q.source = "192.0.3.1".parse().expect("ip");
    assert!(!m.holds(&q));
    q.source = "fd12::1".parse().expect("ip");
    assert!(m.holds(&q));
    assert!(RequestMatch::default().holds(&q));
    assert!(RequestMatch::default().is_unconditional());
}

#[test]
fn headers_first_line_case_insensitive_names_and_invert() {
    let hs = [
        Header {
            name: "X-Env",
            value: b"canary",
        },
        Header {
            name: "x-env",
            value: b"prod",
        },
    ];
    let q = req("/", &hs);
    let h = |name: &str, value: StrMatch, invert: bool| RequestMatch {
        headers: Box::new([HeaderMatch {
            name: name.into(),
            value,
            invert,
        }]),
        ..RequestMatch::default()
    };
    assert!(h("x-env", StrMatch::Exact("canary".into()), false).holds(&q));
    assert!(
        !h("x-env", StrMatch::Exact("prod".into()), false).holds(&q),
        "only the first line counts"
    );
    assert!(h("X-ENV", StrMatch::Regex(re("can.*")), false).holds(&q));
    assert!(h("x-env", StrMatch::Present, false).holds(&q));
    assert!(!h("x-other", StrMatch::Present, false).holds(&q));
    assert!(!h("x-env", StrMatch::Prefix("can".into()), true).holds(&q));
    assert!(h("x-env", StrMatch::Prefix("pro".into()), true).holds(&q));
    assert!(
        h("x-absent", StrMatch::Exact("a".into()), true).holds(&q),
        "an absent header satisfies withoutHeaders"
    );
    assert!(
        !h("x-env", StrMatch::Exact("CANARY".into()), false).holds(&q),
        "values are case-sensitive"
    );
}

#[test]
fn query_first_occurrence_exact_names_no_decoding() {
    let q = |name: &str, value: StrMatch| RequestMatch {
        query: Box::new([QueryMatch {
            name: name.into(),
            value,
        }]),
        ..RequestMatch::default()
    };
    let r = req("/p?a=1&b=two&a=3&flag&e=%41", &[]);
    assert!(q("a", StrMatch::Exact("1".into())).holds(&r));
    assert!(!q("a", StrMatch::Exact("3".into())).holds(&r));
    assert!(q("b", StrMatch::Regex(re("t.o"))).holds(&r));
    assert!(
        !q("B", StrMatch::Present).holds(&r),
        "names are case-sensitive"
    );
    assert!(q("flag", StrMatch::Exact("".into())).holds(&r));
    assert!(q("flag", StrMatch::Present).holds(&r));
    assert!(!q("zz", StrMatch::Present).holds(&r));
    assert!(
        q("e", StrMatch::Exact("%41".into())).holds(&r),
        "not decoded"
    );
    assert_eq!(query_param("x=1=2", "x"), Some("1=2"));
    assert_eq!(query_param("", "x"), None);
}

#[test]
fn regex_errors_name_the_problem() {
    assert!(matches!(Regex::new("(a"), Err(RegexError::Syntax { .. })));
    let big = Regex::new(r"\w{50}\w{50}\w{50}");
    assert!(
        matches!(&big, Err(RegexError::TooLarge { limit, .. }) if limit.contains("SIZE_LIMIT")),
        "{big:?}"
    );
    assert!(matches!(
        RewriteRegex::new("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)"),
        Err(RegexError::TooManyGroups { groups: 11, .. })
    ));
    // RE2 syntax as Envoy takes it: classes, repetition, alternation, non-greedy.
    let r = re(r"(?i)/api/(v1|v2)/[a-z]+?/\d{1,3}");
    assert!(r.is_match(b"/API/v2/items/42"));
    assert!(!r.is_match(b"/api/v3/items/42"));
}

fn loc(r: &Redirect, q: &Request<'_>, m: &RequestMatch) -> String {
    let mut out = [0u8; 256];
    let n = r.write_location(q, m, &mut out).expect("fits");
    String::from_utf8(out[..n].to_vec()).expect("utf8")
}

fn redirect() -> Redirect {
    Redirect {
        code: 302,
        scheme: None,
        host: None,
        port: RedirectPort::Keep,
        path: None,
    }
}

#[test]
fn redirect_locations() {
    let any = RequestMatch::default();
    let mut q = req("/a/b?x=1", &[]);
    assert_eq!(loc(&redirect(), &q, &any), "http://www.example.com/a/b?x=1");
    // Istio: scheme https, the request's port 80 is http's default and not kept as :80.
    q.authority = "www.example.com:80";
    let r = Redirect {
        scheme: Some("https".into()),
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "https://www.example.com/a/b?x=1");
    q.authority = "www.example.com:8000";
    assert_eq!(loc(&r, &q, &any), "https://www.example.com:8000/a/b?x=1");
    q.authority = "www.example.com:80";
    let r = Redirect {
        scheme: Some("https".into()),
        port: RedirectPort::SchemeDefault,
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "https://www.example.com/a/b?x=1");
    // derivePort FROM_REQUEST_PORT: the listener's port.
    q.port = 8080;
    let r = Redirect {
        port: RedirectPort::Listener,
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "http://www.example.com:8080/a/b?x=1");
    // A new host drops the request's port; an explicit port is written unless default.
    let r = Redirect {
        host: Some("other.example".into()),
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "http://other.example/a/b?x=1");
    let r = Redirect {
        host: Some("other.example".into()),
        port: RedirectPort::Port(8443),
        path: Some(RedirectPath::Full("/new".into())),
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "http://other.example:8443/new?x=1");
    let r = Redirect {
        scheme: Some("https".into()),
        port: RedirectPort::Port(443),
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "https://www.example.com/a/b?x=1");
    // A full path carrying its own query replaces the query.
    let r = Redirect {
        path: Some(RedirectPath::Full("/n?y=2".into())),
        ..redirect()
    };
    assert_eq!(loc(&r, &q, &any), "http://www.example.com/n?y=2");
    // IPv6 authority.
    q.authority = "[::1]:8080";
    assert_eq!(loc(&redirect(), &q, &any), "http://[::1]:8080/a/b?x=1");
    // Too small a buffer.
    let mut small = [0u8; 8];
    assert_eq!(redirect().write_location(&q, &any, &mut small), None);
}

/// Gateway API `ReplacePrefixMatch` (the table in `HTTPPathModifier`'s docs) and
/// Istio's plain prefix replacement.
#[test]
fn prefix_replacement_rules() {
    let cases = [
        // (matched prefix, request path, replacement, result)
        ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo", "/foo/", "/xyz", "/xyz/"),
        ("/foo/", "/foo/", "/xyz/", "/xyz/"),
        ("/foo", "/foo", "/", "/"),
        ("/foo", "/foo/bar", "/", "/bar"),
        ("/", "/foo", "/xyz", "/xyz/foo"),
        ("/", "/", "/xyz", "/xyz/"),
    ];
    for (prefix, p, with, want) in cases {
        let m = path(StrMatch::PathPrefix(prefix.trim_end_matches('/').into()));
        let q = req(p, &[]);
        assert!(m.holds(&q), "{prefix} {p}");
        let r = Redirect {
            path: Some(RedirectPath::Prefix(with.into())),
            ..redirect()
        };
        assert_eq!(
            loc(&r, &q, &m),
            format!("http://www.example.com{want}"),
            "{prefix} {p} {with}"
        );
        let rw = Rewrite {
            path: Some(PathRewrite::Prefix(with.into())),
            authority: None,
        };
        let mut out = [0u8; 64];
        let n = rw
            .write_path(&q, &m, &mut HttpScratch::new(), &mut out)
            .expect("fits");
        assert_eq!(&out[..n], want.as_bytes(), "{prefix} {p} {with}");
    }
    // Istio / Envoy prefix_rewrite: plain replacement.
    let m = path(StrMatch::Prefix("/foo".into()));
    let rw = Rewrite {
        path: Some(PathRewrite::Prefix("/xyz/".into())),
        authority: None,
    };
    let mut out = [0u8; 64];
    let n = rw
        .write_path(&req("/foobar", &[]), &m, &mut HttpScratch::new(), &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/xyz/bar");
    // After an exact match, the whole path.
    let m = path(StrMatch::Exact("/foo".into()));
    let n = rw
        .write_path(&req("/foo", &[]), &m, &mut HttpScratch::new(), &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/xyz/");
}

fn regex_rewrite(pattern: &str, replacement: &str, p: &str, scratch: &mut HttpScratch) -> String {
    let rw = Rewrite {
        path: Some(PathRewrite::Regex {
            regex: RewriteRegex::new(pattern).expect("regex"),
            replacement: replacement.into(),
        }),
        authority: None,
    };
    let mut out = [0u8; 128];
    let n = rw
        .write_path(&req(p, &[]), &RequestMatch::default(), scratch, &mut out)
        .expect("fits");
    String::from_utf8(out[..n].to_vec()).expect("utf8")
}

/// Envoy's `regex_rewrite` examples and RE2 `GlobalReplace` behaviour.
#[test]
fn regex_rewrites_replace_every_match() {
    let mut s = HttpScratch::new();
    assert_eq!(
        regex_rewrite(
            "^/service/([^/]+)(/.*)$",
            r"\2/instance/\1",
            "/service/foo/v1/api",
            &mut s
        ),
        "/v1/api/instance/foo"
    );
    assert_eq!(
        regex_rewrite("one", "two", "/xxx/one/yyy/one/zzz", &mut s),
        "/xxx/two/yyy/two/zzz"
    );
    assert_eq!(regex_rewrite("/b/(.)", "/$1$1/", "/b/c", &mut s), "/cc/");
    assert_eq!(regex_rewrite("x*", "-", "/ab", &mut s), "-/-a-b-");
    assert_eq!(regex_rewrite("nomatch", "z", "/ab", &mut s), "/ab");
    assert_eq!(regex_rewrite("(a)|(b)", r"[\2]", "/ab", &mut s), "/[][b]");
    assert_eq!(regex_rewrite("a", r"\\", "/a", &mut s), r"/\");
}

#[test]
fn scratch_is_reused_and_reset_between_expressions() {
    let mut s = HttpScratch::new();
    let a = RewriteRegex::new("a(b)").expect("a");
    let b = RewriteRegex::new("(c)d").expect("b");
    for _ in 0..3 {
        for (re, p, want) in [(&a, "/abab", "/bb"), (&b, "/cdx", "/cx")] {
            let rw = Rewrite {
                path: Some(PathRewrite::Regex {
                    regex: re.clone(),
                    replacement: r"\1".into(),
                }),
                authority: None,
            };
            let mut out = [0u8; 32];
            let n = rw
                .write_path(&req(p, &[]), &RequestMatch::default(), &mut s, &mut out)
                .expect("fits");
            assert_eq!(&out[..n], want.as_bytes());
        }
    }
    // No rewrite: the request's path.
    let mut out = [0u8; 32];
    let n = Rewrite::default()
        .write_path(
            &req("/same?q", &[]),
            &RequestMatch::default(),
            &mut s,
            &mut out,
        )
        .expect("fits");
    assert_eq!(&out[..n], b"/same");
}

#[test]
fn find_takes_the_first_match_that_holds() {
    let rule = |name: &str| HttpRule {
        name: name.into(),
        counter: 0,
        action: HttpAction::Direct {
            status: 200,
            body: Box::new([]),
        },
        rewrite: Rewrite::default(),
        request_headers: HeaderOps::default(),
        response_headers: Default::default(),
        timeout_ms: 0,
        retries: Retries::default(),
        mirrors: Box::new([]),
    };
    let routes = HttpRoutes {
        rules: Box::new([rule("a"), rule("b")]),
        matches: Box::new([
            (path(StrMatch::Exact("/x".into())), 1),
            (path(StrMatch::PathPrefix("".into())), 0),
            (path(StrMatch::Exact("/never".into())), 7),
        ]),
    };
    let name = |p| routes.find(&req(p, &[])).map(|(_, r)| &*r.name);
    assert_eq!(name("/x"), Some("b"));
    assert_eq!(name("/y"), Some("a"));
    assert!(HttpRoutes::default().find(&req("/", &[])).is_none());
}
