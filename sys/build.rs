//! Build script for `dpdk-sys`.
//!
//! 1. Finds DPDK with `pkg-config libdpdk` (Debian's `libdpdk-dev`, 22.11). Its cflags
//!    (include paths, `-include rte_config.h`, `-march=...`) go to both bindgen and cc, so
//!    the bindings and the C wrappers see the same configuration.
//! 2. Runs bindgen over `csrc/wrapper.h` with an allowlist of what sluice uses (EAL, lcores,
//!    mempool, mbuf, ethdev incl. RSS/RETA and rte_flow, ring) and `wrap_static_fns`, which
//!    emits a C file with an exported wrapper for every `static inline` function (the burst
//!    calls, mbuf alloc/free, ...).
//! 3. Compiles those wrappers and `csrc/shim.c` (macros and thread-locals) with cc.
//!
//! Drivers are not linked: Debian's DPDK is built with shared libraries and loads every PMD
//! from its plugin directory (`RTE_EAL_PMD_PATH`) at `rte_eal_init`, vdevs and NIC drivers
//! alike.
use std::env;
use std::path::PathBuf;
use std::process::Command;

const MIN_VERSION: &str = "22.11";

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    panic!(
        "dpdk-sys: {msg}\n\
         Install DPDK and its headers with `scripts/setup` (Debian: dpdk, libdpdk-dev, \
         pkg-config, clang, libclang-dev), or build without the DPDK backend: \
         `cargo build --no-default-features`."
    );
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => fail(&format!(
            "libdpdk >= {MIN_VERSION} was not found by pkg-config ({e})"
        )),
    };

    let cflags = match Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => fail("`pkg-config --cflags libdpdk` failed"),
    };
    // `-include rte_config.h` is two words; keep pairs together.
    let mut flags: Vec<String> = Vec::new();
    let mut words = cflags.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-include" {
            if let Some(f) = words.next() {
                flags.push(format!("-include{f}"));
            }
        } else {
            flags.push(w.to_string());
        }
    }

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let wrappers = out.join("static_fns");

    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_args(&flags)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_lcore_.*|rte_get_main_lcore|rte_socket_.*|rte_thread_.*")
        .allowlist_function("rte_get_tsc_hz|rte_rdtsc.*|rte_delay_us_block")
        .allowlist_function("rte_mempool_.*|rte_pktmbuf_.*|rte_mbuf_.*")
        .allowlist_function("rte_eth_.*|rte_flow_.*")
        .allowlist_function("rte_ring_.*")
        .allowlist_function("rte_strerror|rte_dev_.*")
        .allowlist_function("sluice_.*")
        .allowlist_type("rte_mbuf|rte_mempool|rte_eth_.*|rte_flow_.*|rte_ring")
        .allowlist_var("RTE_ETH_.*|RTE_MBUF_.*|RTE_MAX_.*|RTE_MEMPOOL_.*|RTE_RING_.*")
        .allowlist_var("SOCKET_ID_ANY|RTE_PKTMBUF_HEADROOM|LCORE_ID_ANY")
        // Bulk dequeue/enqueue of the rings pull in large generic helpers; the ring API we
        // call is the public burst/bulk one.
        .blocklist_function("rte_ring_.*_elem.*|rte_mempool_ops_.*")
        // Protocol headers that rte_flow items embed: sluice parses packets itself (wire/),
        // and some of these are packed structs holding aligned ones, which Rust rejects.
        .opaque_type("rte_arp_hdr|rte_ether_hdr|rte_vlan_hdr|rte_ipv4_hdr|rte_ipv6_hdr")
        .opaque_type("rte_l2tpv2_.*|rte_gtp_.*|rte_ecpri_.*|rte_higig2_.*|rte_mpls_hdr")
        .derive_debug(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on the DPDK headers: {e}")));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));

    let mut build = cc::Build::new();
    build
        .file(wrappers.with_extension("c"))
        .file("csrc/shim.c")
        .include(&manifest_dir)
        .include(manifest_dir.join("csrc"))
        .opt_level(3)
        .warnings(false);
    for inc in &lib.include_paths {
        build.include(inc);
    }
    for f in &flags {
        if !f.starts_with("-I") {
            build.flag(f);
        }
    }
    build.compile("sluice_dpdk_shim");
}
