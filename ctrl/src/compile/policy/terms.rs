//! Stage 1: the ipBlock terms of every policy rule, numbered, and the address classes
//! they carve out of the address space.

use std::collections::{BTreeSet, HashMap};

use super::classes::{Classes, Term};
use super::semantics::{rules, term_of};
use crate::compile::ir::Ir;
use crate::model::netpol::PolicyType;

/// The address classes of the IR's ipBlocks, and the number of each distinct term.
pub(super) fn address_classes(ir: &Ir) -> (Classes, HashMap<Term, u32>) {
    let mut terms: BTreeSet<Term> = BTreeSet::new();
    for p in &ir.policies {
        for t in [PolicyType::Ingress, PolicyType::Egress] {
            for (_, peers) in rules(p, t) {
                for peer in peers {
                    if let Some(term) = peer.ip_block.as_ref().and_then(term_of) {
                        terms.insert(term);
                    }
                }
            }
        }
    }
    let terms: Vec<Term> = terms.into_iter().collect();
    let term_ids: HashMap<Term, u32> = terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    (Classes::build(terms), term_ids)
}
