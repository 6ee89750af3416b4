//! Host-name pattern semantics, as pure functions for the compiler (and the reference
//! the dataplane's compiled matcher, `sluice_dataplane::tables::hosts`, is tested
//! against here).
//!
//! A *pattern* is an exact name (`a.example.com`), a wildcard (`*.example.com`) or the
//! catch-all `*`. Three rule sets meet here:
//!
//! - **Matching a name** ([`pattern_matches`], DESIGN §6, Gateway API, Envoy):
//!   `*.example.com` matches `a.example.com` and `a.b.example.com` — any name with at least
//!   one more label — and never `example.com`; `*` matches every name; comparison ignores
//!   ASCII case.
//! - **Gateway API intersection** ([`intersect`], [`narrow_route_hostnames`]): a route
//!   attaches to a listener only if one of its hostnames intersects the listener's
//!   hostname, and is narrowed to the intersection (the more specific of the two).
//! - **Istio** ([`istio_matches`], [`istio_subset_of`]): `host.Name.Matches` and
//!   `host.Name.SubsetOf` of `istio/pkg/config/host`, restated exactly — including
//!   their plain suffix test on the text after `*`, so `*` matches everything and
//!   `*.com` covers `*.foo.com`.
//!
//! All comparisons ignore ASCII case (Kubernetes validation makes these names lowercase;
//! ignoring case keeps the functions total on any input). Nothing here allocates except
//! [`narrow_route_hostnames`]' result.

/// Whether `pattern` starts with the wildcard `*` (`*` alone or `*.suffix`).
pub fn is_wildcard(pattern: &str) -> bool {
    pattern.starts_with('*')
}

fn ends_with_ignore_case(s: &[u8], suffix: &[u8]) -> bool {
    s.len() >= suffix.len() && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// Whether `name` (a concrete host name, no wildcard) is matched by `pattern`: `*`
/// matches every name; `*.s` matches exactly the names `p.s` with `p` non-empty; any other
/// pattern matches the name equal to it. ASCII case is ignored.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    match p {
        b"*" => true,
        [b'*', b'.', suffix @ ..] => {
            n.len() > suffix.len() + 1 && ends_with_ignore_case(n, &p[1..])
        }
        _ => p.eq_ignore_ascii_case(n),
    }
}

/// The Gateway API hostname intersection of a listener's and a route's hostname: the more
/// specific of the two when one covers the other, `None` when they are disjoint.
///
/// - exact vs exact: equal (ignoring case), or disjoint;
/// - wildcard vs exact: the exact name, if the wildcard matches it
///   (`*.example.com` ∩ `foo.example.com` = `foo.example.com`; `*.example.com` ∩
///   `example.com` = none);
/// - wildcard vs wildcard: the longer one, if its suffix lies under the other's
///   (`*.example.com` ∩ `*.foo.example.com` = `*.foo.example.com`; `*.com` ∩
///   `*.example.com` = `*.example.com`);
/// - `*` (not valid in Gateway API hostnames, accepted for robustness) intersects
///   everything as the other side.
///
/// The function is symmetric up to which input is returned for equal names (the first).
pub fn intersect<'a>(listener: &'a str, route: &'a str) -> Option<&'a str> {
    match (is_wildcard(listener), is_wildcard(route)) {
        (false, false) => listener.eq_ignore_ascii_case(route).then_some(listener),
        (true, false) => pattern_matches(listener, route).then_some(route),
        (false, true) => pattern_matches(route, listener).then_some(listener),
        (true, true) => {
            // Both wildcards: "*.a" covers "*.b" when b is a or under a.
            if wildcard_covers(listener, route) {
                Some(route)
            } else if wildcard_covers(route, listener) {
                Some(listener)
            } else {
                None
            }
        }
    }
}

/// Whether wildcard `outer` matches every name that wildcard `inner` matches.
fn wildcard_covers(outer: &str, inner: &str) -> bool {
    match (outer.as_bytes(), inner.as_bytes()) {
        (b"*", _) => true,
        (_, b"*") => false,
        ([b'*', b'.', o @ ..], [b'*', b'.', i @ ..]) => {
            i.eq_ignore_ascii_case(o)
                || (i.len() > o.len() + 1 && ends_with_ignore_case(i, &outer.as_bytes()[1..]))
        }
        _ => false,
    }
}

/// The Gateway API listener/route hostname rule (`hostnames` of HTTPRoute, TLSRoute,
/// GRPCRoute): which hostnames a route serves on a listener.
///
/// - no listener hostname, no route hostnames: `Some(vec![])`, meaning every name;
/// - no listener hostname: the route's hostnames;
/// - no route hostnames: the listener's hostname;
/// - both: the intersections ([`intersect`]) of the listener's hostname with each route
///   hostname, in the route's order, duplicates removed; `None` if there is none — the
///   route does not attach to this listener (status reason `NoMatchingListenerHostname`).
pub fn narrow_route_hostnames<'a>(
    listener: Option<&'a str>,
    route: &[&'a str],
) -> Option<Vec<&'a str>> {
    let Some(listener) = listener else {
        return Some(route.to_vec());
    };
    if route.is_empty() {
        return Some(vec![listener]);
    }
    let mut out: Vec<&'a str> = Vec::new();
    for r in route {
        if let Some(i) = intersect(listener, r) {
            if !out.iter().any(|o| o.eq_ignore_ascii_case(i)) {
                out.push(i);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Istio's `host.Name(a).Matches(b)`: whether the two (possibly wildcarded) names overlap.
///
/// A wildcard is a name starting with `*`; its "suffix" is everything after the `*`.
/// Two wildcards overlap when the longer suffix ends with the shorter; a wildcard and a
/// name overlap when the name ends with the suffix; two names overlap when equal.
pub fn istio_matches(a: &str, b: &str) -> bool {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match (is_wildcard(a), is_wildcard(b)) {
        (true, true) => {
            if x.len() < y.len() {
                ends_with_ignore_case(&y[1..], &x[1..])
            } else {
                ends_with_ignore_case(&x[1..], &y[1..])
            }
        }
        (true, false) => ends_with_ignore_case(y, &x[1..]),
        (false, true) => ends_with_ignore_case(x, &y[1..]),
        (false, false) => x.eq_ignore_ascii_case(y),
    }
}

/// Istio's `host.Name(a).SubsetOf(b)`: whether every name `a` covers is covered by `b`
/// (the one-directional version of [`istio_matches`]).
pub fn istio_subset_of(a: &str, b: &str) -> bool {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match (is_wildcard(a), is_wildcard(b)) {
        (true, true) => x.len() >= y.len() && ends_with_ignore_case(&x[1..], &y[1..]),
        (true, false) => false,
        (false, true) => ends_with_ignore_case(x, &y[1..]),
        (false, false) => x.eq_ignore_ascii_case(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_dataplane::tables::hosts::{HostMatcher, HostPattern};

    #[test]
    fn pattern_matching_rule() {
        let cases = [
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "a.b.example.com", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", false),
            ("*.example.com", "aexample.com", false),
            ("*.Example.COM", "A.example.com", true),
            ("*", "anything.at.all", true),
            ("*", "", true),
            ("a.example.com", "A.Example.Com", true),
            ("a.example.com", "b.example.com", false),
            ("example.com", "a.example.com", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(pattern_matches(p, n), want, "{p} vs {n}");
        }
    }

    /// Gateway API TLSRoute/HTTPRoute hostname intersection, as the spec's `hostnames`
    /// documentation and the `TLSRouteHostnameIntersection` conformance test state it.
    #[test]
    fn gateway_api_intersection() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            // Listener test.example.com: routes test.example.com and *.example.com attach.
            (
                "test.example.com",
                "test.example.com",
                Some("test.example.com"),
            ),
            (
                "test.example.com",
                "*.example.com",
                Some("test.example.com"),
            ),
            ("test.example.com", "example.com", None),
            ("test.example.com", "*.test.example.com", None),
            // Listener *.example.com: test.example.com, foo.test.example.com and
            // *.example.com attach; example.com and test.example.net do not.
            (
                "*.example.com",
                "test.example.com",
                Some("test.example.com"),
            ),
            (
                "*.example.com",
                "foo.test.example.com",
                Some("foo.test.example.com"),
            ),
            ("*.example.com", "*.example.com", Some("*.example.com")),
            ("*.example.com", "example.com", None),
            ("*.example.com", "test.example.net", None),
            // Wildcard against wildcard: the more specific one.
            (
                "*.example.com",
                "*.foo.example.com",
                Some("*.foo.example.com"),
            ),
            (
                "*.foo.example.com",
                "*.example.com",
                Some("*.foo.example.com"),
            ),
            ("*.example.com", "*.com", Some("*.example.com")),
            ("*.com", "*.example.com", Some("*.example.com")),
            ("*.example.com", "*.example.net", None),
            ("*.example.com", "*.xexample.com", None),
            // Conformance (TLSRouteHostnameIntersection):
            // x-1: listener abc.example.com, route *.example.com.
            ("abc.example.com", "*.example.com", Some("abc.example.com")),
            // x-2: listener *.example.com, routes abc.example.com and *.com.
            ("*.example.com", "abc.example.com", Some("abc.example.com")),
            // x-3: listener *.com, routes abc.example.com and *.example.com.
            ("*.com", "abc.example.com", Some("abc.example.com")),
            // non-matching SNIs of the conformance test never fall in these.
            ("abc.example.com", "non.matching.com", None),
            // Case is ignored; the input's spelling is returned.
            ("*.Example.com", "ABC.example.COM", Some("ABC.example.COM")),
            // `*` (Istio-style catch-all) gives the other side.
            ("*", "*.example.com", Some("*.example.com")),
            ("*.example.com", "*", Some("*.example.com")),
            ("*", "a.b", Some("a.b")),
        ];
        for &(l, r, want) in cases {
            assert_eq!(intersect(l, r), want, "listener {l} route {r}");
            // Symmetric (same result up to which spelling of equal names is returned).
            assert_eq!(
                intersect(r, l).map(str::to_ascii_lowercase),
                want.map(str::to_ascii_lowercase),
                "route {r} listener {l}"
            );
        }
    }

    #[test]
    fn gateway_api_route_narrowing() {
        // The conformance test's four gateways, each with its routes (routes' hostnames,
        // expected narrowing; None = not attached).
        assert_eq!(
            narrow_route_hostnames(Some("abc.example.com"), &["*.example.com"]),
            Some(vec!["abc.example.com"])
        );
        assert_eq!(
            narrow_route_hostnames(Some("*.example.com"), &["abc.example.com"]),
            Some(vec!["abc.example.com"])
        );
        assert_eq!(
            narrow_route_hostnames(Some("*.example.com"), &["*.com"]),
            Some(vec!["*.example.com"])
        );
        assert_eq!(
            narrow_route_hostnames(Some("*.com"), &["*.example.com"]),
            Some(vec!["*.example.com"])
        );
        assert_eq!(
            narrow_route_hostnames(None, &["*.com"]),
            Some(vec!["*.com"])
        );
        assert_eq!(
            narrow_route_hostnames(None, &["abc.example.com"]),
            Some(vec!["abc.example.com"])
        );
        // Spec examples: route names that do not match the listener are ignored; none at
        // all means the route is not accepted.
        assert_eq!(
            narrow_route_hostnames(
                Some("*.example.com"),
                &["test.example.com", "test.example.net"]
            ),
            Some(vec!["test.example.com"])
        );
        assert_eq!(
            narrow_route_hostnames(Some("*.example.com"), &["example.com", "test.example.net"]),
            None
        );
        // No hostnames on the route: it gets the listener's; neither side: every name.
        assert_eq!(
            narrow_route_hostnames(Some("a.example"), &[]),
            Some(vec!["a.example"])
        );
        assert_eq!(narrow_route_hostnames(None, &[]), Some(vec![]));
        // Duplicates after narrowing are removed.
        assert_eq!(
            narrow_route_hostnames(
                Some("a.example.com"),
                &["*.example.com", "*.com", "A.example.com"]
            ),
            Some(vec!["a.example.com"])
        );
    }

    /// Istio's `TestNameMatches` table (pkg/config/host/name_test.go), restated.
    #[test]
    fn istio_matches_truth_table() {
        let cases = [
            ("", "", true),
            ("", "foo.com", false),
            ("foo.com", "", false),
            ("foo.com", "foo.com", true),
            ("bar.com", "foo.com", false),
            ("foo.com", "bar.com", false),
            ("bar.foo.com", "foo.com", false),
            ("foo.com", "bar.foo.com", false),
            ("*.com", "foo.com", true),
            ("foo.com", "*.com", true),
            ("*.foo.com", "bar.foo.com", true),
            ("*", "foo.com", true),
            ("*", "*.com", true),
            ("*", "com", true),
            ("*", "*", true),
            ("*", "", true),
            ("*.com", "*.foo.com", true),
            ("foo.com", "*.foo.com", false),
            ("*.foo.com", "foo.com", false),
            ("*.foo.bar.baz", "baz", false),
            ("baz", "*.foo.bar.baz", false),
            ("*.foo.bar.baz", "*.baz", true),
            ("foo.bar.baz", "*.baz", true),
        ];
        for (a, b, want) in cases {
            assert_eq!(istio_matches(a, b), want, "{a:?}.Matches({b:?})");
            assert_eq!(
                istio_matches(b, a),
                want,
                "Matches is symmetric: {b:?}, {a:?}"
            );
        }
    }

    /// Istio's `TestNameSubsetOf` table, restated.
    #[test]
    fn istio_subset_of_truth_table() {
        let cases = [
            ("", "", true),
            ("", "foo.com", false),
            ("foo.com", "", false),
            ("foo.com", "foo.com", true),
            ("bar.com", "foo.com", false),
            ("foo.com", "bar.com", false),
            ("bar.foo.com", "foo.com", false),
            ("foo.com", "bar.foo.com", false),
            ("foo.com", "*.com", true),
            ("bar.com", "*.com", true),
            ("bar.foo.com", "*.foo.com", true),
            ("foo.com", "*", true),
            ("*.com", "*", true),
            ("com", "*", true),
            ("*", "*", true),
            ("", "*", true),
            ("*.foo.com", "*.com", true),
            ("*.foo.com", "foo.com", false),
            ("*.foo.bar.baz", "baz", false),
            ("foo.bar.baz", "*.baz", true),
            // Not in Istio's table, implied by the definition: the reverse directions.
            ("*.com", "foo.com", false),
            ("*.com", "*.foo.com", false),
            ("*", "*.com", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(istio_subset_of(a, b), want, "{a:?}.SubsetOf({b:?})");
        }
    }

    #[test]
    fn subset_implies_matches_and_intersection() {
        let names = [
            "*",
            "*.com",
            "*.example.com",
            "*.a.example.com",
            "example.com",
            "a.example.com",
            "b.a.example.com",
            "x.org",
            "*.org",
        ];
        for a in names {
            for b in names {
                if istio_subset_of(a, b) {
                    assert!(istio_matches(a, b), "{a} subset of {b} but no match");
                    // For well-formed names, Gateway API intersection agrees: a ⊆ b gives a.
                    assert_eq!(intersect(b, a), Some(a), "{a} ⊆ {b}");
                }
                assert_eq!(
                    intersect(a, b).is_some(),
                    istio_matches(a, b),
                    "overlap of {a} and {b}"
                );
            }
        }
    }

    /// The Gateway API `TLSRouteHostnameIntersection` conformance scenarios, end to end:
    /// routes narrowed to the listener's hostname, compiled, and SNIs routed.
    #[test]
    fn tlsroute_hostname_intersection_routing() {
        // (listener hostname, [(route hostnames, backend)], [(sni, expected backend)])
        type Scenario<'a> = (
            Option<&'a str>,
            Vec<(&'a [&'a str], &'a str)>,
            Vec<(&'a str, Option<&'a str>)>,
        );
        let scenarios: Vec<Scenario<'_>> = vec![
            (
                Some("abc.example.com"),
                vec![(&["*.example.com"], "tls-backend")],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("non.matching.com", None),
                ],
            ),
            (
                Some("*.example.com"),
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.com", None),
                ],
            ),
            (
                Some("*.com"),
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.example.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.com", None),
                ],
            ),
            (
                None,
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.org", None),
                ],
            ),
        ];
        for (listener, routes, checks) in scenarios {
            // Values are positions in `routes`.
            let mut patterns = Vec::new();
            for (r, (hostnames, _)) in (0..).zip(&routes) {
                let narrowed = narrow_route_hostnames(listener, hostnames).expect("attached");
                for h in narrowed {
                    patterns.push((HostPattern::parse(h).unwrap(), r));
                }
            }
            let m = HostMatcher::build(patterns).unwrap();
            for (sni, want) in checks {
                assert_eq!(
                    m.lookup(sni.as_bytes()).map(|r| routes[r as usize].1),
                    want,
                    "listener {listener:?}, SNI {sni}"
                );
            }
        }
    }

    proptest! {
        /// The compiled matcher agrees with [`pattern_matches`]: of the patterns that
        /// match a name, it picks one, and picks none when none matches.
        #[test]
        fn compiled_matcher_agrees_with_pattern_matches(
            patterns in proptest::collection::vec("(\\*|\\*\\.)?[ab](\\.[ab]){0,3}", 1..8),
            name in "[ab](\\.[ab]){0,4}",
        ) {
            let mut uniq = patterns.clone();
            uniq.sort();
            uniq.dedup();
            let parsed: Vec<_> = uniq
                .iter()
                .zip(0u32..)
                .filter_map(|(p, i)| HostPattern::parse(p).ok().map(|h| (h, i)))
                .collect();
            prop_assume!(!parsed.is_empty());
            let m = HostMatcher::build(parsed.clone()).unwrap();
            let any = parsed.iter().any(|(_, i)| pattern_matches(&uniq[*i as usize], &name));
            match m.lookup(name.as_bytes()) {
                Some(i) => prop_assert!(pattern_matches(&uniq[i as usize], &name), "picked {} for {}", uniq[i as usize], name),
                None => prop_assert!(!any, "no pick for {} though a pattern matches", name),
            }
        }
    }
}
