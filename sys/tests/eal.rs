//! EAL smoke test: one EAL per process, so this file holds exactly one test.
//!
//! Brings up the EAL without hugepages or PCI, with one `net_null` vdev whose PMD is loaded
//! at run time from DPDK's plugin directory, allocates and frees mbufs through the
//! `static inline` wrappers and checks the mempool is whole again.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::raw::c_char;

#[test]
fn eal_init_vdev_and_mbuf_round_trip() {
    let args = [
        "dpdk-sys-test",
        "--no-huge",
        "--no-pci",
        "--no-shconf",
        "-m",
        "256",
        "-l",
        "0",
        "--log-level",
        "lib.eal:error",
        "--vdev",
        "net_null0",
    ];
    let owned: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    // SAFETY: argv points at NUL-terminated strings that outlive the call; EAL is
    // initialised once in this process (this is the only test in the binary).
    let rc = unsafe { dpdk_sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
    // SAFETY: plain thread-local read through the shim.
    assert!(rc >= 0, "rte_eal_init failed: errno {}", unsafe {
        dpdk_sys::sluice_rte_errno()
    });
    // SAFETY: EAL is initialised.
    let ports = unsafe { dpdk_sys::rte_eth_dev_count_avail() };
    assert_eq!(
        ports, 1,
        "the net_null PMD was loaded from the plugin directory"
    );

    let name = CString::new("t_pool").unwrap();
    // SAFETY: EAL is initialised; name is NUL-terminated.
    let pool = unsafe {
        dpdk_sys::rte_pktmbuf_pool_create(
            name.as_ptr(),
            1023,
            0,
            0,
            dpdk_sys::sluice_mbuf_default_buf_size(),
            0,
        )
    };
    assert!(!pool.is_null());
    let mut bufs = [std::ptr::null_mut(); 32];
    // SAFETY: pool is a valid pktmbuf pool; bufs holds 32 slots.
    let rc = unsafe { dpdk_sys::rte_pktmbuf_alloc_bulk(pool, bufs.as_mut_ptr(), 32) };
    assert_eq!(rc, 0);
    // SAFETY: pool is valid.
    assert_eq!(unsafe { dpdk_sys::rte_mempool_in_use_count(pool) }, 32);
    for m in bufs {
        // SAFETY: each mbuf was allocated above and is freed once.
        unsafe { dpdk_sys::rte_pktmbuf_free(m) };
    }
    // SAFETY: pool is valid.
    assert_eq!(unsafe { dpdk_sys::rte_mempool_in_use_count(pool) }, 0);
    // SAFETY: no mbuf of the pool is in use; EAL is torn down once.
    unsafe {
        dpdk_sys::rte_mempool_free(pool);
        dpdk_sys::rte_eal_cleanup();
    }
}
