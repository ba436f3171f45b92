// SPDX-License-Identifier: GPL-2.0
// zlab's ECN marker: RED-style CE marking of a switch egress port's frames as they leave its queue
// (testbed/emulation/ecn.py builds, loads, configures and reads it).
//
// Why two programs: a switch marks a frame on the bytes left in the queue when the frame leaves
// it (HPCC's ShouldSendCN; the packet engine does the same), so the congestion signal travels at
// once. No hook runs between an egress qdisc (htb) and the wire, so:
//  * ecn_phantom, on clsact egress of the switch port, runs before the qdisc and keeps a phantom
//    queue per port: every frame adds its length, and the queue drains at the port's shaped rate
//    (with exact shaping it tracks the qdisc's backlog; the root test checks it against the
//    sampled backlog). It never marks.
//  * ecn_marker, generic XDP on the interface at the cable's other end, sees the frame the moment
//    the qdisc released it, reads the egress port's phantom queue then, and marks on the bytes
//    left behind the frame: probability 0 up to kmin, rising linearly to pmax at kmax, 1 above
//    (testbed/congestion/red.py is the same curve in Python). XDP because it runs before the
//    packet sockets that receive the frame (OVS's, the agents'); a tc ingress program runs after
//    OVS's socket has taken its copy. Only ECT frames are marked; the counters per queue-length
//    bin are what the tests compare with the curve.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NBINS 32

struct port_cfg {
  __u64 rate_bytes_per_s;  // the port's shaped (emulated) rate; 0: the queue never drains (tests)
  __u64 kmin_bytes;
  __u64 kmax_bytes;
  __u64 pmax_ppm;          // marking probability at kmax, in millionths
  __u64 bin_bytes;         // width of a counter bin (queue length behind the frame)
};

struct port_state {
  struct bpf_spin_lock lock;
  __u64 queue_bytes;       // the phantom backlog, as of last_ns
  __u64 last_ns;
  __u64 max_queue_bytes;
};

struct bin_count {
  __u64 frames;            // ECT frames that left with the queue behind them in this bin
  __u64 marked;            // frames the curve chose, left CE-marked
  __u64 unmarkable;        // frames the curve chose that could not be marked (must stay 0)
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);      // ifindex of the switch egress port
  __type(value, struct port_cfg);
} cfg SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, struct port_state);
} state SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);      // ifindex of a switch port at the cable's far end -> the egress port it hears
  __type(value, __u32);
} peers SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u64);      // MAC of a GPU NIC port at the cable's far end -> the egress port it hears.
  __type(value, __u32);    // Why a MAC: each GPU's namespace numbers its interfaces from 2 again, and
} nic_peers SEC(".maps");  // XDP cannot tell namespaces apart; frames reach a NIC addressed to it

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536 * 4);
  __type(key, __u64);      // egress ifindex << 32 | bin
  __type(value, struct bin_count);
} bins SEC(".maps");

// Drain the phantom queue to `now` (caller holds the lock).
static __always_inline void drain(struct port_state *s, const struct port_cfg *c, __u64 now) {
  if (c->rate_bytes_per_s) {
    __u64 dt = now > s->last_ns ? now - s->last_ns : 0;
    if (dt > 1000000000ULL) dt = 1000000000ULL;  // a second idle drains anything the port could hold
    __u64 drained = dt * c->rate_bytes_per_s / 1000000000ULL;
    s->queue_bytes = s->queue_bytes > drained ? s->queue_bytes - drained : 0;
  }
  s->last_ns = now;
}

static __always_inline struct port_state *state_of(__u32 ifindex) {
  struct port_state *s = bpf_map_lookup_elem(&state, &ifindex);
  if (!s) {
    struct port_state fresh = {};
    bpf_map_update_elem(&state, &ifindex, &fresh, BPF_NOEXIST);
    s = bpf_map_lookup_elem(&state, &ifindex);
  }
  return s;
}

SEC("tc")
int ecn_phantom(struct __sk_buff *skb) {
  __u32 ifindex = skb->ifindex;
  struct port_cfg *c = bpf_map_lookup_elem(&cfg, &ifindex);
  if (!c) return TC_ACT_OK;  // not a port this run configured
  struct port_state *s = state_of(ifindex);
  if (!s) return TC_ACT_OK;
  __u64 now = bpf_ktime_get_ns();
  bpf_spin_lock(&s->lock);
  drain(s, c, now);
  s->queue_bytes += skb->len;
  if (s->queue_bytes > s->max_queue_bytes) s->max_queue_bytes = s->queue_bytes;
  bpf_spin_unlock(&s->lock);
  return TC_ACT_OK;
}

// Mark a frame that has just left egress port `port` on the backlog it left behind.
static __always_inline int mark_on_leaving(struct xdp_md *ctx, __u32 port) {
  struct port_cfg *c = bpf_map_lookup_elem(&cfg, &port);
  if (!c) return XDP_PASS;
  void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
  struct ethhdr *eth = data;
  struct iphdr *ip = data + ETH_HLEN;
  if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4) return XDP_PASS;
  if ((ip->tos & 3) == 0) return XDP_PASS;  // Not-ECT
  struct port_state *s = state_of(port);
  if (!s) return XDP_PASS;
  __u64 len = end - data;  // what the egress program added (skb->len: from the Ethernet header)
  __u64 behind, now = bpf_ktime_get_ns();
  bpf_spin_lock(&s->lock);
  drain(s, c, now);
  behind = s->queue_bytes;
  bpf_spin_unlock(&s->lock);
  // The fluid queue still holds the part of this frame it has not drained: the shaper released
  // the frame whole, so what is behind it is the rest.
  behind = behind > len ? behind - len : 0;

  __u64 p_ppm = 0;
  if (behind > c->kmax_bytes) p_ppm = 1000000;
  else if (behind > c->kmin_bytes && c->kmax_bytes > c->kmin_bytes)
    p_ppm = c->pmax_ppm * (behind - c->kmin_bytes) / (c->kmax_bytes - c->kmin_bytes);
  int mark = p_ppm && (p_ppm >= 1000000 || bpf_get_prandom_u32() % 1000000 < p_ppm);
  if (mark && (ip->tos & 3) != 3) {
    // set CE and patch the header checksum (RFC 1624: HC' = ~(~HC + ~m + m'))
    __u16 *word = (__u16 *)ip;  // version/IHL and TOS: the 16-bit word the TOS byte is in
    __u16 old = *word;
    ip->tos |= 3;
    __u32 sum = (__u16)~bpf_ntohs(ip->check) + (__u16)~bpf_ntohs(old) + bpf_ntohs(*word);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip->check = bpf_htons((__u16)~sum);
  }

  __u64 bin = c->bin_bytes ? behind / c->bin_bytes : 0;
  if (bin >= NBINS) bin = NBINS - 1;
  __u64 key = ((__u64)port << 32) | bin;
  struct bin_count *b = bpf_map_lookup_elem(&bins, &key);
  if (!b) {
    struct bin_count zero = {};
    bpf_map_update_elem(&bins, &key, &zero, BPF_NOEXIST);
    b = bpf_map_lookup_elem(&bins, &key);
    if (!b) return XDP_PASS;
  }
  __sync_fetch_and_add(&b->frames, 1);
  if (mark) __sync_fetch_and_add(&b->marked, 1);
  return XDP_PASS;
}


SEC("xdp")
int ecn_marker(struct xdp_md *ctx) {
  __u32 in = ctx->ingress_ifindex;
  __u32 *egress = bpf_map_lookup_elem(&peers, &in);
  return egress ? mark_on_leaving(ctx, *egress) : XDP_PASS;
}

SEC("xdp")
int ecn_marker_nic(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > end) return XDP_PASS;
  __u64 mac = 0;
  __builtin_memcpy(&mac, eth->h_dest, ETH_ALEN);
  __u32 *egress = bpf_map_lookup_elem(&nic_peers, &mac);
  return egress ? mark_on_leaving(ctx, *egress) : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
