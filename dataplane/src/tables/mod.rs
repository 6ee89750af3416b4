//! Compiled, immutable tables and their lookups. Built by `sluice-ctrl`, read here.

pub mod hostname;
pub mod hosts;
pub mod ipcache;
pub mod listeners;
pub mod lpm;
pub mod maglev;
pub mod policy;
pub mod snapshot;

/// Freezes a lookup array built off the hot path: a boxed slice, which for an array of at
/// least 2 MiB is a fresh allocation advised into transparent huge pages before it is
/// filled ([`crate::port::advise_huge_pages`]), so that random lookups in tens of MiB do
/// not also pay a page walk each. One copy, at build time; the contents are unchanged.
pub(crate) fn frozen<T: Copy>(v: Vec<T>) -> Box<[T]> {
    if std::mem::size_of_val(v.as_slice()) < (2 << 20) {
        return v.into_boxed_slice();
    }
    let mut out = Vec::with_capacity(v.len());
    crate::port::advise_huge_pages(&*out.spare_capacity_mut());
    out.extend_from_slice(&v);
    out.into_boxed_slice()
}
