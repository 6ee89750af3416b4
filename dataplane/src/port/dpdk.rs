//! DPDK ethdev ports: any PMD, by PCI address or vdev devargs.
//!
//! - [`init`] brings up the EAL once per process (DPDK allows no second one). PMDs are
//!   loaded by the EAL from DPDK's plugin directory, so vdevs (`net_ring`, `net_null`,
//!   `net_tap`, `net_af_packet`, `net_pcap`) and NIC drivers work alike.
//! - One mbuf mempool per NUMA socket, created on first use.
//! - [`open`] probes the device (hotplug for devargs not given to the EAL), configures
//!   `queues` rx/tx queue pairs; with more than one queue it enables RSS with the symmetric
//!   key (`0x6d5a` repeated, so both directions of a flow reach one queue) and programs the
//!   RETA round-robin over the queues.
//! - Worker threads call [`register_thread`] so per-lcore mempool caches work for them.

use super::{Burst, LinkState, Opened, Pkt, Port, PortError, PortStats, Queue};
use crate::wire::MacAddr;
use core::ptr::NonNull;
use dpdk_sys as sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

/// Descriptors per rx and tx queue (adjusted to what the device accepts).
const RING_DESC: u16 = 1024;
/// Mbufs per socket pool (2^n - 1 suits the ring-based mempool).
const POOL_MBUFS: u32 = 16383;
/// Per-lcore mempool cache.
const POOL_CACHE: u32 = 256;

/// The EAL of this process.
#[derive(Debug)]
pub struct Eal {
    pools: Mutex<HashMap<i32, usize>>,
}

/// Why the EAL did not start (kept by the first [`init`] and returned to every later one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EalError {
    /// An argument holds a NUL byte.
    #[error("EAL argument {0:?} holds NUL")]
    Nul(String),
    /// `rte_eal_init` failed.
    #[error("rte_eal_init({args}) failed: {why}")]
    Init {
        /// The arguments, joined by spaces.
        args: String,
        /// DPDK's reason.
        why: String,
    },
}

static EAL: OnceLock<Result<Eal, EalError>> = OnceLock::new();

fn errno_str(rc: i32) -> String {
    let e = if rc < 0 { -rc } else { rc };
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated
    // string.
    let s = unsafe { CStr::from_ptr(sys::rte_strerror(e)) };
    format!("{} (errno {e})", s.to_string_lossy())
}

fn rte_errno() -> i32 {
    // SAFETY: reads the calling thread's rte_errno through the shim.
    unsafe { sys::sluice_rte_errno() }
}

/// Initialises the EAL with `args` (without the program name). The first call decides;
/// later calls return the same EAL (or the same error) whatever their arguments.
pub fn init(args: &[String]) -> Result<&'static Eal, PortError> {
    let r = EAL.get_or_init(|| {
        let mut owned: Vec<CString> = vec![CString::new("sluice").unwrap_or_default()];
        for a in args {
            owned.push(CString::new(a.as_str()).map_err(|_| EalError::Nul(a.clone()))?);
        }
        // The EAL keeps pointers into argv: the strings live as long as the process.
        let owned: &'static [CString] = Box::leak(owned.into_boxed_slice());
        let argv: &'static mut [*mut c_char] = Box::leak(
            owned
                .iter()
                .map(|c| c.as_ptr().cast_mut())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        // SAFETY: argv holds argc valid NUL-terminated strings that live forever; the
        // OnceLock makes this the only rte_eal_init call of the process.
        let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(EalError::Init {
                args: args.join(" "),
                why: errno_str(rte_errno()),
            });
        }
        Ok(Eal {
            pools: Mutex::new(HashMap::new()),
        })
    });
    r.as_ref().map_err(|e| PortError::Dpdk(e.to_string()))
}

/// The EAL, if [`init`] succeeded.
pub fn eal() -> Option<&'static Eal> {
    EAL.get().and_then(|r| r.as_ref().ok())
}

impl Eal {
    fn pool(&self, socket: i32) -> Result<*mut sys::rte_mempool, PortError> {
        let mut pools = self
            .pools
            .lock()
            .map_err(|_| PortError::Dpdk("pool lock".into()))?;
        if let Some(&p) = pools.get(&socket) {
            return Ok(p as *mut sys::rte_mempool);
        }
        let name = CString::new(format!("sl_mbuf_{}", socket.max(0)))
            .map_err(|_| PortError::Dpdk("pool name".into()))?;
        // SAFETY: EAL is initialised; name is NUL-terminated and copied by DPDK.
        let p = unsafe {
            sys::rte_pktmbuf_pool_create(
                name.as_ptr(),
                POOL_MBUFS,
                POOL_CACHE,
                0,
                sys::sluice_mbuf_default_buf_size(),
                socket,
            )
        };
        if p.is_null() {
            return Err(PortError::Dpdk(format!(
                "mbuf pool on socket {socket}: {} (is there enough memory? try -m)",
                errno_str(rte_errno())
            )));
        }
        pools.insert(socket, p as usize);
        Ok(p)
    }

    /// Mbufs currently allocated from sluice's pools (rx rings included).
    pub fn mbufs_in_use(&self) -> u64 {
        let Ok(pools) = self.pools.lock() else {
            return 0;
        };
        let mut n = 0u64;
        for &p in pools.values() {
            // SAFETY: every stored pointer is a live mempool (pools are never freed).
            n += u64::from(unsafe { sys::rte_mempool_in_use_count(p as *const sys::rte_mempool) });
        }
        n
    }
}

/// A registration of the calling (non-EAL) thread as an lcore; unregisters on drop.
#[derive(Debug)]
pub struct LcoreGuard {
    lcore: u32,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl LcoreGuard {
    /// The lcore id DPDK gave this thread.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }
}

impl Drop for LcoreGuard {
    fn drop(&mut self) {
        // SAFETY: this thread registered itself in `register_thread`.
        unsafe { sys::rte_thread_unregister() };
    }
}

/// Registers the calling thread with DPDK (`rte_thread_register`) so it gets an lcore id
/// and mempool caches. `None` if the EAL is not initialised or no lcore id is free.
pub fn register_thread() -> Option<LcoreGuard> {
    eal()?;
    // SAFETY: EAL is initialised; registering a non-EAL thread is allowed once per thread.
    if unsafe { sys::rte_thread_register() } != 0 {
        return None;
    }
    Some(LcoreGuard {
        // SAFETY: reads the thread-local lcore id through the shim.
        lcore: unsafe { sys::sluice_lcore_id() },
        _not_send: core::marker::PhantomData,
    })
}

struct DpdkDev {
    name: String,
    port_id: u16,
    mac: MacAddr,
    queues: u16,
    /// For a vdev, its device name: closing removes the device too, so the same devargs
    /// can be opened again later in the process.
    vdev: Option<CString>,
}

impl Drop for DpdkDev {
    fn drop(&mut self) {
        // SAFETY: the port was started by `open`; every queue handle is gone (they hold
        // this Arc), so nothing polls it any more. The bus and device names are
        // NUL-terminated.
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
            if let Some(name) = &self.vdev {
                sys::rte_eal_hotplug_remove(c"vdev".as_ptr(), name.as_ptr());
            }
        }
    }
}

impl Port for DpdkDev {
    fn name(&self) -> &str {
        &self.name
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn link(&self) -> LinkState {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: valid port id; `link` is a writable rte_eth_link.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        if rc == 0 && u32::from(link.link_status()) == sys::RTE_ETH_LINK_UP {
            LinkState::Up {
                speed_mbps: link.link_speed,
            }
        } else {
            LinkState::Down
        }
    }
    fn stats(&self) -> PortStats {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid port id; `s` is a writable rte_eth_stats.
        if unsafe { sys::rte_eth_stats_get(self.port_id, &mut s) } != 0 {
            return PortStats::default();
        }
        PortStats {
            rx_packets: s.ipackets,
            rx_bytes: s.ibytes,
            tx_packets: s.opackets,
            tx_bytes: s.obytes,
            rx_missed: s.imissed + s.rx_nombuf,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
        }
    }
}

struct DpdkQueue {
    dev: Arc<DpdkDev>,
    qid: u16,
    pool: *mut sys::rte_mempool,
    discarded: AtomicU64,
}

impl DpdkQueue {
    /// Replaces every non-mbuf packet of the burst by an mbuf copy of it (packets from
    /// TAP, pcap or memory ports sent on a DPDK port). A packet that cannot be copied (no
    /// mbuf free) is dropped and counted.
    #[cold]
    fn copy_foreign(&mut self, pkts: &mut Burst) {
        let mut out = Burst::new();
        for p in pkts.drain() {
            let p = match p.into_mbuf() {
                // SAFETY: we owned it as a packet a moment ago.
                Ok(m) => unsafe { Pkt::from_mbuf(m) },
                Err(p) => {
                    // SAFETY: pool is a live pktmbuf pool.
                    let m = unsafe { sys::rte_pktmbuf_alloc(self.pool) };
                    let Some(m) = NonNull::new(m) else {
                        self.discarded.fetch_add(1, Relaxed);
                        continue;
                    };
                    // SAFETY: freshly allocated, owned, single-segment mbuf.
                    let mut q = unsafe { Pkt::from_mbuf(m) };
                    if !q.copy_from(p.data()) {
                        self.discarded.fetch_add(1, Relaxed);
                        continue;
                    }
                    q
                }
            };
            let _ = out.push(p);
        }
        for p in out.drain() {
            let _ = pkts.push(p);
        }
    }
}

// SAFETY: the queue is polled by one thread at a time (it moves to its worker once); the
// mempool pointer refers to a thread-safe DPDK mempool that lives for the process.
unsafe impl Send for DpdkQueue {}

/// Allocates mbufs from one of sluice's mempools (a worker's [`super::Allocator`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MbufAlloc {
    pool: *mut sys::rte_mempool,
}

// SAFETY: the pointer refers to a DPDK pktmbuf mempool, which is thread-safe and lives for
// the process (sluice never frees its pools).
unsafe impl Send for MbufAlloc {}
// SAFETY: as above; allocation only reads the pointer.
unsafe impl Sync for MbufAlloc {}

impl MbufAlloc {
    /// An empty mbuf (data_len 0, default headroom), or `None` if the pool is empty.
    #[inline]
    pub(crate) fn alloc(&self) -> Option<Pkt> {
        // SAFETY: pool is a live pktmbuf pool; the result is null or an owned mbuf.
        let m = unsafe { sys::rte_pktmbuf_alloc(self.pool) };
        // SAFETY: a freshly allocated, exclusively owned, single-segment mbuf.
        NonNull::new(m).map(|m| unsafe { Pkt::from_mbuf(m) })
    }
}

impl Queue for DpdkQueue {
    fn allocator(&self) -> Option<super::Allocator> {
        Some(super::Allocator::mbuf(MbufAlloc { pool: self.pool }))
    }

    #[inline]
    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        self.rx_burst_counted(out).0
    }

    #[inline]
    fn rx_burst_counted(&mut self, out: &mut Burst) -> (usize, u64) {
        let before = out.len();
        let (port, qid) = (self.dev.port_id, self.qid);
        let (mut bytes, mut chained) = (0u64, false);
        // SAFETY: the closure hands the PMD `room` free slots of the burst; the PMD writes
        // that many owned mbuf pointers at most and says how many, and the closure reads
        // only those `n` (valid mbufs the PMD just filled in).
        let n = unsafe {
            out.fill_mbufs(|slots, room| {
                let n = sys::rte_eth_rx_burst(port, qid, slots, room);
                // One pass over the new mbufs: the bytes of the single-segment ones (the
                // rest are dropped below), and whether any is chained.
                for i in 0..usize::from(n) {
                    let m = &**slots.add(i);
                    let single = m.nb_segs == 1;
                    bytes += u64::from(m.pkt_len) * u64::from(single);
                    chained |= !single;
                }
                n
            })
        };
        if !chained {
            return (n, bytes);
        }
        // Scatter is not enabled, so a chained mbuf means a misbehaving PMD: never parse
        // past the first segment. Dropping the packet frees the whole chain.
        let mut i = before;
        let mut kept = n;
        while i < out.len() {
            if out.as_slice()[i].segments() > 1 {
                drop(out.remove(i));
                self.discarded.fetch_add(1, Relaxed);
                kept -= 1;
            } else {
                i += 1;
            }
        }
        (kept, bytes)
    }

    #[inline]
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        self.tx_burst_counted(pkts).0
    }

    #[inline]
    fn tx_burst_counted(&mut self, pkts: &mut Burst) -> (usize, u64) {
        if pkts.is_empty() {
            return (0, 0);
        }
        let (arr, bytes) = match pkts.as_mbuf_array() {
            Some(a) => a,
            None => {
                self.copy_foreign(pkts);
                match pkts.as_mbuf_array() {
                    Some(a) => a,
                    None => return (0, 0),
                }
            }
        };
        // SAFETY: `arr` holds pkts.len() owned mbufs whose headers carry offset and length;
        // the port and queue are valid and owned by this handle.
        let sent =
            unsafe { sys::rte_eth_tx_burst(self.dev.port_id, self.qid, arr, pkts.len() as u16) };
        // The PMD owns the first `sent` now; the rest stay for the caller to free.
        pkts.release_front(usize::from(sent));
        let unsent: u64 = pkts.as_slice().iter().map(|p| p.len() as u64).sum();
        (usize::from(sent), bytes - unsent)
    }

    fn discarded(&self) -> u64 {
        self.discarded.load(Relaxed)
    }
}

fn port_by_name(name: &str) -> Option<u16> {
    let c = CString::new(name).ok()?;
    let mut pid = 0u16;
    // SAFETY: EAL is initialised; c is NUL-terminated; pid is writable.
    let rc = unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut pid) };
    (rc == 0).then_some(pid)
}

fn check(rc: i32, what: impl FnOnce() -> String) -> Result<(), PortError> {
    if rc < 0 {
        Err(PortError::Dpdk(format!("{}: {}", what(), errno_str(rc))))
    } else {
        Ok(())
    }
}

/// Opens a DPDK port with `queues` queue pairs. The EAL must be initialised ([`init`]).
pub fn open(name: &str, devargs: &str, queues: u16) -> Result<Opened, PortError> {
    let eal = eal().ok_or_else(|| PortError::Dpdk("the EAL is not initialised".into()))?;
    let queues = queues.max(1);
    let dev_name = devargs.split(',').next().unwrap_or(devargs).trim();
    let port_id = match port_by_name(dev_name) {
        Some(p) => p,
        None => {
            let c =
                CString::new(devargs).map_err(|_| PortError::Config("devargs hold NUL".into()))?;
            // SAFETY: EAL is initialised; devargs is NUL-terminated.
            let rc = unsafe { sys::rte_dev_probe(c.as_ptr()) };
            check(rc, || format!("port {name}: probe {devargs:?}"))?;
            port_by_name(dev_name).ok_or_else(|| {
                PortError::Dpdk(format!(
                    "port {name}: {dev_name} probed but no ethdev appeared"
                ))
            })?
        }
    };

    let mut info = sys::rte_eth_dev_info::default();
    // SAFETY: valid port id; info is writable.
    let rc = unsafe { sys::rte_eth_dev_info_get(port_id, &mut info) };
    check(rc, || format!("port {name}: dev_info"))?;
    if queues > info.max_rx_queues || queues > info.max_tx_queues {
        return Err(PortError::Config(format!(
            "port {name}: {queues} queues asked, the device has {} rx / {} tx",
            info.max_rx_queues, info.max_tx_queues
        )));
    }
    // SAFETY: valid port id.
    let socket = unsafe { sys::rte_eth_dev_socket_id(port_id) };
    let pool = eal.pool(socket.max(0))?;

    let key_len = if info.hash_key_size == 0 {
        40
    } else {
        info.hash_key_size
    };
    let mut key: Vec<u8> = (0..usize::from(key_len))
        .map(|i| if i % 2 == 0 { 0x6d } else { 0x5a })
        .collect();
    let mut conf = sys::rte_eth_conf::default();
    if queues > 1 {
        conf.rxmode.mq_mode = sys::RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
        conf.rx_adv_conf.rss_conf.rss_key_len = key_len;
        // SAFETY: plain function returning a constant mask.
        conf.rx_adv_conf.rss_conf.rss_hf =
            unsafe { sys::sluice_rss_hf_ip_tcp_udp() } & info.flow_type_rss_offloads;
    }
    // SAFETY: valid, stopped port; conf (and the key it points to) live across the call,
    // which copies them.
    let rc = unsafe { sys::rte_eth_dev_configure(port_id, queues, queues, &conf) };
    check(rc, || format!("port {name}: configure {queues} queues"))?;
    drop(key);
    let (mut nrx, mut ntx) = (RING_DESC, RING_DESC);
    // SAFETY: valid port; both are writable.
    let rc = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nrx, &mut ntx) };
    check(rc, || format!("port {name}: descriptor counts"))?;
    for q in 0..queues {
        let sock = socket.max(0) as u32;
        // SAFETY: configured port; pool is a live pktmbuf pool; null conf = defaults.
        let rc =
            unsafe { sys::rte_eth_rx_queue_setup(port_id, q, nrx, sock, core::ptr::null(), pool) };
        check(rc, || format!("port {name}: rx queue {q}"))?;
        // SAFETY: configured port; null conf = defaults.
        let rc = unsafe { sys::rte_eth_tx_queue_setup(port_id, q, ntx, sock, core::ptr::null()) };
        check(rc, || format!("port {name}: tx queue {q}"))?;
    }
    let mut mac = sys::rte_ether_addr::default();
    // SAFETY: valid port; mac is writable.
    unsafe { sys::rte_eth_macaddr_get(port_id, &mut mac) };
    // SAFETY: configured port with every queue set up.
    let rc = unsafe { sys::rte_eth_dev_start(port_id) };
    check(rc, || format!("port {name}: start"))?;
    let dev = Arc::new(DpdkDev {
        name: name.to_string(),
        port_id,
        mac: MacAddr(mac.addr_bytes),
        queues,
        vdev: dev_name
            .starts_with("net_")
            .then(|| CString::new(dev_name).ok())
            .flatten(),
    });
    // Not every PMD supports promiscuous mode; sluice answers for its own MAC anyway.
    // SAFETY: started port.
    let _ = unsafe { sys::rte_eth_promiscuous_enable(port_id) };
    if queues > 1 && info.reta_size > 0 {
        program_reta(port_id, info.reta_size, queues)
            .map_err(|e| PortError::Dpdk(format!("port {name}: {e}")))?;
    }
    let queues_v = (0..queues)
        .map(|qid| {
            Box::new(DpdkQueue {
                dev: dev.clone(),
                qid,
                pool,
                discarded: AtomicU64::new(0),
            }) as Box<dyn Queue>
        })
        .collect();
    Ok(Opened {
        port: dev as Arc<dyn Port>,
        queues: queues_v,
    })
}

/// Spreads the redirection table round-robin over `queues`.
fn program_reta(port_id: u16, reta_size: u16, queues: u16) -> Result<(), PortError> {
    let groups = usize::from(reta_size).div_ceil(sys::RTE_ETH_RSS_RETA_SIZE_64 as usize);
    let mut conf = vec![sys::rte_eth_rss_reta_entry64::default(); groups];
    for i in 0..usize::from(reta_size) {
        let g = &mut conf[i / 64];
        g.mask |= 1u64 << (i % 64);
        g.reta[i % 64] = (i % usize::from(queues)) as u16;
    }
    // SAFETY: started port; conf holds reta_size/64 entries as the API requires.
    let rc = unsafe { sys::rte_eth_dev_rss_reta_update(port_id, conf.as_mut_ptr(), reta_size) };
    if rc < 0 && rc != -libc::ENOTSUP {
        return Err(PortError::Dpdk(format!("RETA update: {}", errno_str(rc))));
    }
    Ok(())
}
