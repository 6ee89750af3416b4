//! Hostname syntax: Gateway API `Hostname`s and Istio `[namespace/]host` entries.

use std::net::IpAddr;

use crate::diag::Reporter;
use crate::load::Item;

/// Checks a Gateway API `Hostname`: a DNS subdomain, optionally prefixed with `*.`; no
/// IP address, no port, lower case.
pub fn gateway_hostname_error(h: &str) -> Option<String> {
    let bare = h.strip_prefix("*.").unwrap_or(h);
    if h.parse::<IpAddr>().is_ok() {
        return Some(format!("`{h}` is an IP address; a hostname is required"));
    }
    dns_subdomain_error(bare).map(|e| format!("`{h}` is not a valid hostname: {e}"))
}

fn dns_subdomain_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("empty".into());
    }
    if s.len() > 253 {
        return Some("longer than 253 characters".into());
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Some("empty label".into());
        }
        if label.len() > 63 {
            return Some(format!("label `{label}` is longer than 63 characters"));
        }
        if label.contains('*') {
            return Some("a wildcard is only allowed as the whole leftmost label `*.`".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Some(format!(
                "label `{label}` may hold only lower-case letters, digits and `-`"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!("label `{label}` starts or ends with `-`"));
        }
    }
    None
}

pub(super) fn hostname(it: &Item, at: &str, h: &str, r: &mut Reporter) {
    if let Some(e) = gateway_hostname_error(h) {
        r.error(&it.path(at), e);
    }
}

/// Checks an Istio `Server.hosts` / VirtualService host entry: `[namespace/]host` where
/// namespace is `*`, `.`, `~` or a DNS label, and host is `*`, `*.suffix` or a name.
pub fn istio_host_error(entry: &str, allow_namespace: bool) -> Option<String> {
    let (ns, host) = match entry.split_once('/') {
        Some((ns, host)) if allow_namespace => (Some(ns), host),
        Some(_) => return Some(format!("`{entry}`: a namespace prefix is not allowed here")),
        None => (None, entry),
    };
    if let Some(ns) = ns {
        let ok = matches!(ns, "*" | "." | "~")
            || (!ns.is_empty()
                && ns.len() <= 63
                && dns_subdomain_error(ns).is_none()
                && !ns.contains('.'));
        if !ok {
            return Some(format!(
                "`{entry}`: namespace `{ns}` must be `*`, `.`, `~` or a namespace name"
            ));
        }
    }
    if host == "*" {
        return None;
    }
    let bare = host.strip_prefix("*.").unwrap_or(host);
    let lowered = bare.to_ascii_lowercase();
    if host.parse::<IpAddr>().is_ok() {
        return None; // Istio accepts IPs in VirtualService hosts.
    }
    dns_subdomain_error(&lowered).map(|e| format!("`{entry}`: host `{host}` is invalid: {e}"))
}

/// Resolves an Istio destination host to (namespace, service name): short names are in
/// `own_ns`; `name.ns`, `name.ns.svc` and `name.ns.svc.<domain>` are fully qualified.
pub fn service_of_host<'a>(host: &'a str, own_ns: &'a str) -> (&'a str, &'a str) {
    let parts: Vec<&str> = host.split('.').collect();
    match parts.as_slice() {
        [name] => (own_ns, name),
        [name, ns] | [name, ns, "svc", ..] => (ns, name),
        _ => (own_ns, host),
    }
}
