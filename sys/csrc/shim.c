/* Shim for macros and thread-locals that bindgen cannot bind. */
#include "wrapper.h"

int sluice_rte_errno(void) { return rte_errno; }

uint16_t sluice_mbuf_default_buf_size(void) { return RTE_MBUF_DEFAULT_BUF_SIZE; }

uint16_t sluice_pktmbuf_headroom(void) { return RTE_PKTMBUF_HEADROOM; }

uint64_t sluice_rss_hf_ip_tcp_udp(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP; }

unsigned sluice_lcore_id(void) { return rte_lcore_id(); }

void sluice_mbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}
