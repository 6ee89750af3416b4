//! The [`Snapshot`]: every table a packet needs, in one immutable bundle, published to the
//! workers through one pointer ([`crate::rcu`]). The control thread builds a complete new
//! snapshot for every accepted configuration; nothing in it changes afterwards, so a
//! worker sees either the old tables or the new ones, never a mix.

use super::addresses::Addresses;
use super::listeners::ListenerTable;
use super::policy::PolicyTables;

/// The tables of one configuration generation.
#[derive(Debug)]
pub struct Snapshot {
    /// Listeners and routes (Maglev tables) for new flows.
    pub listeners: ListenerTable,
    /// NetworkPolicy: ipcache and per-direction identity tables.
    pub policy: PolicyTables,
    /// Listener addresses sluice answers ARP/ND for on the port whose network holds them
    /// (besides its ports' own and the fixed virtual addresses).
    pub addresses: Addresses,
}
