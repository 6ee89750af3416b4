//! `sluice-tests`: shared helpers for the integration tests in `tests/tests/`.
