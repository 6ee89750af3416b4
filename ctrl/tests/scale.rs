//! Scale: 5,000 generated listeners and routes compile, and the binding work grows
//! linearly. Nothing here is timed (the suite has no timed assertions): the IR build
//! counts the (listener, route) pairs it examines, and that count is bounded by a
//! multiple of the number of routes, where a scan of every route per listener would
//! examine `n * n` pairs.

use sluice_ctrl::compile::build_ir_with_stats;
use sluice_ctrl::compile::ir::RouteKind;
use sluice_ctrl::compile::{build as compile_loaded, diagnostics};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_ctrl::synth::{manifests, Shape, FIRST_PORT};

fn load(text: &str) -> Loaded {
    let mut loaded = Loaded::default();
    load_str("synth.yaml", text, &mut loaded);
    loaded
}

/// Compiles `n` routes of `shape`; checks every listener is bound to its own route and
/// returns the binding work.
fn compile_and_check(shape: Shape, n: usize) -> usize {
    let text = manifests(shape, n, 1021);
    let c = compile_loaded(load(&text));
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .take(5)
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{}: {errors:?}", shape.name());
    assert_eq!(
        diagnostics(&c).iter().filter(|d| !d.is_error()).count(),
        0,
        "{}",
        shape.name()
    );
    let built = c.expect("compiles");
    let ir = &built.ir;
    assert_eq!(ir.listeners.len(), n, "{}", shape.name());
    assert_eq!(ir.routes.len(), n, "{}", shape.name());
    // Objects are built in precedence order (namespace/name: g10 before g2): by port.
    let mut listeners: Vec<_> = ir.listeners.iter().collect();
    listeners.sort_by_key(|l| l.port);
    for (i, l) in listeners.into_iter().enumerate() {
        assert_eq!(usize::from(l.port), FIRST_PORT + i, "{}", l.name);
        assert_eq!(l.bindings.len(), 1, "{}", l.name);
        assert_eq!(l.bindings[0].host, "*", "{}", l.name);
        let r = &ir.routes[l.bindings[0].route];
        assert_eq!(r.kind, RouteKind::Tcp);
        assert!(
            r.name.contains(&format!(
                "/{}{i}",
                if shape == Shape::Istio { "v" } else { "r" }
            )),
            "{} -> {}",
            l.name,
            r.name
        );
        assert_eq!(r.maglev_table_size, 1021);
    }
    let (_, stats) = build_ir_with_stats(&built.items, &Default::default(), &mut Vec::new());
    stats.candidates
}

#[test]
fn five_thousand_routes_on_one_gateway_compile_with_linear_binding_work() {
    let n = 5_000;
    let work = compile_and_check(Shape::OneGateway, n);
    // One candidate per listener: the route naming it by sectionName.
    assert_eq!(work, n);
}

#[test]
fn every_shape_binds_each_route_once() {
    let n = 300;
    for shape in Shape::ALL {
        let work = compile_and_check(shape, n);
        assert_eq!(work, n, "{}", shape.name());
    }
}
