//! HTTP routes as the dataplane looks them up per request: a route's ordered list of
//! matches, each naming a rule; the first match that holds picks the rule, and the rule
//! says what to do (forward to a weighted backend set, redirect, answer directly) and how
//! to change the request and response on the way.
//!
//! The control plane does the ordering: Istio rules keep their order; Gateway API
//! matches are sorted by the spec's precedence (exact path, longest prefix, method, most
//! headers, most query parameters, oldest route, namespace/name, rule order) before they
//! reach this table. Lookups take no lock and allocate nothing; regular expressions are
//! compiled DFAs (RE2 syntax, full match) that need no scratch space to search.
//!
//! The pure functions the proxy needs next to a lookup live here too: a redirect's
//! `Location` ([`Redirect::write_location`]) and a rewritten path
//! ([`Rewrite::write_path`]), both written into the caller's buffer without allocating.
//! Istio's `uriRegexRewrite` searches with a Pike VM whose scratch space the caller owns
//! ([`HttpScratch`], one per worker).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson::{self, pikevm};
use regex_automata::util::primitives::NonMaxUsize;
use regex_automata::{Anchored, Input};

use super::maglev::MaglevTable;

/// One header of a request, as the parser found it (name as sent; compare it
/// case-insensitively).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// Field name.
    pub name: &'a str,
    /// Field value (trimmed of surrounding whitespace).
    pub value: &'a [u8],
}

/// A request as routing sees it: borrowed from the parsed head, nothing copied.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Method (`GET`, ...), case-sensitive.
    pub method: &'a str,
    /// `http` or `https`: how the request reached sluice.
    pub scheme: &'a str,
    /// The authority: the Host (or absolute-form target's authority) as sent, port
    /// included when one was sent.
    pub authority: &'a str,
    /// The path of the target, without the query (`/` for asterisk or authority form).
    pub path: &'a str,
    /// The query without its `?` (empty when none).
    pub query: &'a str,
    /// Every header line, in order.
    pub headers: &'a [Header<'a>],
    /// The listener's port the connection arrived on.
    pub port: u16,
    /// The client's address.
    pub source: IpAddr,
}

/// A compiled regular expression: RE2 syntax, matching the whole input (Envoy's
/// `safe_regex` and so Istio's and Gateway API's `RegularExpression` are full matches).
#[derive(Clone, Debug)]
pub struct Regex {
    /// The pattern as written (for `tables`, `explain` and errors).
    pub pattern: Box<str>,
    /// The anchored forward DFA of `^(?:pattern)$`.
    pub dfa: regex_automata::dfa::dense::DFA<Vec<u32>>,
}

/// The largest DFA one expression may compile to.
pub const DFA_SIZE_LIMIT: usize = 1 << 20;
/// The most memory determinizing one expression may use.
pub const DETERMINIZE_SIZE_LIMIT: usize = 2 << 20;
/// The largest Thompson NFA (the rewrite expressions' Pike VM).
pub const NFA_SIZE_LIMIT: usize = 1 << 20;
/// Capture groups a rewrite expression may have, group 0 (the whole match) included:
/// `\0` to `\9` can be referred to.
pub const MAX_GROUPS: usize = 10;

/// Why an expression does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegexError {
    /// Not a valid expression (or one a DFA cannot search, like a Unicode `\b`).
    Syntax {
        /// The pattern.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
    /// It would compile to more than a limit allows.
    TooLarge {
        /// The pattern.
        pattern: String,
        /// Which limit (`DFA_SIZE_LIMIT`, ...) and its value.
        limit: &'static str,
    },
    /// A rewrite expression with more than [`MAX_GROUPS`] groups.
    TooManyGroups {
        /// The pattern.
        pattern: String,
        /// How many it has (group 0 included).
        groups: usize,
    },
}

impl std::fmt::Display for RegexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegexError::Syntax { pattern, message } => {
                write!(f, "regular expression `{pattern}`: {message}")
            }
            RegexError::TooLarge { pattern, limit } => write!(
                f,
                "regular expression `{pattern}` compiles to more than {limit}"
            ),
            RegexError::TooManyGroups { pattern, groups } => write!(
                f,
                "regular expression `{pattern}` has {groups} capture groups (group 0 \
                 included); at most {MAX_GROUPS} can be referred to"
            ),
        }
    }
}

impl std::error::Error for RegexError {}

impl Regex {
    /// Compiles `pattern` (RE2 syntax, Unicode) to a dense DFA that matches only the
    /// whole input, within [`DFA_SIZE_LIMIT`] and [`DETERMINIZE_SIZE_LIMIT`].
    pub fn new(pattern: &str) -> Result<Regex, RegexError> {
        let anchored = format!("^(?:{pattern})$");
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                    .determinize_size_limit(Some(DETERMINIZE_SIZE_LIMIT)),
            )
            .thompson(thompson::Config::new().nfa_size_limit(Some(NFA_SIZE_LIMIT)))
            .build(&anchored)
            .map_err(|e| {
                let nfa_limit = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<thompson::BuildError>())
                    .and_then(thompson::BuildError::size_limit)
                    .is_some();
                if nfa_limit {
                    RegexError::TooLarge {
                        pattern: pattern.into(),
                        limit: "NFA_SIZE_LIMIT (1 MiB)",
                    }
                } else if e.is_size_limit_exceeded() {
                    RegexError::TooLarge {
                        pattern: pattern.into(),
                        limit: "DFA_SIZE_LIMIT (1 MiB) or DETERMINIZE_SIZE_LIMIT (2 MiB)",
                    }
                } else {
                    RegexError::Syntax {
                        pattern: pattern.into(),
                        message: e.to_string(),
                    }
                }
            })?;
        Ok(Regex {
            pattern: pattern.into(),
            dfa,
        })
    }

    /// Whether the whole of `hay` matches. No allocation, no cache; a search the DFA
    /// gives up on (it cannot for these builds) counts as no match.
    pub fn is_match(&self, hay: &[u8]) -> bool {
        let input = Input::new(hay).anchored(Anchored::Yes);
        matches!(self.dfa.try_search_fwd(&input), Ok(Some(_)))
    }
}

/// An expression for Istio's `uriRegexRewrite`, searched with a Pike VM (capture
/// groups), unanchored, leftmost-first.
#[derive(Clone, Debug)]
pub struct RewriteRegex {
    /// The pattern as written.
    pub pattern: Box<str>,
    vm: pikevm::PikeVM,
    /// Tells [`HttpScratch`] whether its cache was made for this VM.
    id: u64,
    /// Capture groups, group 0 included (at most [`MAX_GROUPS`]).
    groups: usize,
}

static REWRITE_IDS: AtomicU64 = AtomicU64::new(1);

impl RewriteRegex {
    /// Compiles `pattern` (RE2 syntax) for rewriting, within [`NFA_SIZE_LIMIT`] and
    /// with at most [`MAX_GROUPS`] groups.
    pub fn new(pattern: &str) -> Result<RewriteRegex, RegexError> {
        let vm = pikevm::Builder::new()
            .thompson(thompson::Config::new().nfa_size_limit(Some(NFA_SIZE_LIMIT)))
            .build(pattern)
            .map_err(|e| {
                let message = e.to_string();
                let nfa_limit = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<thompson::BuildError>())
                    .and_then(thompson::BuildError::size_limit)
                    .is_some();
                if nfa_limit {
                    RegexError::TooLarge {
                        pattern: pattern.into(),
                        limit: "NFA_SIZE_LIMIT (1 MiB)",
                    }
                } else {
                    RegexError::Syntax {
                        pattern: pattern.into(),
                        message,
                    }
                }
            })?;
        let groups = vm
            .get_nfa()
            .group_info()
            .group_len(regex_automata::PatternID::ZERO);
        if groups > MAX_GROUPS {
            return Err(RegexError::TooManyGroups {
                pattern: pattern.into(),
                groups,
            });
        }
        Ok(RewriteRegex {
            pattern: pattern.into(),
            vm,
            id: REWRITE_IDS.fetch_add(1, Ordering::Relaxed),
            groups,
        })
    }
}

/// A worker's scratch space for the searches that need one (the rewrite expressions'
/// Pike VM). Create one per worker off the hot path ([`HttpScratch::new`]) and pass it
/// to [`Rewrite::write_path`]. Its cache is reset when a different expression is
/// searched, and may grow (allocate) then, once per larger expression; searches with
/// the same expression allocate nothing.
#[derive(Debug)]
pub struct HttpScratch {
    cache: Option<(u64, pikevm::Cache)>,
    slots: [Option<NonMaxUsize>; 2 * MAX_GROUPS],
}

impl Default for HttpScratch {
    fn default() -> Self {
        HttpScratch::new()
    }
}

impl HttpScratch {
    /// An empty scratch space.
    pub fn new() -> HttpScratch {
        HttpScratch {
            cache: None,
            slots: [None; 2 * MAX_GROUPS],
        }
    }
}

/// The cache in `slot`, made (or reset) for `re`.
fn cache_for<'c>(
    slot: &'c mut Option<(u64, pikevm::Cache)>,
    re: &RewriteRegex,
) -> &'c mut pikevm::Cache {
    let (id, cache) = slot.get_or_insert_with(|| (re.id, re.vm.create_cache()));
    if *id != re.id {
        cache.reset(&re.vm);
        *id = re.id;
    }
    cache
}

/// A match on a string field.
#[derive(Clone, Debug)]
pub enum StrMatch {
    /// Equal.
    Exact(Box<str>),
    /// Starts with.
    Prefix(Box<str>),
    /// Gateway API `PathPrefix`: path-segment-wise prefix, stored without a trailing
    /// `/` (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`; an empty prefix, from
    /// `/`, matches every path).
    PathPrefix(Box<str>),
    /// The whole value matches the expression.
    Regex(Box<Regex>),
    /// Present, whatever the value (a header or query parameter named with no value
    /// condition).
    Present,
}

/// A header condition: the named header's value (the first line with that name; names
/// compared case-insensitively) matches, or (`invert`) no line with that name matches.
#[derive(Clone, Debug)]
pub struct HeaderMatch {
    /// Lower-case name.
    pub name: Box<str>,
    /// The condition on the value.
    pub value: StrMatch,
    /// Istio `withoutHeaders`: the condition must not hold (an absent header satisfies
    /// it).
    pub invert: bool,
}

/// A query-parameter condition: the first parameter with this exact name (query
/// parameter names are case-sensitive) has a value that matches.
#[derive(Clone, Debug)]
pub struct QueryMatch {
    /// Name.
    pub name: Box<str>,
    /// The condition on the value.
    pub value: StrMatch,
}

/// The conditions of one match; all must hold. A field that is `None` or empty holds
/// for every request.
#[derive(Clone, Debug, Default)]
pub struct RequestMatch {
    /// On [`Request::path`].
    pub path: Option<StrMatch>,
    /// Compare `path` case-insensitively (Istio `ignoreUriCase`; patterns are lower case).
    pub ignore_case: bool,
    /// Method, exact.
    pub method: Option<Box<str>>,
    /// On [`Request::scheme`].
    pub scheme: Option<StrMatch>,
    /// On [`Request::authority`].
    pub authority: Option<StrMatch>,
    /// Header conditions.
    pub headers: Box<[HeaderMatch]>,
    /// Query-parameter conditions.
    pub query: Box<[QueryMatch]>,
    /// The listener port.
    pub port: Option<u16>,
    /// Client address prefixes (Istio `sourceNamespace`, resolved to the namespace's pod
    /// addresses by the control plane); empty = any client.
    pub sources: Box<[(IpAddr, u8)]>,
}

/// A header change: set (replace every line of that name), add (append a line), remove.
#[derive(Clone, Debug, Default)]
pub struct HeaderOps {
    /// `(name, value)`: replace.
    pub set: Box<[(Box<str>, Box<str>)]>,
    /// `(name, value)`: append.
    pub add: Box<[(Box<str>, Box<str>)]>,
    /// Names (lower case): remove.
    pub remove: Box<[Box<str>]>,
}

impl HeaderOps {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// How a path is rewritten (of a [`Rewrite`] or a [`Redirect`]'s path where it says so).
#[derive(Clone, Debug)]
pub enum PathRewrite {
    /// Replace the whole path.
    Full(Box<str>),
    /// Replace the prefix the match matched, as Istio `rewrite.uri` (Envoy
    /// `prefix_rewrite`: plain string replacement after a [`StrMatch::Prefix`]) and
    /// Gateway API `ReplacePrefixMatch` (segment-wise after a [`StrMatch::PathPrefix`]:
    /// `/foo` -> `/xyz` turns `/foo/bar` into `/xyz/bar`, trailing slashes as the spec's
    /// table says) do. When the match's path condition is not a prefix, the whole path
    /// is replaced.
    Prefix(Box<str>),
    /// Istio `uriRegexRewrite`: every match of `regex` in the path replaced by
    /// `replacement` (`\1` or `$1` group references), as Envoy's `regex_rewrite`
    /// (RE2 `GlobalReplace`) does.
    Regex {
        /// The expression (unanchored, leftmost-first).
        regex: RewriteRegex,
        /// The replacement.
        replacement: Box<str>,
    },
}

/// A change of the request before it is forwarded.
#[derive(Clone, Debug, Default)]
pub struct Rewrite {
    /// The path.
    pub path: Option<PathRewrite>,
    /// The authority (Host).
    pub authority: Option<Box<str>>,
}

/// A redirect answer (Istio `HTTPRedirect`, Gateway API `RequestRedirect`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// Status code.
    pub code: u16,
    /// New scheme, if any.
    pub scheme: Option<Box<str>>,
    /// New host (without port), if any.
    pub host: Option<Box<str>>,
    /// How the port of `Location` is chosen.
    pub port: RedirectPort,
    /// New path: whole (`full`) or replacing the matched prefix.
    pub path: Option<RedirectPath>,
}

/// The port of a redirect's `Location`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedirectPort {
    /// Keep the request's port (none if the request named none).
    Keep,
    /// This port (omitted when it is the scheme's default).
    Port(u16),
    /// Istio `derivePort: FROM_PROTOCOL_DEFAULT`: no port (the scheme's default).
    SchemeDefault,
    /// Istio `derivePort: FROM_REQUEST_PORT`: the port the request arrived on.
    Listener,
}

/// A redirect's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedirectPath {
    /// Replace the whole path.
    Full(Box<str>),
    /// Replace the matched prefix (as [`PathRewrite::Prefix`]: Gateway API
    /// `ReplacePrefixMatch`).
    Prefix(Box<str>),
}

/// Which failures a retry covers (Envoy's `retryOn` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryOn {
    /// `connect-failure`: the backend could not be connected.
    pub connect_failure: bool,
    /// `refused-stream` / `reset`: the backend closed or reset before a response.
    pub reset: bool,
    /// `5xx`: any 5xx response (and resets).
    pub server_error: bool,
    /// `gateway-error`: 502, 503, 504.
    pub gateway_error: bool,
}

/// Retries of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retries {
    /// Further attempts after the first (0 = none).
    pub attempts: u8,
    /// Deadline of each attempt, ms (0 = the route's timeout).
    pub per_try_timeout_ms: u64,
    /// What is retried.
    pub on: RetryOn,
}

/// What a rule does with a matching request.
#[derive(Debug)]
pub enum HttpAction {
    /// Forward to a backend of the weighted set.
    Forward {
        /// The set (reject slots are invalid backends); for dual-stack backends, the IPv4
        /// endpoints'.
        table: MaglevTable,
        /// For dual-stack backends, the IPv6 endpoints'.
        table_v6: Option<MaglevTable>,
        /// The status answered for a request given to an invalid backend: 500 (Gateway
        /// API) or 503 (Istio).
        invalid_status: u16,
    },
    /// Answer with a redirect.
    Redirect(Redirect),
    /// Answer with this status and body (Istio `directResponse`).
    Direct {
        /// Status code.
        status: u16,
        /// Body (may be empty).
        body: Box<[u8]>,
    },
}

/// A copy of each request sent to another backend set; its responses are dropped.
#[derive(Debug)]
pub struct Mirror {
    /// The set.
    pub table: MaglevTable,
    /// Share of requests mirrored, in millionths (1_000_000 = all).
    pub per_million: u32,
}

/// One rule.
#[derive(Debug)]
pub struct HttpRule {
    /// `Kind ns/name rules[i]` (or `http[i]`), for counters and `explain`.
    pub name: Box<str>,
    /// The rule's slot in each worker's [`RuleCounters`](crate::stats::RuleCounters):
    /// the control plane keeps one per rule name across reloads
    /// ([`ListenerTable::set_rule_counters`](super::listeners::ListenerTable::set_rule_counters));
    /// [`OVERFLOW_SLOT`](crate::stats::OVERFLOW_SLOT) when it gave none.
    pub counter: u32,
    /// What to do.
    pub action: HttpAction,
    /// Request changes.
    pub rewrite: Rewrite,
    /// Request header changes.
    pub request_headers: HeaderOps,
    /// Response header changes (shared: a connection holds them while its response
    /// comes, across a reload, without copying them).
    pub response_headers: std::sync::Arc<HeaderOps>,
    /// Whole-request deadline, ms (0 = none).
    pub timeout_ms: u64,
    /// Retries.
    pub retries: Retries,
    /// Mirrors.
    pub mirrors: Box<[Mirror]>,
}

/// A route's HTTP rules and their matches in precedence order.
#[derive(Debug, Default)]
pub struct HttpRoutes {
    /// Rules.
    pub rules: Box<[HttpRule]>,
    /// `(match, index into rules)`, first that holds wins.
    pub matches: Box<[(RequestMatch, u32)]>,
}

impl HttpRoutes {
    /// Whether the route has HTTP rules at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first match that holds for `req`, and its rule.
    pub fn find(&self, req: &Request<'_>) -> Option<(&RequestMatch, &HttpRule)> {
        self.find_indexed(req).map(|(m, _, r)| (m, r))
    }

    /// [`HttpRoutes::find`] with the rule's index in [`HttpRoutes::rules`].
    pub fn find_indexed(&self, req: &Request<'_>) -> Option<(&RequestMatch, u32, &HttpRule)> {
        self.matches
            .iter()
            .find(|(m, _)| m.holds(req))
            .and_then(|(m, r)| Some((m, *r, self.rules.get(*r as usize)?)))
    }
}

impl StrMatch {
    /// Whether `v` matches (`fold`: Exact and the prefixes compare ASCII
    /// case-insensitively; expressions are never folded).
    pub fn matches(&self, v: &[u8], fold: bool) -> bool {
        let eq = |a: &[u8], b: &[u8]| {
            if fold {
                a.eq_ignore_ascii_case(b)
            } else {
                a == b
            }
        };
        match self {
            StrMatch::Exact(e) => eq(v, e.as_bytes()),
            StrMatch::Prefix(p) => v.len() >= p.len() && eq(&v[..p.len()], p.as_bytes()),
            StrMatch::PathPrefix(p) => {
                let p = p.as_bytes();
                v.len() >= p.len()
                    && eq(&v[..p.len()], p)
                    && matches!(v.get(p.len()), None | Some(b'/'))
            }
            StrMatch::Regex(r) => r.is_match(v),
            StrMatch::Present => true,
        }
    }
}

/// The value of the first header named `name` (ASCII case-insensitively).
fn header<'a>(req: &Request<'a>, name: &str) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// The value of the first query parameter named exactly `name`: `&`-separated pairs,
/// `name=value` or a bare `name` (empty value). Nothing is percent-decoded: names and
/// values are compared as sent (Envoy's `query_parameters` match decodes neither).
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        (n == name).then_some(v)
    })
}

/// Whether `a` is inside `net/len`.
fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    let (a, n, bits) = match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a >> shift) == (n >> shift)
}

impl HeaderMatch {
    /// Whether it holds for `req`.
    pub fn holds(&self, req: &Request<'_>) -> bool {
        let found = header(req, &self.name).is_some_and(|v| self.value.matches(v, false));
        found != self.invert
    }
}

impl QueryMatch {
    /// Whether it holds for `req`.
    pub fn holds(&self, req: &Request<'_>) -> bool {
        query_param(req.query, &self.name).is_some_and(|v| self.value.matches(v.as_bytes(), false))
    }
}

impl RequestMatch {
    /// Whether every condition holds for `req`. No allocation, no lock, no panic.
    pub fn holds(&self, req: &Request<'_>) -> bool {
        self.port.is_none_or(|p| p == req.port)
            && self.method.as_deref().is_none_or(|m| m == req.method)
            && self
                .path
                .as_ref()
                .is_none_or(|p| p.matches(req.path.as_bytes(), self.ignore_case))
            && self
                .scheme
                .as_ref()
                .is_none_or(|s| s.matches(req.scheme.as_bytes(), false))
            && self
                .authority
                .as_ref()
                .is_none_or(|a| a.matches(req.authority.as_bytes(), false))
            && self.headers.iter().all(|h| h.holds(req))
            && self.query.iter().all(|q| q.holds(req))
            && (self.sources.is_empty()
                || self
                    .sources
                    .iter()
                    .any(|&(net, len)| in_prefix(req.source, net, len)))
    }

    /// Whether the match has no condition at all (holds for every request).
    pub fn is_unconditional(&self) -> bool {
        self.path.is_none()
            && self.method.is_none()
            && self.scheme.is_none()
            && self.authority.is_none()
            && self.headers.is_empty()
            && self.query.is_empty()
            && self.port.is_none()
            && self.sources.is_empty()
    }
}

/// A bounded writer over the caller's buffer: `None` once something does not fit.
struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Out<'_> {
    fn push(&mut self, b: &[u8]) -> Option<()> {
        let end = self.len.checked_add(b.len())?;
        self.buf.get_mut(self.len..end)?.copy_from_slice(b);
        self.len = end;
        Some(())
    }

    fn push_u16(&mut self, n: u16) -> Option<()> {
        let mut digits = [0u8; 5];
        let mut i = digits.len();
        let mut n = n;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..])
    }
}

/// Splits an authority into host and port (`[v6]:port` kept bracketed); a port that
/// does not parse counts as none.
pub fn split_authority(authority: &str) -> (&str, Option<u16>) {
    let colon = if authority.starts_with('[') {
        authority
            .find(']')
            .and_then(|e| authority[e..].find(':').map(|c| e + c))
    } else {
        authority.rfind(':')
    };
    match colon {
        Some(c) => (&authority[..c], authority[c + 1..].parse().ok()),
        None => (authority, None),
    }
}

/// The default port of a scheme (`http` 80, `https` 443).
pub fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// Writes `path` with the prefix the match's path condition matched replaced by
/// `with`: plain replacement after [`StrMatch::Prefix`] (Envoy `prefix_rewrite`),
/// segment-wise after [`StrMatch::PathPrefix`] (Gateway API `ReplacePrefixMatch`),
/// the whole path otherwise.
fn replace_prefix(out: &mut Out<'_>, path: &str, m: &RequestMatch, with: &str) -> Option<()> {
    match &m.path {
        Some(StrMatch::Prefix(p)) if path.len() >= p.len() => {
            out.push(with.as_bytes())?;
            out.push(path.get(p.len()..)?.as_bytes())
        }
        Some(StrMatch::PathPrefix(p)) if path.len() >= p.len() => {
            // `p` is stored without a trailing `/`; so is the replacement here.
            let rest = path.get(p.len()..)?;
            let with = with.trim_end_matches('/');
            if with.is_empty() && rest.is_empty() {
                return out.push(b"/");
            }
            out.push(with.as_bytes())?;
            if with.is_empty() && !rest.starts_with('/') {
                out.push(b"/")?;
            }
            out.push(rest.as_bytes())
        }
        _ => out.push(with.as_bytes()),
    }
}

impl Redirect {
    /// Writes the `Location` of this redirect for `req` (matched by `m`) into `out`:
    /// `scheme://host[:port]path[?query]`. Returns its length, or `None` if it does not
    /// fit.
    ///
    /// - scheme: the new one, else the request's.
    /// - host: the new one, else the request's (its port dropped).
    /// - port ([`RedirectPort`]): `Keep` keeps the request's port unless the host was
    ///   replaced (Envoy's `host_redirect` replaces host and port) or the scheme changes
    ///   and it is the old scheme's default; `Port` and `Listener`
    ///   give that port; `SchemeDefault` none. A port that is the default of the
    ///   `Location`'s scheme is never written (Envoy, and Gateway API: "the port MUST be
    ///   omitted when it is the scheme's default").
    /// - path: `Full` replaces it, `Prefix` replaces the matched prefix; the query is
    ///   kept (a new path carrying its own `?query` replaces it).
    pub fn write_location(
        &self,
        req: &Request<'_>,
        m: &RequestMatch,
        out: &mut [u8],
    ) -> Option<usize> {
        let mut o = Out { buf: out, len: 0 };
        let scheme = self.scheme.as_deref().unwrap_or(req.scheme);
        let (req_host, req_port) = split_authority(req.authority);
        let host = self.host.as_deref().unwrap_or(req_host);
        let port = match self.port {
            RedirectPort::Keep if self.host.is_some() => None,
            // Envoy keeps the Host as sent, except that a scheme change drops the old
            // scheme's default port (`http://h:80` -> `https://h`).
            RedirectPort::Keep => req_port.filter(|&p| {
                self.scheme.is_none()
                    || scheme.eq_ignore_ascii_case(req.scheme)
                    || Some(p) != default_port(req.scheme)
            }),
            RedirectPort::Port(p) => Some(p),
            RedirectPort::SchemeDefault => None,
            RedirectPort::Listener => Some(req.port),
        };
        o.push(scheme.as_bytes())?;
        o.push(b"://")?;
        o.push(host.as_bytes())?;
        if let Some(p) = port.filter(|&p| Some(p) != default_port(scheme)) {
            o.push(b":")?;
            o.push_u16(p)?;
        }
        let new_path = match &self.path {
            None => {
                o.push(req.path.as_bytes())?;
                None
            }
            Some(RedirectPath::Full(p)) => {
                o.push(p.as_bytes())?;
                Some(&**p)
            }
            Some(RedirectPath::Prefix(p)) => {
                replace_prefix(&mut o, req.path, m, p)?;
                Some(&**p)
            }
        };
        if !req.query.is_empty() && !new_path.is_some_and(|p| p.contains('?')) {
            o.push(b"?")?;
            o.push(req.query.as_bytes())?;
        }
        Some(o.len)
    }
}

impl Rewrite {
    /// Writes the path to forward `req` (matched by `m`) with into `out` (without the
    /// query, which the proxy keeps): rewritten as [`PathRewrite`] says, or the
    /// request's own. Returns its length, or `None` if it does not fit. Only the
    /// `Regex` variant uses `scratch` (see [`HttpScratch`] on when it allocates).
    pub fn write_path(
        &self,
        req: &Request<'_>,
        m: &RequestMatch,
        scratch: &mut HttpScratch,
        out: &mut [u8],
    ) -> Option<usize> {
        let mut o = Out { buf: out, len: 0 };
        match &self.path {
            None => o.push(req.path.as_bytes())?,
            Some(PathRewrite::Full(p)) => o.push(p.as_bytes())?,
            Some(PathRewrite::Prefix(p)) => replace_prefix(&mut o, req.path, m, p)?,
            Some(PathRewrite::Regex { regex, replacement }) => {
                regex_replace_all(&mut o, req.path, regex, replacement, scratch)?
            }
        }
        Some(o.len)
    }
}

/// Every leftmost-first match of `re` in `hay` replaced by `replacement`, whose `\N`
/// and `$N` (N a digit) stand for group N (empty when it did not take part) and `\\`
/// for a backslash; after an empty match one character is copied before searching
/// again (RE2 `GlobalReplace`).
fn regex_replace_all(
    o: &mut Out<'_>,
    hay: &str,
    re: &RewriteRegex,
    replacement: &str,
    scratch: &mut HttpScratch,
) -> Option<()> {
    let HttpScratch { cache, slots } = scratch;
    let cache = cache_for(cache, re);
    let slots = slots.get_mut(..2 * re.groups)?;
    let mut at = 0;
    while at <= hay.len() {
        let input = Input::new(hay).span(at..hay.len());
        slots.iter_mut().for_each(|s| *s = None);
        if re.vm.search_slots(cache, &input, slots).is_none() {
            break;
        }
        let (Some(s), Some(e)) = (slots[0], slots[1]) else {
            break;
        };
        let (s, e) = (s.get(), e.get());
        o.push(hay.get(at..s)?.as_bytes())?;
        substitute(o, hay, slots, replacement)?;
        if e > s {
            at = e;
        } else {
            // An empty match: copy the next character and go on after it.
            let next = hay.get(e..)?.chars().next();
            match next {
                Some(c) => {
                    let mut b = [0u8; 4];
                    o.push(c.encode_utf8(&mut b).as_bytes())?;
                    at = e + c.len_utf8();
                }
                None => {
                    at = hay.len() + 1;
                }
            }
        }
    }
    if at <= hay.len() {
        o.push(hay.get(at..)?.as_bytes())?;
    }
    Some(())
}

/// Writes `replacement` with its group references filled from `slots`.
fn substitute(
    o: &mut Out<'_>,
    hay: &str,
    slots: &[Option<NonMaxUsize>],
    replacement: &str,
) -> Option<()> {
    let r = replacement.as_bytes();
    let mut i = 0;
    while i < r.len() {
        let c = r[i];
        let next = r.get(i + 1).copied();
        match (c, next) {
            (b'\\' | b'$', Some(d)) if d.is_ascii_digit() => {
                let g = usize::from(d - b'0');
                if let (Some(Some(s)), Some(Some(e))) = (slots.get(2 * g), slots.get(2 * g + 1)) {
                    o.push(hay.get(s.get()..e.get())?.as_bytes())?;
                }
                i += 2;
            }
            (b'\\', Some(b'\\')) => {
                o.push(b"\\")?;
                i += 2;
            }
            _ => {
                o.push(&r[i..i + 1])?;
                i += 1;
            }
        }
    }
    Some(())
}

#[cfg(test)]
#[path = "http_tests/mod.rs"]
mod tests;
