//! Tests of the host matcher: precedence, edge names, build errors, the Gateway API
//! hostname scenarios, and property tests against a plain reference.

use super::hash::{eq_folded, hash_key, hash_name, lower8, word};
use super::layout::{lanes, GROUP, INLINE, PREFIX};
use super::*;
use proptest::prelude::*;

fn matcher(patterns: &[&str]) -> HostMatcher {
    HostMatcher::from_strs(patterns.iter().copied().zip(0..)).unwrap()
}

/// The index of the pattern a name selects, via the matcher.
fn pick(m: &HostMatcher, name: &str) -> Option<u32> {
    m.lookup(name.as_bytes())
}

#[test]
fn precedence_exact_then_longest_wildcard_then_catch_all() {
    let m = matcher(&[
        "*",
        "*.com",
        "*.example.com",
        "www.example.com",
        "*.b.example.com",
    ]);
    assert_eq!(pick(&m, "www.example.com"), Some(3));
    assert_eq!(pick(&m, "WWW.Example.COM"), Some(3), "case is ignored");
    assert_eq!(pick(&m, "a.example.com"), Some(2));
    assert_eq!(pick(&m, "a.b.example.com"), Some(4));
    assert_eq!(pick(&m, "x.a.b.example.com"), Some(4));
    assert_eq!(
        pick(&m, "b.example.com"),
        Some(2),
        "*.b.example.com needs one more label"
    );
    assert_eq!(
        pick(&m, "example.com"),
        Some(1),
        "*.example.com never matches example.com"
    );
    assert_eq!(pick(&m, "com"), Some(0));
    assert_eq!(pick(&m, "example.org"), Some(0));
    assert_eq!(pick(&m, ""), Some(0));
    let found = m.find(b"q.b.example.com").unwrap();
    assert_eq!(found.kind, MatchKind::Wildcard { suffix_len: 13 });
    assert_eq!(found.value, 4);
    assert_eq!(m.find(b"www.example.com").unwrap().kind, MatchKind::Exact);
    assert_eq!(m.find(b"zzz").unwrap().kind, MatchKind::Any);
    assert_eq!(m.len(), 5);
}

#[test]
fn without_catch_all_nothing_else_matches() {
    let m = matcher(&["a.example.com", "*.example.com"]);
    assert_eq!(pick(&m, "example.com"), None);
    assert_eq!(pick(&m, "a.example.org"), None);
    assert_eq!(
        pick(&m, ".example.com"),
        None,
        "empty first label is not a label"
    );
    assert_eq!(
        pick(&m, "a.example.com."),
        None,
        "callers strip the trailing dot"
    );
    assert_eq!(pick(&m, "a..example.com"), Some(1), "p = 'a.' is non-empty");
    let empty: HostMatcher = HostMatcher::build(Vec::new()).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.lookup(b"a.b"), None);
}

#[test]
fn long_keys_with_equal_prefixes() {
    // Keys longer than INLINE share their first PREFIX bytes; the arena tails decide.
    let head = "abcdefghijklmnop.qrstuvwxyz0123456789-abcdefghij"; // PREFIX bytes
    assert_eq!(head.len(), PREFIX);
    let a = format!("{head}-first.example.com");
    let b = format!("{head}-second.example.com");
    let inline = format!("{}ab.example.o", "abcdefghij".repeat(4)); // exactly INLINE
    let one_more = format!("{inline}r");
    assert_eq!((inline.len(), one_more.len()), (INLINE, INLINE + 1));
    let wild = format!("*.{a}");
    let m = matcher(&[&a, &b, &inline, &one_more, &wild]);
    assert_eq!(pick(&m, &a), Some(0));
    assert_eq!(pick(&m, &b.to_uppercase()), Some(1));
    assert_eq!(pick(&m, &inline), Some(2));
    assert_eq!(pick(&m, &one_more.to_uppercase()), Some(3));
    assert_eq!(pick(&m, &format!("{head}-third.example.com")), None);
    assert_eq!(pick(&m, &format!("{head}-firsT.example.con")), None);
    assert_eq!(pick(&m, &format!("{}Z", &inline[..INLINE - 1])), None);
    assert_eq!(pick(&m, &format!("x.{a}")), Some(4));
}

#[test]
fn exact_and_wildcard_on_the_same_name() {
    let m = matcher(&["foo.example.com", "*.foo.example.com", "*.example.com"]);
    assert_eq!(pick(&m, "foo.example.com"), Some(0));
    assert_eq!(pick(&m, "bar.foo.example.com"), Some(1));
    assert_eq!(pick(&m, "bar.example.com"), Some(2));
}

#[test]
fn long_names_match_only_the_catch_all() {
    let long = format!("{}.example.com", "a.".repeat(125));
    assert!(long.len() > MAX_NAME_LEN);
    let m = matcher(&["*.example.com", "*"]);
    assert_eq!(pick(&m, &long), Some(1));
    let m = matcher(&["*.example.com"]);
    assert_eq!(pick(&m, &long), None);
    // The longest name that fits still matches.
    let fits = format!("{}.example.com", "a".repeat(MAX_NAME_LEN - 12));
    assert_eq!(fits.len(), MAX_NAME_LEN);
    assert_eq!(pick(&m, &fits), Some(0));
    // 126 labels before the suffix: every dot is a probe point.
    let many = format!("{}example.com", "a.".repeat(121));
    assert!(many.len() <= MAX_NAME_LEN);
    assert_eq!(pick(&m, &many), Some(0));
    // A name of dots only: nothing but a catch-all could match.
    assert_eq!(pick(&m, &".".repeat(253)), None);
    // More dots than the lookup keeps suffix hashes for (slow path): the matchable
    // suffix on the right is still found, and the longest suffix still wins.
    let dotty = format!("{}a.example.com", ".".repeat(200));
    assert_eq!(pick(&m, &dotty), Some(0));
    let m = matcher(&[
        "*.example.com",
        "*.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.example.com",
    ]);
    let deep = "x.y.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.example.com";
    assert_eq!(pick(&m, deep), Some(1));
    assert_eq!(pick(&m, &deep[4..]), Some(0));
}

#[test]
fn build_errors() {
    let dup = HostMatcher::from_strs([("a.com", 0), ("*.a.com", 1), ("A.COM", 2)]);
    assert_eq!(
        dup.unwrap_err(),
        BuildError::Duplicate {
            index: 2,
            pattern: "a.com".into()
        }
    );
    let dup = HostMatcher::from_strs([("*", 0), ("", 1)]);
    assert!(matches!(dup, Err(BuildError::Duplicate { index: 1, .. })));
    // The one value that marks "no pattern" in the table is refused, whatever the kind.
    for p in ["a.com", "*.a.com", "*"] {
        let reserved = HostMatcher::from_strs([("b.com", 0), (p, NONE)]);
        assert_eq!(
            reserved.unwrap_err(),
            BuildError::ReservedValue { index: 1 }
        );
    }
    let max = HostMatcher::from_strs([("a.com", NONE - 1), ("*", 0)]).unwrap();
    assert_eq!(max.lookup(b"A.com"), Some(NONE - 1));
    let cases: &[(&str, PatternError)] = &[
        ("a..com", PatternError::EmptyLabel),
        ("*.", PatternError::EmptyLabel),
        (".a.com", PatternError::EmptyLabel),
        ("a.com.", PatternError::EmptyLabel),
        ("*a.com", PatternError::MisplacedWildcard),
        ("a.*.com", PatternError::MisplacedWildcard),
        ("*.*.com", PatternError::MisplacedWildcard),
        ("a b.com", PatternError::InvalidByte(b' ')),
    ];
    for (p, e) in cases {
        assert_eq!(HostPattern::parse(p), Err(e.clone()), "{p}");
        assert_eq!(
            HostMatcher::from_strs([("ok.com", 0), (p, 1)]).unwrap_err(),
            BuildError::Pattern {
                index: 1,
                error: e.clone()
            }
        );
    }
    assert_eq!(
        HostPattern::parse(&"a".repeat(64)),
        Err(PatternError::LabelTooLong)
    );
    let too_long = ["a"; 128].join(".");
    assert_eq!(HostPattern::parse(&too_long), Err(PatternError::TooLong));
    assert_eq!(
        HostPattern::parse("10.1.2.3"),
        Ok(HostPattern::Exact("10.1.2.3".into()))
    );
    assert_eq!(
        HostPattern::parse("*.A.com").unwrap().to_string(),
        "*.a.com"
    );
}

/// The plain reference: scan every pattern, keep the most specific match.
fn reference(patterns: &[HostPattern], name: &[u8]) -> Option<u32> {
    patterns
        .iter()
        .enumerate()
        .filter(|(_, p)| p.matches(name))
        .max_by_key(|(_, p)| p.specificity())
        .map(|(i, _)| i as u32)
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("com".to_string()),
        Just("example".to_string()),
        Just("x-1".to_string()),
        "[a-c]{1,3}",
        "[a-z0-9]{1,20}",
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..5).prop_map(|l| l.join("."))
}

fn pattern() -> impl Strategy<Value = HostPattern> {
    prop_oneof![
        6 => name().prop_map(HostPattern::Exact),
        6 => name().prop_map(HostPattern::Wildcard),
        1 => Just(HostPattern::Any),
    ]
}

/// Random case, and now and then a stray dot or an over-long name.
fn query() -> impl Strategy<Value = Vec<u8>> {
    (name(), prop::collection::vec(any::<bool>(), 0..40), 0..8u8).prop_map(|(n, upper, odd)| {
        let mut b: Vec<u8> = n.into_bytes();
        for (c, u) in b.iter_mut().zip(upper) {
            if u {
                c.make_ascii_uppercase();
            }
        }
        match odd {
            0 => b.insert(0, b'.'),
            1 => b.push(b'.'),
            2 => {
                let at = b.len() / 2;
                b.insert(at, b'.');
            }
            3 => {
                let mut long = b"q.".repeat(130);
                long.extend_from_slice(&b);
                b = long;
            }
            _ => {}
        }
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_reference(
        patterns in prop::collection::vec(pattern(), 0..40),
        queries in prop::collection::vec(query(), 1..30),
    ) {
        // Duplicates are a build error; keep the first of each.
        let mut unique: Vec<HostPattern> = Vec::new();
        for p in patterns {
            if !unique.contains(&p) {
                unique.push(p);
            }
        }
        let m = HostMatcher::build(unique.iter().cloned().zip(0..)).unwrap();
        // As many slots as keys: full groups spill into the next ones.
        let dense =
            HostMatcher::build_sized(unique.iter().cloned().zip(0..), |keys| keys).unwrap();
        // Ask for every pattern's own name too, and names one label below.
        let mut asked: Vec<Vec<u8>> = queries;
        for p in &unique {
            if let HostPattern::Exact(n) | HostPattern::Wildcard(n) = p {
                asked.push(n.clone().into_bytes());
                asked.push(format!("Z.{n}").into_bytes());
            }
        }
        for q in &asked {
            let want = reference(&unique, q);
            prop_assert_eq!(m.lookup(q), want, "query {:?}", String::from_utf8_lossy(q));
            prop_assert_eq!(dense.lookup(q), want, "dense, query {:?}", String::from_utf8_lossy(q));
        }
    }

    /// Single lookups answer what the plain reference does on mixed and odd queries
    /// (malformed, over-long, more label boundaries than the fast path keeps), and
    /// `find` agrees with `lookup`, whether the table prefetches candidates' slots or
    /// not.
    #[test]
    fn lookups_agree_with_the_reference_on_odd_queries(
        patterns in prop::collection::vec(pattern(), 0..40),
        queries in prop::collection::vec(
            prop_oneof![3 => query(), 1 => odd_query()],
            0..71,
        ),
    ) {
        let mut unique: Vec<HostPattern> = Vec::new();
        for p in patterns {
            if !unique.contains(&p) {
                unique.push(p);
            }
        }
        let mut m = HostMatcher::build(unique.iter().cloned().zip(0..)).unwrap();
        let mut asked: Vec<Vec<u8>> = queries;
        for p in unique.iter().take(8) {
            if let HostPattern::Exact(n) | HostPattern::Wildcard(n) = p {
                asked.push(n.to_uppercase().into_bytes());
                asked.push(format!("z.Q.{n}").into_bytes());
            }
        }
        for prefetch in [false, true] {
            m.prefetch = prefetch;
            for q in &asked {
                let shown = String::from_utf8_lossy(q);
                let want = reference(&unique, q);
                prop_assert_eq!(m.lookup(q), want, "query {:?}", shown);
                prop_assert_eq!(m.find(q).map(|f| f.value), want, "query {:?}", shown);
            }
        }
    }

    /// The word-at-a-time lowercase and comparison agree with the byte-wise ones on
    /// any bytes.
    #[test]
    fn folding_agrees_with_bytewise(
        a in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            prop::collection::vec(prop_oneof![Just(b'.'), Just(b'A'), Just(b'z')], 0..40),
        ]
    ) {
        let lowered = a.to_ascii_lowercase();
        for chunk in a.chunks(8) {
            prop_assert_eq!(lower8(word(chunk)), word(&chunk.to_ascii_lowercase()));
        }
        prop_assert!(eq_folded(&a, &lowered));
        prop_assert_eq!(hash_key(7, &a), hash_key(7, &lowered));
        // Every suffix hash of the one pass is the hash of that suffix alone.
        let mut starts = Vec::new();
        let full = hash_name(7, &a, |start, h| {
            starts.push(start);
            assert_eq!(h, hash_key(7, &a[start..]), "{a:?} from {start}");
        });
        prop_assert_eq!(full, hash_key(7, &a));
        let dots: Vec<usize> = (1..a.len()).rev().filter(|&i| a[i] == b'.').map(|i| i + 1).collect();
        prop_assert_eq!(starts, dots);
        let mut other = lowered.clone();
        if let Some(b) = other.last_mut() {
            *b = b.wrapping_add(1);
            prop_assert!(!eq_folded(&a, &other));
        }
        prop_assert!(!eq_folded(&a, &lowered[..lowered.len().saturating_sub(1)]) || a.is_empty());
    }
}

/// Malformed and unusual names: empty, dots only, over-long, more label boundaries
/// than the fast path keeps hashes for, non-ASCII bytes next to the letters, bytes
/// that only look like letters with their high bit set.
fn odd_query() -> impl Strategy<Value = Vec<u8>> {
    let tail = || name().prop_map(String::into_bytes);
    prop_oneof![
        Just(Vec::new()),
        Just(b".".to_vec()),
        (1..300usize).prop_map(|n| b".".repeat(n)),
        (17..40usize, tail()).prop_map(|(n, t)| [b"a.".repeat(n), t].concat()),
        (10..30usize, tail()).prop_map(|(n, t)| [b".".repeat(n), t].concat()),
        (prop::collection::vec(any::<u8>(), 1..6), tail()).prop_map(|(junk, t)| [
            junk,
            b".".to_vec(),
            t
        ]
        .concat()),
        tail().prop_map(|t| t.iter().map(|&b| b | 0x80).collect()),
        tail().prop_map(|t| t
            .iter()
            .map(|&b| if b == b'a' { b'@' } else { b })
            .collect()),
        prop::collection::vec(any::<u8>(), 0..260),
    ]
}

/// The fingerprint compare finds exactly the equal lanes, wherever they are.
#[test]
fn fingerprint_lanes() {
    let mut p = Prints([0; GROUP]);
    assert_eq!(lanes(&p, 1), 0);
    assert_eq!(lanes(&p, 0), u32::MAX);
    for (i, l) in p.0.iter_mut().enumerate() {
        *l = [7u16, 0x8007, 0xffff, 7][i % 4].wrapping_add((i / 4) as u16 * 0x100);
    }
    for fp in [7u16, 0x8007, 0xffff, 0x107, 0x7f07, 1] {
        let plain =
            p.0.iter()
                .enumerate()
                .fold(0, |m, (i, &l)| m | (u32::from(l == fp) << i));
        assert_eq!(lanes(&p, fp), plain, "{fp:#x}");
    }
    p.0[31] = 0x4242;
    assert_eq!(lanes(&p, 0x4242), 1 << 31);
}

/// Names a lookup must answer with nothing but the catch-all or an exact rule
/// (empty, over-long, a suffix that is not a name), on a table without a catch-all.
#[test]
fn edge_names_answer_as_the_rule_says() {
    let other = matcher(&["b.three.test", "*.four.test"]);
    let long = vec![b'a'; MAX_NAME_LEN + 1];
    let names: [&[u8]; 7] = [
        b"",
        &long,
        b"a.one.test",
        b"b.three.test",
        b"z.four.test",
        b"x1.one.test",
        b"four.test",
    ];
    let want: Vec<Option<u32>> = names.iter().map(|n| other.lookup(n)).collect();
    assert_eq!(want, [None, None, None, Some(0), Some(1), None, None]);
}

/// A table with as many slots as keys: most groups are full and spill into the next
/// ones (the build's usual load has this happen in about one group in 200),
/// and every lookup still answers what the reference does.
#[test]
fn full_groups_spill_into_the_next() {
    let mut patterns: Vec<HostPattern> = (0..1000)
        .map(|i| match i % 4 {
            0 => HostPattern::Wildcard(format!("w{i}.example.com")),
            _ => HostPattern::Exact(format!("h{i}.example.com")),
        })
        .collect();
    patterns.push(HostPattern::Wildcard("example.com".to_string()));
    let m = HostMatcher::build_sized(patterns.iter().cloned().zip(0..), |keys| keys).unwrap();
    assert_eq!(m.slots.len(), 1024);
    let spilled: u32 = m.spilled.iter().map(|w| w.count_ones()).sum();
    assert!(spilled >= 16, "{spilled} of 32 groups spilled");
    let mut asked = Vec::new();
    for i in 0..1100 {
        asked.push(format!("h{i}.example.com"));
        asked.push(format!("x.w{i}.EXAMPLE.com"));
        asked.push(format!("w{i}.example.com"));
    }
    asked.push("example.com".to_string());
    let names: Vec<&[u8]> = asked.iter().map(|q| q.as_bytes()).collect();
    let mut m = m;
    for prefetch in [false, true] {
        m.prefetch = prefetch;
        for q in &names {
            let want = reference(&patterns, q);
            assert_eq!(m.lookup(q), want, "{}", String::from_utf8_lossy(q));
        }
    }
}

/// A table that outgrows a small L2 is prefetched for; one that fits stays on the
/// one-by-one path (see [`PREFETCH_MIN`]'s measurements).
#[test]
fn tables_past_a_small_l2_are_prefetched_for() {
    let table = |n: u32| {
        HostMatcher::build((0..n).map(|i| {
            (
                HostPattern::Exact(format!("host{i}.team{}.example.com", i % 97)),
                i,
            )
        }))
        .unwrap()
    };
    let (small, big) = (table(2_000), table(10_000));
    assert!(small.table_bytes() < 256 << 10, "{}", small.table_bytes());
    assert!(!small.prefetch);
    assert!(
        big.prefetch,
        "a 10k-name table ({} bytes) is prefetched for",
        big.table_bytes()
    );
}

#[test]
fn huge_page_advice_is_harmless() {
    let t: HostMatcher = HostMatcher::build(
        (0..40_000u32).map(|i| (HostPattern::Exact(format!("h{i}.example.com")), i)),
    )
    .unwrap();
    assert!(t.table_bytes() >= PREFETCH_MIN);
    assert!(t.prefetch, "a big table is prefetched for");
    assert_eq!(t.lookup(b"H39999.example.COM"), Some(39_999));
    let names: [&[u8]; 3] = [
        b"H39999.example.COM",
        b"h40000.example.com",
        b"h7.example.com",
    ];
    assert_eq!(names.map(|n| t.lookup(n)), [Some(39_999), None, Some(7)]);
    assert_eq!(t.lookup(b"h40000.example.com"), None);
    let v = HugeSlice::filled(7u8, 5 << 20);
    assert!(v.iter().all(|&b| b == 7));
}
