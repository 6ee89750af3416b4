//! The contract every first-payload parser keeps, checked on one input: no panic; a
//! verdict given for a prefix is the verdict for the whole; a `NeedMore { at_least }` hint
//! is a lower bound (the prefix `at_least - 1` still has no verdict).

/// `verdict` returns `Err(at_least)` for "need more", `Ok(text)` for a verdict.
pub fn check_prefixes(input: &[u8], verdict: impl Fn(&[u8]) -> Result<String, usize>) {
    let full = verdict(input);
    let n = input.len();
    let first = input.first().copied().map_or(0, usize::from);
    let mut ks = [
        0,
        1,
        n / 2,
        n / 3,
        (2 * n) / 3,
        n.saturating_sub(1),
        first,
        first * 7,
    ];
    for k in &mut ks {
        *k = (*k).min(n);
    }
    for k in ks {
        match verdict(&input[..k]) {
            Err(at_least) => {
                assert!(at_least > k, "at_least {at_least} <= prefix {k}");
                let before = (at_least - 1).min(n);
                assert!(
                    verdict(&input[..before]).is_err(),
                    "prefix {before} has a verdict although prefix {k} said at_least {at_least}"
                );
            }
            out => assert_eq!(out, full, "verdict at prefix {k} differs from the whole"),
        }
    }
}
