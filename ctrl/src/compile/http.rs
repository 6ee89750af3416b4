//! Pieces of HTTP route compilation that Istio and the Gateway API share: durations,
//! Istio `StringMatch`es, and the conversion of IR matches and rules into the
//! dataplane's [`HttpRoutes`](sluice_dataplane::tables::http::HttpRoutes).

use sluice_dataplane::tables::http as dp;

use super::backends::{mixes_families, table_for};
use super::ir::{self, HttpAction, HttpRule, StringMatch};
use crate::model::istio;

/// A duration as Istio (protobuf JSON, `1.5s`) and the Gateway API (`1h2m3s4ms`) write
/// them, in milliseconds: one or more `<number><unit>` with units `h`, `m`, `s`, `ms`
/// (Istio also allows fractions of seconds). `None` when it does not parse.
pub fn duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(end);
        let n: f64 = num.parse().ok()?;
        let (unit_ms, tail) = if let Some(t) = tail.strip_prefix("ms") {
            (1.0, t)
        } else if let Some(t) = tail.strip_prefix('s') {
            (1000.0, t)
        } else if let Some(t) = tail.strip_prefix('m') {
            (60_000.0, t)
        } else if let Some(t) = tail.strip_prefix('h') {
            (3_600_000.0, t)
        } else {
            return None;
        };
        total += n * unit_ms;
        rest = tail;
    }
    (0.0..1e15).contains(&total).then(|| total.round() as u64)
}

/// An Istio `StringMatch` as an IR condition: `exact`, `prefix` or `regex`; with none
/// set, presence (Istio: "if the value is empty and only the name of header is
/// specified, presence of the header is checked"). Validation rejects several set.
pub fn istio_string_match(m: &istio::StringMatch) -> StringMatch {
    match (&m.exact, &m.prefix, &m.regex) {
        (Some(e), _, _) => StringMatch::Exact(e.clone()),
        (_, Some(p), _) => StringMatch::Prefix(p.clone()),
        (_, _, Some(r)) => StringMatch::Regex(r.clone()),
        _ => StringMatch::Present,
    }
}

/// Why a table could not be built from HTTP rules.
#[derive(Debug, thiserror::Error)]
pub enum HttpTableError {
    /// A Maglev table.
    #[error(transparent)]
    Maglev(#[from] sluice_dataplane::tables::maglev::BuildError),
    /// An expression (validation compiles each first, so this is not expected).
    #[error(transparent)]
    Regex(#[from] dp::RegexError),
}

fn str_match(m: &StringMatch) -> Result<dp::StrMatch, dp::RegexError> {
    Ok(match m {
        StringMatch::Exact(e) => dp::StrMatch::Exact(e.as_str().into()),
        StringMatch::Prefix(p) => dp::StrMatch::Prefix(p.as_str().into()),
        StringMatch::PathPrefix(p) => dp::StrMatch::PathPrefix(p.as_str().into()),
        StringMatch::Regex(r) => dp::StrMatch::Regex(Box::new(dp::Regex::new(r)?)),
        StringMatch::Present => dp::StrMatch::Present,
    })
}

/// An IR match as the dataplane's.
pub fn request_match(m: &ir::HttpMatch) -> Result<dp::RequestMatch, dp::RegexError> {
    Ok(dp::RequestMatch {
        path: m.path.as_ref().map(str_match).transpose()?,
        ignore_case: m.ignore_case,
        method: m.method.as_deref().map(Into::into),
        scheme: m.scheme.as_ref().map(str_match).transpose()?,
        authority: m.authority.as_ref().map(str_match).transpose()?,
        headers: m
            .headers
            .iter()
            .map(|h| {
                Ok(dp::HeaderMatch {
                    name: h.name.to_ascii_lowercase().into(),
                    value: str_match(&h.value)?,
                    invert: h.invert,
                })
            })
            .collect::<Result<_, dp::RegexError>>()?,
        query: m
            .query
            .iter()
            .map(|q| {
                Ok(dp::QueryMatch {
                    name: q.name.as_str().into(),
                    value: str_match(&q.value)?,
                })
            })
            .collect::<Result<_, dp::RegexError>>()?,
        port: m.port,
        sources: m
            .sources
            .iter()
            .map(|n| (n.network(), n.prefix_len()))
            .collect(),
    })
}

fn header_ops(h: &ir::HeaderOps) -> dp::HeaderOps {
    let pairs = |v: &[(String, String)]| {
        v.iter()
            .map(|(n, x)| (n.as_str().into(), x.as_str().into()))
            .collect()
    };
    dp::HeaderOps {
        set: pairs(&h.set),
        add: pairs(&h.add),
        remove: h
            .remove
            .iter()
            .map(|n| n.to_ascii_lowercase().into())
            .collect(),
    }
}

fn path_rewrite(p: &ir::PathRewrite) -> Result<dp::PathRewrite, dp::RegexError> {
    Ok(match p {
        ir::PathRewrite::Full(f) => dp::PathRewrite::Full(f.as_str().into()),
        ir::PathRewrite::Prefix(f) => dp::PathRewrite::Prefix(f.as_str().into()),
        ir::PathRewrite::Regex { regex, replacement } => dp::PathRewrite::Regex {
            regex: dp::RewriteRegex::new(regex)?,
            replacement: replacement.as_str().into(),
        },
    })
}

/// The dataplane's rule for an IR rule (`size`: the Maglev table size).
pub fn rule(r: &HttpRule, size: u64) -> Result<dp::HttpRule, HttpTableError> {
    let tables = |backends: &[ir::Backend]| -> Result<_, HttpTableError> {
        Ok((
            table_for(backends, size, false)?,
            if mixes_families(backends) {
                Some(table_for(backends, size, true)?)
            } else {
                None
            },
        ))
    };
    let action = match &r.action {
        HttpAction::Forward {
            backends,
            invalid_status,
        } => {
            let (table, table_v6) = tables(backends)?;
            dp::HttpAction::Forward {
                table,
                table_v6,
                invalid_status: *invalid_status,
            }
        }
        HttpAction::Redirect(x) => dp::HttpAction::Redirect(dp::Redirect {
            code: x.code,
            scheme: x.scheme.as_deref().map(Into::into),
            host: x.host.as_deref().map(Into::into),
            port: match x.port {
                ir::RedirectPort::Keep => dp::RedirectPort::Keep,
                ir::RedirectPort::Port(p) => dp::RedirectPort::Port(p),
                ir::RedirectPort::SchemeDefault => dp::RedirectPort::SchemeDefault,
                ir::RedirectPort::Listener => dp::RedirectPort::Listener,
            },
            path: match &x.path {
                None | Some(ir::PathRewrite::Regex { .. }) => None,
                Some(ir::PathRewrite::Full(p)) => Some(dp::RedirectPath::Full(p.as_str().into())),
                Some(ir::PathRewrite::Prefix(p)) => {
                    Some(dp::RedirectPath::Prefix(p.as_str().into()))
                }
            },
        }),
        HttpAction::Direct { status, body } => dp::HttpAction::Direct {
            status: *status,
            body: body.clone().into_boxed_slice(),
        },
    };
    let mut mirrors = Vec::with_capacity(r.mirrors.len());
    for m in &r.mirrors {
        mirrors.push(dp::Mirror {
            table: tables(&m.backends)?.0,
            per_million: m.per_million,
        });
    }
    Ok(dp::HttpRule {
        name: r.name.as_str().into(),
        // The registry of a running instance gives the slot (`crate::rule_counters`).
        counter: sluice_dataplane::stats::OVERFLOW_SLOT,
        action,
        rewrite: dp::Rewrite {
            path: r.rewrite.path.as_ref().map(path_rewrite).transpose()?,
            authority: r.rewrite.authority.as_deref().map(Into::into),
        },
        request_headers: header_ops(&r.request_headers),
        response_headers: std::sync::Arc::new(header_ops(&r.response_headers)),
        timeout_ms: r.timeout_ms,
        retries: dp::Retries {
            attempts: r.retries.attempts,
            per_try_timeout_ms: r.retries.per_try_timeout_ms,
            on: dp::RetryOn {
                connect_failure: r.retries.connect_failure,
                reset: r.retries.reset,
                server_error: r.retries.server_error,
                gateway_error: r.retries.gateway_error,
            },
        },
        mirrors: mirrors.into_boxed_slice(),
    })
}

/// A route's rules and ordered matches as the dataplane's [`dp::HttpRoutes`].
pub fn routes(route: &ir::Route) -> Result<dp::HttpRoutes, HttpTableError> {
    let size = route.maglev_table_size;
    let rules = route
        .http
        .iter()
        .map(|r| rule(r, size))
        .collect::<Result<Vec<_>, _>>()?;
    let matches = route
        .http_matches
        .iter()
        .map(|(m, i)| Ok((request_match(m)?, *i as u32)))
        .collect::<Result<Vec<_>, dp::RegexError>>()?;
    Ok(dp::HttpRoutes {
        rules: rules.into_boxed_slice(),
        matches: matches.into_boxed_slice(),
    })
}

/// Whether a route decides once per connection exactly (see
/// `ListenerEntry::proxy`): exactly one unconditional match of one rule that forwards
/// plainly or answers.
pub fn once_per_connection(route: &ir::Route) -> bool {
    match (&route.http_matches[..], &route.http[..]) {
        ([(m, 0)], [rule]) => m.is_unconditional() && rule.once_per_connection(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_ms("10s"), Some(10_000));
        assert_eq!(duration_ms("1.5s"), Some(1_500));
        assert_eq!(duration_ms("500ms"), Some(500));
        assert_eq!(duration_ms("1h2m3s4ms"), Some(3_723_004));
        assert_eq!(duration_ms("0s"), Some(0));
        assert_eq!(duration_ms("10"), None);
        assert_eq!(duration_ms("s"), None);
        assert_eq!(duration_ms("-1s"), None);
    }
}
