//! Unit tests of the policy compiler.
