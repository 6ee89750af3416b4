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

use std::net::IpAddr;

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

/// A compiled regular expression: RE2 syntax, matching the whole input.
#[derive(Clone, Debug)]
pub struct Regex {
    /// The pattern as written (for `tables`, `explain` and errors).
    pub pattern: Box<str>,
    /// The anchored forward DFA of `^(?:pattern)$`.
    pub dfa: regex_automata::dfa::dense::DFA<Vec<u32>>,
}

/// A match on a string field.
#[derive(Clone, Debug)]
pub enum StrMatch {
    /// Equal.
    Exact(Box<str>),
    /// Starts with.
    Prefix(Box<str>),
    /// The whole value matches the expression.
    Regex(Regex),
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

/// How a path is rewritten.
#[derive(Clone, Debug)]
pub enum PathRewrite {
    /// Replace the whole path.
    Full(Box<str>),
    /// Replace the prefix the match matched (the match's path must be a prefix match;
    /// otherwise the whole path is replaced), as Istio `rewrite.uri` and Gateway API
    /// `ReplacePrefixMatch` do.
    Prefix(Box<str>),
    /// Istio `uriRegexRewrite`: every match of `regex` in the path replaced by
    /// `replacement` (`\1`-style group references).
    Regex {
        /// The expression (unanchored, leftmost-first).
        regex: Box<str>,
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
    /// Replace the matched prefix.
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
    /// What to do.
    pub action: HttpAction,
    /// Request changes.
    pub rewrite: Rewrite,
    /// Request header changes.
    pub request_headers: HeaderOps,
    /// Response header changes.
    pub response_headers: HeaderOps,
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
        self.matches
            .iter()
            .find(|(m, _)| m.holds(req))
            .and_then(|(m, r)| Some((m, self.rules.get(*r as usize)?)))
    }
}

impl RequestMatch {
    /// Whether every condition holds for `req`.
    pub fn holds(&self, req: &Request<'_>) -> bool {
        let _ = req;
        todo!("tables::http matching")
    }
}
