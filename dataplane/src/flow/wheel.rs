//! Timers: the hashed timing wheel of one-second ticks with lazy re-arming (a packet
//! only moves its flow's expiry; the wheel re-files or expires the flow when it gets
//! there), and the free list the wheel recycles entries onto.

use super::entry::{FlowId, FlowRef, NIL};
use super::table::{FlowTable, WHEEL_SLOTS};
use super::tcp::{TcpFlags, TcpState};
use super::tuple::Dir;

/// Ticks one [`FlowTable::expire`] call processes at most (bounded work per call).
const MAX_TICKS_PER_CALL: u32 = WHEEL_SLOTS as u32 - 1;
impl FlowTable {
    pub(super) fn file(&mut self, id: u32, expires: u32) {
        // A flow is filed at its expiry, or at the far end of the wheel if later; the
        // wheel re-files it when it gets there.
        let due = expires.clamp(
            self.wheel_now.saturating_add(1),
            self.wheel_now.saturating_add(self.horizon),
        );
        let slot = due as usize & (self.wheel.len() - 1);
        self.flows[id as usize].set_next(self.wheel[slot]);
        self.wheel[slot] = id;
    }

    /// Accounts a packet of the flow travelling in `dir` at `now`: advances the TCP
    /// state with the packet's flags (`None` for UDP and other protocols) and pushes the
    /// expiry out. Returns the new state.
    #[inline(always)]
    pub fn on_packet(
        &mut self,
        id: FlowId,
        dir: Dir,
        flags: Option<TcpFlags>,
        now: u32,
    ) -> TcpState {
        let f = &mut self.flows[id.0 as usize];
        let state = match flags {
            Some(fl) => f.state.on_tcp(dir, fl),
            None => f.state.on_datagram(dir),
        };
        // (`self.timeouts` borrowed in place, not copied: `perf/NOTES.md`.)
        let expires = now.saturating_add(self.timeouts.for_state(state));
        // Store only what changed: an established flow's entry then stays clean for a
        // second at a time instead of being written back to memory after every packet.
        if f.state != state {
            f.state = state;
        }
        if f.expires != expires {
            f.expires = expires;
        }
        state
    }

    /// Pushes a flow's expiry out from `now` by its state's timeout, leaving the state
    /// as it is (flows whose connection sluice ends itself: [`crate::terminate`]).
    pub fn touch(&mut self, id: FlowId, now: u32) {
        let f = &mut self.flows[id.0 as usize];
        let expires = now.saturating_add(self.timeouts.for_state(f.state));
        if f.expires != expires {
            f.expires = expires;
        }
    }

    /// Unindexes a live flow and marks it dead; the wheel recycles the entry.
    pub(super) fn reap(&mut self, id: FlowId) -> bool {
        if !self.flows[id.0 as usize].live() {
            return false;
        }
        self.index_remove_flow(id.0);
        let flow = &mut self.flows[id.0 as usize];
        flow.set_live(false);
        flow.expires = 0;
        self.len -= 1;
        true
    }

    /// Advances the wheel to `now` (seconds), expiring due flows; calls `on_expire` for
    /// each (before its entry is recycled). Returns how many expired.
    pub fn expire(&mut self, now: u32, mut on_expire: impl FnMut(FlowRef<'_>)) -> usize {
        let mut expired = 0;
        // Never process more than one turn per call: later slots wait for the next call.
        let end = now.min(self.wheel_now.saturating_add(MAX_TICKS_PER_CALL));
        while self.wheel_now < end {
            self.wheel_now += 1;
            let slot = self.wheel_now as usize & (self.wheel.len() - 1);
            let mut id = std::mem::replace(&mut self.wheel[slot], NIL);
            while id != NIL {
                let f = self.flows[id as usize];
                let next = f.next();
                // Under pressure a silent half-open flow is due before its expiry.
                let last = f.expires.saturating_sub(self.timeouts.for_state(f.state));
                let due = self.due(f.state, f.splice, last, f.expires);
                if !f.live() {
                    self.recycle(id); // removed earlier: recycle now
                } else if due > self.wheel_now {
                    self.file(id, due); // touched since filed: lazy re-arm
                } else {
                    on_expire(self.get(FlowId(id)));
                    self.index_remove_flow(id);
                    self.flows[id as usize].set_live(false);
                    self.recycle(id);
                    self.len -= 1;
                    self.stats.expired += 1;
                    expired += 1;
                }
                id = next;
            }
        }
        if expired > 0 {
            self.update_pressure();
        }
        expired
    }

    /// Puts an entry the wheel has just unlinked on the free list.
    pub(super) fn recycle(&mut self, id: u32) {
        self.flows[id as usize].set_next(self.free);
        self.free = id;
    }
}
