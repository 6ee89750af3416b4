//! Wire formats: zero-copy packet views (`Packet<T: AsRef<[u8]>>`) and their reprs.
