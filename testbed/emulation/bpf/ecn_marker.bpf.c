// SPDX-License-Identifier: GPL-2.0
// zlab's ECN marker: RED-style CE marking at a switch egress port, in a tc program on clsact
// egress (testbed/emulation/ecn.py builds, loads, configures and reads it).
//
// Why a phantom queue: clsact egress runs before the port's qdisc (htb), so the program cannot
// read the real backlog. It keeps, per port, a virtual queue that every frame adds its length to
// and that drains at the port's shaped rate; with exact shaping it tracks the qdisc's backlog
// (the root test checks it against the sampled backlog). The frame is marked on the bytes ahead
// of it, as a switch marking on enqueue would: probability 0 up to kmin, rising linearly to pmax
// at kmax, 1 above (testbed/congestion/red.py is the same curve in Python). Only ECT frames are
// marked (bpf_skb_ecn_set_ce leaves Not-ECT alone); the counters per queue-length bin are what the
// tests compare with the curve.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NBINS 32

struct port_cfg {
  __u64 rate_bytes_per_s;  // the port's shaped (emulated) rate; 0: the queue never drains (tests)
  __u64 kmin_bytes;
  __u64 kmax_bytes;
  __u64 pmax_ppm;          // marking probability at kmax, in millionths
  __u64 bin_bytes;         // width of a counter bin (queue length ahead of the frame)
};

struct port_state {
  struct bpf_spin_lock lock;
  __u64 queue_bytes;       // the phantom backlog after the last frame
  __u64 last_ns;
  __u64 max_queue_bytes;
};

struct bin_count {
  __u64 frames;            // ECT frames seen with the queue ahead in this bin
  __u64 marked;            // frames the curve chose that left CE-marked
  __u64 unmarkable;        // frames the curve chose that the kernel could not mark (must stay 0)
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);      // ifindex
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
  __uint(max_entries, 65536 * 4);
  __type(key, __u64);      // ifindex << 32 | bin
  __type(value, struct bin_count);
} bins SEC(".maps");

SEC("tc")
int ecn_marker(struct __sk_buff *skb) {
  __u32 ifindex = skb->ifindex;
  struct port_cfg *c = bpf_map_lookup_elem(&cfg, &ifindex);
  if (!c) return TC_ACT_OK;  // not a port this run configured
  struct port_state *s = bpf_map_lookup_elem(&state, &ifindex);
  if (!s) {
    struct port_state fresh = {};
    bpf_map_update_elem(&state, &ifindex, &fresh, BPF_NOEXIST);
    s = bpf_map_lookup_elem(&state, &ifindex);
    if (!s) return TC_ACT_OK;
  }
  __u64 now = bpf_ktime_get_ns();
  __u64 ahead;
  bpf_spin_lock(&s->lock);
  if (c->rate_bytes_per_s) {
    __u64 dt = now > s->last_ns ? now - s->last_ns : 0;
    if (dt > 1000000000ULL) dt = 1000000000ULL;  // a second idle drains anything the port could hold
    __u64 drained = dt * c->rate_bytes_per_s / 1000000000ULL;
    s->queue_bytes = s->queue_bytes > drained ? s->queue_bytes - drained : 0;
  }
  s->last_ns = now;
  ahead = s->queue_bytes;
  s->queue_bytes += skb->len;
  if (s->queue_bytes > s->max_queue_bytes) s->max_queue_bytes = s->queue_bytes;
  bpf_spin_unlock(&s->lock);

  if (skb->protocol != bpf_htons(ETH_P_IP)) return TC_ACT_OK;
  __u8 tos;
  if (bpf_skb_load_bytes(skb, ETH_HLEN + 1, &tos, 1) < 0 || (tos & 3) == 0) return TC_ACT_OK;  // Not-ECT

  __u64 p_ppm = 0;
  if (ahead > c->kmax_bytes) p_ppm = 1000000;
  else if (ahead > c->kmin_bytes && c->kmax_bytes > c->kmin_bytes)
    p_ppm = c->pmax_ppm * (ahead - c->kmin_bytes) / (c->kmax_bytes - c->kmin_bytes);
  int mark = p_ppm && (p_ppm >= 1000000 || bpf_get_prandom_u32() % 1000000 < p_ppm);
  int failed = 0;
  if (mark) {
    // a frame from a packet socket's ring (OVS userspace sends that way) may hold only its
    // Ethernet header in the linear part; the helper then cannot reach the IP header and does
    // nothing, so pull the IP header in first
    bpf_skb_pull_data(skb, ETH_HLEN + 20);
    if (bpf_skb_ecn_set_ce(skb) != 1) { mark = 0; failed = 1; }
  }

  __u64 bin = c->bin_bytes ? ahead / c->bin_bytes : 0;
  if (bin >= NBINS) bin = NBINS - 1;
  __u64 key = ((__u64)ifindex << 32) | bin;
  struct bin_count *b = bpf_map_lookup_elem(&bins, &key);
  if (!b) {
    struct bin_count zero = {};
    bpf_map_update_elem(&bins, &key, &zero, BPF_NOEXIST);
    b = bpf_map_lookup_elem(&bins, &key);
    if (!b) return TC_ACT_OK;
  }
  __sync_fetch_and_add(&b->frames, 1);
  if (mark) __sync_fetch_and_add(&b->marked, 1);
  if (failed) __sync_fetch_and_add(&b->unmarkable, 1);
  return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
