//! # sluice-ctrl
//!
//! The control plane: it loads Kubernetes-style manifests, validates them, compiles them
//! into the dataplane's tables and drives the dataplane.
//!
//! - [`model`]: serde types of every accepted kind (DESIGN.md §5) and the decoder.
//! - [`load`]: files, directories, stdin, multi-document YAML/JSON with positions.
//! - [`diag`]: field paths, positions and `file:line:col: Kind ns/name: path: message`.

pub mod diag;
pub mod load;
pub mod model;
