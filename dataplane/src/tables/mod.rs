//! Compiled, immutable tables and their lookups. Built by `sluice-ctrl`, read here.

pub mod addresses;
pub mod client_auth;
pub mod hosts;
pub mod http;
pub mod ipcache;
pub mod listeners;
pub mod lpm;
pub mod maglev;
pub mod policy;
pub mod snapshot;
pub mod tls;
pub mod x509;

use crate::mem::HugeSlice;

/// Freezes a lookup array built off the hot path: a copy in a [`HugeSlice`], which for an
/// array of at least 2 MiB starts at a 2 MiB boundary and is advised into transparent
/// huge pages before it is filled, so that random lookups in tens of MiB do not also pay
/// a page walk each. (A `Box` of the same size starts anywhere in its mapping, so the
/// huge pages it can get start only at the first 2 MiB boundary inside it:
/// `perf/NOTES.md`.) One copy, at build time; the contents are unchanged.
pub(crate) fn frozen<T: Copy>(v: Vec<T>) -> HugeSlice<T> {
    HugeSlice::from_slice(&v)
}
