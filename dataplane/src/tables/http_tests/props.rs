//! [`HttpRoutes::find`] against a reference evaluator written straight from the rules
//! (a linear scan, strings compared the slow, obvious way) on random routes and
//! requests drawn from small alphabets so that matches happen.

use super::super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Cond {
    Exact(String),
    Prefix(String),
    Segments(String),
    Regex(String),
    Present,
}

#[derive(Debug, Clone)]
struct SpecMatch {
    path: Option<Cond>,
    fold: bool,
    method: Option<String>,
    header: Option<(String, Cond, bool)>,
    query: Option<(String, Cond)>,
    port: Option<u16>,
}

#[derive(Debug, Clone)]
struct SpecReq {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    port: u16,
}

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "", "a", "b", "A", "ab", "a/b", "/a", "/a/", "/ab", "/A/b",
    ])
    .prop_map(String::from)
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        word().prop_map(Cond::Exact),
        word().prop_map(Cond::Prefix),
        prop::sample::select(vec!["", "/a", "/ab", "/A"]).prop_map(|s| Cond::Segments(s.into())),
        prop::sample::select(vec!["a*", "/a.*", "[ab]+", "/(a|b)/?b?"])
            .prop_map(|s| Cond::Regex(s.into())),
        Just(Cond::Present),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["x", "X", "y"]).prop_map(String::from)
}

fn spec_match() -> impl Strategy<Value = SpecMatch> {
    (
        prop::option::of(cond()),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["GET", "POST"]).prop_map(String::from)),
        prop::option::of((name(), cond(), any::<bool>())),
        prop::option::of((name(), cond())),
        prop::option::of(prop::sample::select(vec![80u16, 8080])),
    )
        .prop_map(|(path, fold, method, header, query, port)| SpecMatch {
            path,
            fold,
            method,
            header,
            query,
            port,
        })
}

fn spec_req() -> impl Strategy<Value = SpecReq> {
    (
        prop::sample::select(vec!["GET", "POST", "get"]).prop_map(String::from),
        prop::sample::select(vec!["/", "/a", "/a/", "/ab", "/a/b", "/A/b", "/b", "/aaa"])
            .prop_map(String::from),
        prop::collection::vec((name(), word()), 0..3),
        prop::collection::vec((name(), word()), 0..3),
        prop::sample::select(vec![80u16, 8080]),
    )
        .prop_map(|(method, path, query, headers, port)| SpecReq {
            method,
            path,
            query,
            headers,
            port,
        })
}

fn compile_cond(c: &Cond) -> StrMatch {
    match c {
        Cond::Exact(s) => StrMatch::Exact(s.as_str().into()),
        Cond::Prefix(s) => StrMatch::Prefix(s.as_str().into()),
        Cond::Segments(s) => StrMatch::PathPrefix(s.as_str().into()),
        Cond::Regex(s) => StrMatch::Regex(Box::new(Regex::new(s).expect("regex"))),
        Cond::Present => StrMatch::Present,
    }
}

fn compile(m: &SpecMatch) -> RequestMatch {
    RequestMatch {
        path: m.path.as_ref().map(compile_cond),
        ignore_case: m.fold,
        method: m.method.as_deref().map(Into::into),
        headers: m
            .header
            .iter()
            .map(|(n, c, inv)| HeaderMatch {
                name: n.to_lowercase().into(),
                value: compile_cond(c),
                invert: *inv,
            })
            .collect(),
        query: m
            .query
            .iter()
            .map(|(n, c)| QueryMatch {
                name: n.as_str().into(),
                value: compile_cond(c),
            })
            .collect(),
        port: m.port,
        ..RequestMatch::default()
    }
}

/// The reference: each condition read straight from the spec.
fn ref_cond(c: &Cond, v: &str, fold: bool) -> bool {
    let fold_s = |s: &str| {
        if fold {
            s.to_lowercase()
        } else {
            s.to_string()
        }
    };
    let v = fold_s(v);
    match c {
        Cond::Exact(s) => v == fold_s(s),
        Cond::Prefix(s) => v.starts_with(&fold_s(s)),
        Cond::Segments(s) => {
            let s = fold_s(s);
            v == s || v.starts_with(&format!("{s}/"))
        }
        Cond::Regex(s) => {
            // Full match: the expression accepts the value as a whole.
            // (a Pike VM, not the DFA under test).
            let vm = regex_automata::nfa::thompson::pikevm::PikeVM::new(&format!("^(?:{s})$"))
                .expect("regex");
            vm.is_match(&mut vm.create_cache(), v.as_str())
        }
        Cond::Present => true,
    }
}

fn ref_holds(m: &SpecMatch, r: &SpecReq) -> bool {
    if let Some(c) = &m.path {
        let fold = m.fold && !matches!(c, Cond::Regex(_));
        if !ref_cond(c, &r.path, fold) {
            return false;
        }
    }
    if m.method.as_ref().is_some_and(|x| *x != r.method) || m.port.is_some_and(|p| p != r.port) {
        return false;
    }
    if let Some((n, c, inv)) = &m.header {
        let first = r
            .headers
            .iter()
            .find(|(h, _)| h.to_lowercase() == n.to_lowercase());
        let ok = first.is_some_and(|(_, v)| ref_cond(c, v, false));
        if ok == *inv {
            return false;
        }
    }
    if let Some((n, c)) = &m.query {
        let first = r.query.iter().find(|(q, _)| q == n);
        if !first.is_some_and(|(_, v)| ref_cond(c, v, false)) {
            return false;
        }
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn find_agrees_with_the_reference(
        matches in prop::collection::vec((spec_match(), 0u32..4), 0..6),
        r in spec_req(),
    ) {
        let rules: Vec<HttpRule> = (0..4)
            .map(|i| HttpRule {
                name: format!("r{i}").into(),
                counter: 0,
                action: HttpAction::Direct { status: 200, body: Box::new([]) },
                rewrite: Rewrite::default(),
                request_headers: HeaderOps::default(),
                response_headers: Default::default(),
                timeout_ms: 0,
                retries: Retries::default(),
                mirrors: Box::new([]),
            })
            .collect();
        let routes = HttpRoutes {
            rules: rules.into_boxed_slice(),
            matches: matches.iter().map(|(m, i)| (compile(m), *i)).collect(),
        };
        let query: String = r
            .query
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let headers: Vec<Header> = r
            .headers
            .iter()
            .map(|(n, v)| Header { name: n, value: v.as_bytes() })
            .collect();
        let req = Request {
            method: &r.method,
            scheme: "http",
            authority: "h",
            path: &r.path,
            query: &query,
            headers: &headers,
            port: r.port,
            source: "10.0.0.1".parse().expect("ip"),
        };
        let got = routes.find(&req).map(|(_, rule)| rule.name.to_string());
        let want = matches
            .iter()
            .find(|(m, _)| ref_holds(m, &r))
            .map(|(_, i)| format!("r{i}"));
        prop_assert_eq!(got, want);
    }
}
