//! Tests of the first-payload parsers: literal bytes, the real vectors of
//! `shared/testdata/tls`, every split of every vector, and random/mutated input.

mod http;
mod props;
mod tls;
mod vectors;
