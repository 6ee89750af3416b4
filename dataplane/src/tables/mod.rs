//! Compiled, immutable tables and their lookups. Built by `sluice-ctrl`, read here.

pub mod hostname;
pub mod hosts;
pub mod ipcache;
pub mod listeners;
pub mod lpm;
pub mod maglev;
pub mod policy;
pub mod snapshot;
