/* The DPDK surface sluice uses. bindgen reads this header; the generated
 * static-inline wrappers (wrap_static_fns) and shim.c include it too. */
#ifndef SLUICE_DPDK_WRAPPER_H
#define SLUICE_DPDK_WRAPPER_H

#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_launch.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_ring.h>
#include <rte_dev.h>
#include <rte_bus.h>

/* Shim for what bindgen cannot see: macros and thread-local variables. */

/* `rte_errno` is a per-lcore (thread-local) variable behind a macro. */
int sluice_rte_errno(void);
/* `RTE_MBUF_DEFAULT_BUF_SIZE` and friends are macros computed from others. */
uint16_t sluice_mbuf_default_buf_size(void);
uint16_t sluice_pktmbuf_headroom(void);
/* `rte_eth_rss_hf` masks used for symmetric RSS on TCP/UDP/IP. */
uint64_t sluice_rss_hf_ip_tcp_udp(void);
/* The id of the calling thread's lcore (`rte_lcore_id()` reads a TLS variable). */
unsigned sluice_lcore_id(void);
/* Stores `len` as both the packet and the data length of a single-segment mbuf. */
void sluice_mbuf_set_len(struct rte_mbuf *m, uint16_t len);

#endif
