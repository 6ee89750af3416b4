//! # sluice-ctrl
//!
//! The control plane: it loads Kubernetes-style manifests, validates them, compiles them
//! into the dataplane's tables and drives the dataplane.
