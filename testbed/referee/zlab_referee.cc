// zlab-referee: replays one zlab run (fabric, flow entries, QPs, message schedule) in ns-3.
//
// Why a second implementation: the emulation's numbers come from OVS, htb and a Python agent on
// a shared 2-core machine. This program shares none of that: ns-3's point-to-point devices
// serialise frames and hold drop-tail queues, the switches apply the same OpenFlow entries the
// controller installs (highest priority among ipv4_dst/mask + masked udp_src matches), and the
// endpoints re-implement the transport's rules (RC WRITE, go-back-N, window, AckReq, coalesced
// ACKs, one NAK per gap, RFC 6298 timeout with the agent's floor) from their description, not
// from zlab's code. The input is a plain text file written by testbed/referee/scenario.py.
//
// Input lines (all units in the names: ns, bytes, bit/s):
//   param <name> <value>
//   node <id> <name> <gpu|switch>
//   port <id> <node> <number> <name> <ip_u32> <rate_bps> <queue_pkts>
//   link <port_a> <port_b>
//   entry <node> <priority> <dst_u32> <mask_u32> <udp_value> <udp_mask> <out_port_number>
//   qp <qp_id> <src_port_id> <dst_port_id> <udp_sport>
//   msg <msg_id> <qp_id> <t_due_ns> <size_bytes>
// Outputs in the output folder: messages.csv, ports.csv, queue_samples.csv, summary.txt; with the
// congestion machinery on (params ecn_enabled, pfc_enabled, cc; testbed/congestion/params.py) also
// pfc.csv (t_ns,port,peer_port,event,cause_port: 1 PAUSE sent by a switch ingress port to its peer,
// 0 RESUME; cause_port, on a PAUSE, is the egress port of the same switch holding most of the bytes
// that came in through that ingress port: where the congestion it reacts to sits),
// rates.csv (t_ns,qp,rate_bps at every DCQCN rate change), cnp.csv (t_ns,qp: CNPs the senders took)
// and, with ecn_trace 1, ecn.csv (t_ns,port,queue_bytes,marked for every ECT frame a switch sent).

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ns3;

// ---- wire format --------------------------------------------------------------------------
// The fields the endpoints and switches read; the packet is padded so that, with the 2-byte PPP
// header ns-3 adds, it is exactly as long on the wire as the emulation's Ethernet frame.
enum Op : uint8_t { DATA = 0, ACK = 1, NAK = 2, CNP = 3 };
enum Ecn : uint8_t { NOT_ECT = 0, ECT0 = 2, CE = 3 };  // the IP header's two ECN bits (RFC 3168)

class ZHeader : public Header {
 public:
  uint32_t src_ip = 0, dst_ip = 0, qp = 0;
  uint16_t sport = 0;
  uint8_t op = DATA, ackreq = 0, hops = 0;  // hops: switches crossed so far
  uint8_t ecn = NOT_ECT;
  uint64_t psn = 0;

  static TypeId GetTypeId() {
    static TypeId tid = TypeId("zlab::ZHeader").SetParent<Header>().AddConstructor<ZHeader>();
    return tid;
  }
  TypeId GetInstanceTypeId() const override { return GetTypeId(); }
  uint32_t GetSerializedSize() const override { return 4 + 4 + 4 + 2 + 1 + 1 + 1 + 1 + 8; }
  void Serialize(Buffer::Iterator i) const override {
    i.WriteHtonU32(src_ip); i.WriteHtonU32(dst_ip); i.WriteHtonU32(qp); i.WriteHtonU16(sport);
    i.WriteU8(op); i.WriteU8(ackreq); i.WriteU8(hops); i.WriteU8(ecn); i.WriteHtonU64(psn);
  }
  uint32_t Deserialize(Buffer::Iterator i) override {
    src_ip = i.ReadNtohU32(); dst_ip = i.ReadNtohU32(); qp = i.ReadNtohU32(); sport = i.ReadNtohU16();
    op = i.ReadU8(); ackreq = i.ReadU8(); hops = i.ReadU8(); ecn = i.ReadU8(); psn = i.ReadNtohU64();
    return GetSerializedSize();
  }
  void Print(std::ostream& os) const override { os << "qp=" << qp << " psn=" << psn << " op=" << int(op); }
};

static const uint32_t PPP_HEADER_BYTES = 2;

// ---- parameters ---------------------------------------------------------------------------
struct Params {
  uint64_t payload_per_packet = 4096;  // bytes of message data per packet
  uint64_t frame_overhead_bytes = 58;  // Ethernet + IPv4 + UDP + BTH + ICRC
  uint64_t reth_bytes = 16;            // on a message's first packet
  uint64_t ack_frame_bytes = 62;
  uint64_t window_pkts = 64;
  uint64_t ackreq_every = 16;
  uint64_t ack_coalesce = 16;
  uint64_t rto_floor_ns = 200000000;   // the agent's RTO floor (also 4 windows at line rate)
  uint64_t rto_max_ns = 2000000000;
  uint64_t hop_delay_ns = 0;
  uint64_t sample_period_ns = 10000000;
  uint64_t deadline_ns = 0;            // stop here even if messages are pending
  uint64_t debug_no_pacing = 0;        // 1: a deliberately broken NIC without its pacer (oracle tests)
  // link model: 0 = ns-3's serialising point-to-point link (store and forward at the line rate);
  // 1 = the emulation's: a drop-tail queue, then an htb-like token bucket of bucket_bytes (tokens
  // refill at the line rate; a frame leaves whenever the bucket is not negative and is charged its
  // length), then a wire with no serialisation (the device runs 1000x faster), as a veth shaped by
  // htb with a one-frame burst.
  uint64_t link_model = 0;
  uint64_t bucket_bytes = 0;
  // RoCE congestion machinery (testbed/congestion/params.py ns3_params: names, defaults, sources).
  // Defaults here are "off": a scenario without these params replays exactly as before.
  uint64_t cc = 0;                       // 0 none (the window only), 1 dcqcn
  uint64_t window_bytes = 0;             // > 0 replaces window_pkts
  uint64_t ecn_enabled = 0;
  uint64_t ecn_kmin_bytes_per_25g = 100000, ecn_kmax_bytes_per_25g = 400000, ecn_pmax_ppm = 200000;
  uint64_t pfc_enabled = 0;
  uint64_t buffer_bytes = 33554432, pfc_reserve_bytes = 4096, pfc_resume_offset_bytes = 3072;
  uint64_t pfc_alpha_inv = 8, pfc_headroom_factor = 3;
  uint64_t link_delay_ns = 0, switch_latency_ns = 0;
  uint64_t dcqcn_g_inv = 256, dcqcn_alpha_update_ns = 1000, dcqcn_rate_decrease_ns = 4000;
  uint64_t dcqcn_rate_increase_ns = 300000, dcqcn_byte_counter_bytes = 0, dcqcn_f = 1;
  uint64_t dcqcn_ai_bps_per_25g = 5000000, dcqcn_hai_bps_per_25g = 50000000, dcqcn_min_rate_bps = 1000000000;
  uint64_t cnp_interval_ns = 50000;
  uint64_t rng_seed = 1;                 // ECN marking draws (a run is reproducible)
  uint64_t ecn_trace = 0;                // 1: ecn.csv, every ECT frame's dequeue (validation only)
};

// The congestion machinery is on when any of its switches is: switches then hold their own egress
// queues (so that they can pause and mark), and the outputs gain pfc.csv, rates.csv and cnp.csv.
static bool CcMode();

// ---- model --------------------------------------------------------------------------------
struct Entry { int priority; uint32_t dst, mask; uint32_t uval, umask; int out_port; };

struct PortInfo {
  int id, node, number;
  std::string name;
  uint32_t ip;
  uint64_t rate_bps, queue_pkts;
  Ptr<PointToPointNetDevice> dev;
  uint64_t tx_frames = 0, tx_bytes = 0, drops = 0;
  uint64_t max_qlen_pkts = 0, max_backlog_bytes = 0;
  // link model 1: the shaper's own queue and bucket (tokens in ns of line-rate time)
  std::deque<Ptr<Packet>> shq;
  uint64_t shq_bytes = 0;
  double tokens_ns = 0;
  int64_t tokens_at = 0;
  bool wake_pending = false;
  // congestion mode: a switch port's egress FIFO (frame, the switch port it came in on), its
  // serialiser, the PAUSE state imposed on it by its peer, and its counters
  int peer = -1;
  std::deque<std::pair<Ptr<Packet>, int>> egq;
  uint64_t egq_bytes = 0;
  bool tx_busy = false, paused = false;
  int64_t paused_at = 0;
  uint64_t paused_ns = 0, pauses_rx = 0, marks = 0, cnps_rx = 0, cnps_tx = 0, headroom_drops = 0;
  // as an ingress port of a switch (HPCC's SwitchMmu, testbed/congestion/mmu.py): reserve + shared
  // bytes, headroom bytes in use, its headroom, whether it has paused its peer
  uint64_t in_bytes = 0, hdrm_used = 0, headroom = 0, max_ingress_bytes = 0;
  bool pause_sent = false;
  std::unordered_map<int, int64_t> to_out;  // ingress port: its bytes now queued per egress port
};

struct Mmu { int64_t shared_used = 0, hdrm_total = 0, reserve_total = 0; };  // one switch's buffer

struct Msg {
  int id; uint64_t due_ns, size_bytes, n_packets = 0, first_psn = 0;
  int64_t t_first_tx = -1, t_first_rx = -1, t_last_rx = -1, t_complete = -1;
  uint64_t got_bytes = 0;
  int hops = -1;  // switches the message's first packet crossed
};

struct QP;

struct Nic {  // one GPU port: a line-rate pacer shared by its ACKs (first) and its QPs (round robin)
  PortInfo* port = nullptr;
  std::deque<Ptr<Packet>> ctrl;
  std::vector<QP*> requesters;
  size_t rr = 0;
  bool busy = false;
  int64_t wake_at = -1;  // DCQCN: a wake-up is scheduled for when the earliest rate-held QP may send
};

struct QP {
  int id; int src_port, dst_port; uint16_t sport;
  // requester
  std::deque<Msg*> pending;
  uint64_t next_psn = 0, una = 0, high = 0, tail = 0;
  int64_t last_progress = 0;
  uint64_t rto_ns = 0, rto_base = 0, rto_min = 0;
  double srtt = -1, rttvar = 0;
  std::unordered_map<uint64_t, int64_t> rtt_probe;
  uint64_t retransmits = 0, timeouts = 0, naks = 0, packets = 0;
  bool timer_armed = false;
  // responder
  uint64_t epsn = 0, unacked = 0;
  bool nak_outstanding = false;
  std::deque<Msg*> rx_msgs;  // messages in PSN order, for the responder's assembly
  uint64_t resp_naks = 0, duplicates = 0;
  int64_t last_cnp_tx = -1;  // responder: when it last sent a CNP
  // DCQCN reaction point (traffic/dcqcn.py, event for event): rates in bit/s
  double rc = 0, rt = 0, alpha = 1.0;
  uint64_t t_stage = 0, bc_stage = 0, bytes_since_increase = 0;
  int64_t last_cut = -1, alpha_t0 = -1, alpha_ticks = 0, next_ok_ns = 0;
  bool cnp_flag = false;
  uint64_t inc_gen = 0;
};

static Params P;
static std::vector<PortInfo> ports;
static std::map<int, std::string> node_name;
static std::map<int, bool> node_is_switch;
static std::map<int, Ptr<Node>> nodes;
static std::map<int, std::vector<Entry>> tables;                     // switch node -> entries
static std::map<int, std::map<int, int>> port_by_number;             // node -> number -> port id
static std::unordered_map<uint64_t, int> route_cache;                // (node, dst, sport) -> port id
static std::map<uint32_t, int> port_by_ip;
static std::map<int, Nic> nics;                                      // port id -> NIC
// deques: serve mode adds QPs and messages while pointers to earlier ones are held
static std::deque<QP> qps;
static std::deque<Msg> msgs;
static std::map<Ptr<NetDevice>, int> port_of_dev;
static uint64_t completed = 0, unroutable = 0, forwards = 0;
static std::map<int, Mmu> mmus;                                     // switch node -> its buffer
static std::mt19937_64 rng;
static std::ofstream pfc_out, rates_out, cnp_out, ecn_out;
static bool CcMode() { return P.pfc_enabled || P.ecn_enabled || P.cc; }
// serve mode (--serve): transfers arrive on stdin while the simulation runs; each completion is
// reported and stops Simulator::Run, so the driver reacts at the instant a transfer finishes
static bool serve_mode = false;
static std::vector<std::pair<int, int64_t>> serve_done;  // (msg id, t_complete_ns) not yet reported
static void Retire(QP& q);

static int64_t NowNs() { return Simulator::Now().GetNanoSeconds(); }

static uint64_t FrameBytes(const Msg& m, uint64_t k) {
  uint64_t off = k * P.payload_per_packet;
  uint64_t chunk = m.size_bytes > off ? std::min(P.payload_per_packet, m.size_bytes - off) : 0;
  return chunk + P.frame_overhead_bytes + (k == 0 ? P.reth_bytes : 0);
}

static Ptr<Packet> MakeFrame(const ZHeader& h, uint64_t frame_bytes) {
  uint64_t body = frame_bytes - PPP_HEADER_BYTES - h.GetSerializedSize();
  Ptr<Packet> p = Create<Packet>(body);
  p->AddHeader(h);
  return p;
}

static void Forward(int node, int in_port, Ptr<Packet> p, ZHeader h);
static void TryTransmit(int port_id);

static double FrameNs(const PortInfo& pi, uint64_t wire_bytes) { return wire_bytes * 8.0 * 1e9 / pi.rate_bps; }

static void ShaperRelease(int port_id);

static void NoteBacklog(PortInfo& pi) {
  uint64_t b = pi.shq_bytes, pk = pi.shq.size();
  if (b > pi.max_backlog_bytes) pi.max_backlog_bytes = b;
  if (pk > pi.max_qlen_pkts) pi.max_qlen_pkts = pk;
}

static void ShaperRelease(int port_id) {  // link model 1: pass what the bucket allows, then sleep
  PortInfo& pi = ports[port_id];
  pi.wake_pending = false;
  int64_t now = NowNs();
  double cap = FrameNs(pi, P.bucket_bytes);
  pi.tokens_ns = std::min(cap, pi.tokens_ns + double(now - pi.tokens_at));
  pi.tokens_at = now;
  while (!pi.shq.empty() && pi.tokens_ns >= 0) {
    Ptr<Packet> p = pi.shq.front();
    pi.shq.pop_front();
    uint64_t wire = p->GetSize() + PPP_HEADER_BYTES;
    pi.shq_bytes -= wire;
    pi.tokens_ns -= FrameNs(pi, wire);
    pi.dev->Send(p, pi.dev->GetBroadcast(), 0x0800);
  }
  if (!pi.shq.empty()) {
    pi.wake_pending = true;
    Simulator::Schedule(NanoSeconds(int64_t(std::ceil(-pi.tokens_ns))), &ShaperRelease, port_id);
  }
}

static bool SendOn(int port_id, Ptr<Packet> p) {
  PortInfo& pi = ports[port_id];
  if (!P.link_model) return pi.dev->Send(p, pi.dev->GetBroadcast(), 0x0800);
  if (pi.shq.size() >= pi.queue_pkts) { pi.drops++; return false; }
  pi.shq.push_back(p);
  pi.shq_bytes += p->GetSize() + PPP_HEADER_BYTES;
  NoteBacklog(pi);
  if (!pi.wake_pending) ShaperRelease(port_id);
  return true;
}

// ---- switches -------------------------------------------------------------------------------
static int Lookup(int node, uint32_t dst, uint16_t sport) {
  uint64_t key = (uint64_t(node) << 48) ^ (uint64_t(dst) << 16) ^ sport;
  auto it = route_cache.find(key);
  if (it != route_cache.end()) return it->second;
  const Entry* best = nullptr;
  for (const Entry& e : tables[node]) {
    if ((dst & e.mask) != (e.dst & e.mask)) continue;
    if (e.umask && (sport & e.umask) != e.uval) continue;
    if (!best || e.priority > best->priority) best = &e;
  }
  int out = -1;
  if (best) {
    auto pit = port_by_number[node].find(best->out_port);
    if (pit != port_by_number[node].end()) out = pit->second;
  }
  route_cache[key] = out;
  return out;
}

// ---- congestion mode: the switch buffer, PFC and ECN ------------------------------------------
// One lossless priority. The buffer is HPCC's SwitchMmu (testbed/congestion/mmu.py is the same
// model in Python, checked against this one by tests/unit/test_packet_engine_cc.py).
static uint64_t WireBytes(Ptr<const Packet> p) { return p->GetSize() + PPP_HEADER_BYTES; }
static uint64_t LinkDelayNs() { return P.hop_delay_ns + P.link_delay_ns; }
static uint64_t Per25g(uint64_t v, uint64_t rate_bps) {
  return uint64_t((unsigned __int128)v * rate_bps / 25000000000ULL);
}

static int64_t Xoff(int node) {
  const Mmu& m = mmus[node];
  int64_t free_bytes = int64_t(P.buffer_bytes) - m.hdrm_total - m.reserve_total - m.shared_used;
  return std::max<int64_t>(0, free_bytes) / int64_t(P.pfc_alpha_inv);
}
static int64_t PortShared(const PortInfo& pi) { return std::max<int64_t>(0, int64_t(pi.in_bytes) - int64_t(P.pfc_reserve_bytes)); }

static void EgressKick(int port_id);

static void ApplyPause(int port_id, bool on) {  // a PAUSE or RESUME reaches the upstream port
  PortInfo& pi = ports[port_id];
  if (on) {
    if (pi.paused) return;
    pi.paused = true; pi.paused_at = NowNs(); pi.pauses_rx++;
    return;
  }
  if (!pi.paused) return;
  pi.paused = false;
  pi.paused_ns += NowNs() - pi.paused_at;
  if (node_is_switch[pi.node]) EgressKick(port_id);
  else TryTransmit(port_id);
}

static void SendPfc(int in_port, bool pause) {  // the ingress port tells its peer to stop or go on
  PortInfo& pi = ports[in_port];
  pi.pause_sent = pause;
  pfc_out << NowNs() << "," << pi.name << "," << ports[pi.peer].name << "," << (pause ? 1 : 0) << ",";
  if (pause) {  // the egress holding most of this ingress port's bytes
    int cause = -1;
    int64_t most = 0;
    for (const auto& [out, bytes] : pi.to_out)
      if (bytes > most || (bytes == most && bytes > 0 && out < cause)) { most = bytes; cause = out; }
    if (cause >= 0) pfc_out << ports[cause].name;
  }
  pfc_out << "\n";
  Simulator::Schedule(NanoSeconds(LinkDelayNs()), &ApplyPause, pi.peer, pause);
}

static void CheckPause(int in_port) {
  PortInfo& pi = ports[in_port];
  if (!pi.pause_sent && (pi.hdrm_used > 0 || PortShared(pi) >= Xoff(pi.node))) SendPfc(in_port, true);
}

static void CheckResume(int in_port) {
  PortInfo& pi = ports[in_port];
  if (!pi.pause_sent || pi.hdrm_used > 0) return;
  int64_t shared = PortShared(pi);
  if (shared == 0 || shared + int64_t(P.pfc_resume_offset_bytes) <= Xoff(pi.node)) SendPfc(in_port, false);
}

static bool MmuAdmit(int in_port, uint64_t size) {  // account a frame at ingress; false: dropped
  PortInfo& pi = ports[in_port];
  Mmu& m = mmus[pi.node];
  int64_t xoff = Xoff(pi.node);
  if (pi.hdrm_used + size > pi.headroom && PortShared(pi) + int64_t(size) > xoff) return false;
  uint64_t now_bytes = pi.in_bytes + size;
  if (now_bytes <= P.pfc_reserve_bytes) pi.in_bytes = now_bytes;
  else if (int64_t(now_bytes - P.pfc_reserve_bytes) > xoff) pi.hdrm_used += size;
  else {
    pi.in_bytes = now_bytes;
    m.shared_used += std::min<int64_t>(size, now_bytes - P.pfc_reserve_bytes);
  }
  pi.max_ingress_bytes = std::max(pi.max_ingress_bytes, pi.in_bytes + pi.hdrm_used);
  return true;
}

static void MmuRelease(int in_port, uint64_t size) {  // a frame that came in here left the switch
  PortInfo& pi = ports[in_port];
  uint64_t from_hdrm = std::min(pi.hdrm_used, size);
  int64_t from_shared = std::min<int64_t>(int64_t(size - from_hdrm), PortShared(pi));
  pi.hdrm_used -= from_hdrm;
  pi.in_bytes -= size - from_hdrm;
  mmus[pi.node].shared_used -= from_shared;
}

static void EgressDone(int port_id) { ports[port_id].tx_busy = false; EgressKick(port_id); }

static void EgressKick(int port_id) {  // start the next frame unless busy, paused or empty
  PortInfo& pi = ports[port_id];
  if (pi.tx_busy || pi.paused || pi.egq.empty()) return;
  auto [p, in_port] = pi.egq.front();
  pi.egq.pop_front();
  uint64_t wire = WireBytes(p);
  pi.egq_bytes -= wire;
  if (P.ecn_enabled) {  // RED on dequeue, on the bytes left in this egress queue (HPCC's SwitchNode)
    ZHeader h;
    p->PeekHeader(h);
    if (h.ecn == ECT0) {
      uint64_t kmin = Per25g(P.ecn_kmin_bytes_per_25g, pi.rate_bps), kmax = Per25g(P.ecn_kmax_bytes_per_25g, pi.rate_bps);
      double prob = pi.egq_bytes > kmax ? 1.0
                    : pi.egq_bytes > kmin ? P.ecn_pmax_ppm / 1e6 * double(pi.egq_bytes - kmin) / double(kmax - kmin)
                                          : 0.0;
      bool mark = prob > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) < prob;
      if (mark) {
        p->RemoveHeader(h);
        h.ecn = CE;
        p->AddHeader(h);
        pi.marks++;
      }
      if (P.ecn_trace) ecn_out << NowNs() << "," << pi.name << "," << pi.egq_bytes << "," << int(mark) << "\n";
    }
  }
  if (P.pfc_enabled) { ports[in_port].to_out[port_id] -= wire; MmuRelease(in_port, wire); CheckResume(in_port); }
  pi.tx_busy = true;
  pi.dev->Send(p, pi.dev->GetBroadcast(), 0x0800);
  Simulator::Schedule(NanoSeconds(int64_t(std::ceil(FrameNs(pi, wire)))), &EgressDone, port_id);
}

static void EgressEnqueue(int out, Ptr<Packet> p, int in_port) {
  PortInfo& po = ports[out];
  po.egq.push_back({p, in_port});
  po.egq_bytes += WireBytes(p);
  if (po.egq_bytes > po.max_backlog_bytes) po.max_backlog_bytes = po.egq_bytes;
  if (po.egq.size() > po.max_qlen_pkts) po.max_qlen_pkts = po.egq.size();
  EgressKick(out);
}

static void Forward(int node, int in_port, Ptr<Packet> p, ZHeader h) {
  int out = Lookup(node, h.dst_ip, h.sport);
  if (out < 0) { unroutable++; return; }
  forwards++;
  p->RemoveHeader(h);
  h.hops++;
  p->AddHeader(h);
  if (!CcMode()) { SendOn(out, p); return; }  // a full queue drops here (the device's MacTxDrop trace)
  uint64_t wire = WireBytes(p);
  if (P.pfc_enabled) {  // lossless: the buffer admits it or its headroom is exhausted
    if (!MmuAdmit(in_port, wire)) { ports[in_port].headroom_drops++; return; }
    ports[in_port].to_out[out] += wire;
    CheckPause(in_port);
  } else if (ports[out].egq.size() >= ports[out].queue_pkts) {  // lossy: today's drop-tail
    ports[out].drops++;
    return;
  }
  if (P.switch_latency_ns) Simulator::Schedule(NanoSeconds(P.switch_latency_ns), &EgressEnqueue, out, p, in_port);
  else EgressEnqueue(out, p, in_port);
}

// ---- endpoints ------------------------------------------------------------------------------
static bool HasData(const QP& q) {
  if (q.tail <= q.next_psn) return false;
  uint64_t in_flight = q.next_psn - q.una;
  if (P.window_bytes) return in_flight * P.payload_per_packet < P.window_bytes;  // real bytes of payload
  return P.window_pkts == 0 || in_flight < P.window_pkts;                        // 0: no window
}

// ---- DCQCN reaction point: traffic/dcqcn.py, event for event ----------------------------------
// Timers: the alpha timer ticks every dcqcn_alpha_update_ns from the QP's first CNP (evaluated
// lazily: ticks at or before an event are applied before it); the rate-increase timer fires
// dcqcn_rate_increase_ns after each cut and then periodically, until the rate is back at line rate.
static double LineBps(const QP& q) { return double(ports[q.src_port].rate_bps); }

static void LogRate(const QP& q) { rates_out << NowNs() << "," << q.id << "," << std::llround(q.rc) << "\n"; }

static void AlphaCatchUp(QP& q, int64_t t) {
  if (q.alpha_t0 < 0) return;
  int64_t k = (t - q.alpha_t0) / int64_t(P.dcqcn_alpha_update_ns);
  int64_t n = k - q.alpha_ticks;
  if (n <= 0) return;
  if (q.cnp_flag) { q.cnp_flag = false; n--; }
  q.alpha *= std::pow(1.0 - 1.0 / double(P.dcqcn_g_inv), double(n));
  q.alpha_ticks = k;
}

static void Increase(QP& q) {
  double line = LineBps(q);
  uint64_t f = P.dcqcn_f;
  double ai = P.dcqcn_ai_bps_per_25g * line / 25e9, hai = P.dcqcn_hai_bps_per_25g * line / 25e9;
  if (!P.dcqcn_byte_counter_bytes) {  // timer only, HPCC's rule on the stage before this event
    uint64_t stage = q.t_stage - 1;
    if (stage > f) q.rt = std::min(line, q.rt + hai);
    else if (stage == f) q.rt = std::min(line, q.rt + ai);
  } else if (std::max(q.t_stage, q.bc_stage) < f) {
  } else if (std::min(q.t_stage, q.bc_stage) < f) {
    q.rt = std::min(line, q.rt + ai);
  } else {
    q.rt = std::min(line, q.rt + hai);
  }
  q.rc = std::min(line, (q.rt + q.rc) / 2);
  LogRate(q);
}

static void OnIncreaseTimer(int qid, uint64_t gen) {
  QP& q = qps[qid];
  if (gen != q.inc_gen) return;  // a later cut restarted the timer
  AlphaCatchUp(q, NowNs());
  q.t_stage++;
  Increase(q);
  TryTransmit(q.src_port);
  if (q.rc < LineBps(q) || q.rt < LineBps(q))
    Simulator::Schedule(NanoSeconds(P.dcqcn_rate_increase_ns), &OnIncreaseTimer, qid, gen);
}

static void OnCnp(QP& q) {
  ports[q.src_port].cnps_rx++;
  cnp_out << NowNs() << "," << q.id << "\n";
  if (P.cc != 1) return;
  int64_t now = NowNs();
  AlphaCatchUp(q, now);
  if (q.alpha_t0 < 0) q.alpha_t0 = now;
  q.cnp_flag = true;
  if (q.last_cut >= 0 && now - q.last_cut < int64_t(P.dcqcn_rate_decrease_ns)) return;
  q.last_cut = now;
  q.rt = q.rc;
  q.rc = std::max(double(P.dcqcn_min_rate_bps), q.rc * (1 - q.alpha / 2));
  q.alpha = (1 - 1.0 / double(P.dcqcn_g_inv)) * q.alpha + 1.0 / double(P.dcqcn_g_inv);
  q.t_stage = q.bc_stage = 0;
  q.bytes_since_increase = 0;
  LogRate(q);
  q.inc_gen++;
  Simulator::Schedule(NanoSeconds(P.dcqcn_rate_increase_ns), &OnIncreaseTimer, q.id, q.inc_gen);
}

static void OnBytesSent(QP& q, uint64_t bytes) {  // the rate limiter and the byte counter
  if (P.cc != 1) return;
  q.next_ok_ns = NowNs() + int64_t(std::ceil(double(bytes) * 8e9 / q.rc));
  if (!P.dcqcn_byte_counter_bytes) return;
  q.bytes_since_increase += bytes;
  while (q.bytes_since_increase >= P.dcqcn_byte_counter_bytes) {
    q.bytes_since_increase -= P.dcqcn_byte_counter_bytes;
    AlphaCatchUp(q, NowNs());
    q.bc_stage++;
    Increase(q);
  }
}

static Msg* Locate(QP& q, uint64_t psn, uint64_t& k) {
  for (Msg* m : q.pending) {
    if (psn >= m->first_psn && psn < m->first_psn + m->n_packets) { k = psn - m->first_psn; return m; }
  }
  return nullptr;
}

static void ArmTimer(QP& q);

static Ptr<Packet> NextData(QP& q, uint64_t& frame_bytes) {
  uint64_t psn = q.next_psn, k = 0;
  Msg* m = Locate(q, psn, k);
  if (!m) return nullptr;
  bool last = k == m->n_packets - 1;
  bool ackreq = last || (psn % P.ackreq_every == P.ackreq_every - 1);
  ZHeader h;
  h.src_ip = ports[q.src_port].ip; h.dst_ip = ports[q.dst_port].ip; h.qp = q.id; h.sport = q.sport;
  h.op = DATA; h.ackreq = ackreq; h.psn = psn;
  if (P.ecn_enabled) h.ecn = ECT0;
  frame_bytes = FrameBytes(*m, k);
  if (psn < q.high) { q.retransmits++; q.rtt_probe.erase(psn); }
  else { q.high = psn + 1; if (ackreq) q.rtt_probe[psn] = NowNs(); }
  if (m->t_first_tx < 0) m->t_first_tx = NowNs();
  q.next_psn = psn + 1;
  q.packets++;
  OnBytesSent(q, frame_bytes);
  ArmTimer(q);
  return MakeFrame(h, frame_bytes);
}

static void TxDone(int port_id) { nics[port_id].busy = false; TryTransmit(port_id); }

static void NicWake(int port_id) {
  Nic& n = nics[port_id];
  if (n.wake_at != NowNs()) return;  // superseded by an earlier wake-up
  n.wake_at = -1;
  TryTransmit(port_id);
}

static Ptr<Packet> NextFrame(Nic& n, uint64_t& bytes) {  // ACKs first, then the QPs round robin
  Ptr<Packet> p;
  if (!n.ctrl.empty()) {
    p = n.ctrl.front(); n.ctrl.pop_front(); bytes = p->GetSize() + PPP_HEADER_BYTES;
    return p;
  }
  size_t cnt = n.requesters.size();
  int64_t now = NowNs(), soonest = -1;
  for (size_t i = 0; i < cnt && !p; i++) {
    QP* q = n.requesters[(n.rr + i) % cnt];
    if (!HasData(*q)) continue;
    if (q->next_ok_ns > now) {  // held by its DCQCN rate
      if (soonest < 0 || q->next_ok_ns < soonest) soonest = q->next_ok_ns;
      continue;
    }
    p = NextData(*q, bytes);
    if (p) n.rr = (n.rr + i + 1) % cnt;
  }
  if (!p && soonest >= 0 && (n.wake_at < 0 || soonest < n.wake_at)) {
    n.wake_at = soonest;
    Simulator::Schedule(NanoSeconds(soonest - now), &NicWake, int(n.port->id));
  }
  return p;
}

static void TryTransmit(int port_id) {
  Nic& n = nics[port_id];
  uint64_t bytes = 0;
  if (P.debug_no_pacing) {  // DEBUG ONLY: the broken transport the oracles must catch (no pacer:
    // every frame the window allows goes to the NIC's queue at once)
    for (Ptr<Packet> p = NextFrame(n, bytes); p; p = NextFrame(n, bytes)) SendOn(port_id, p);
    return;
  }
  if (n.busy || ports[port_id].paused) return;  // paused: its switch sent PFC PAUSE
  Ptr<Packet> p = NextFrame(n, bytes);
  if (!p) return;
  SendOn(port_id, p);
  n.busy = true;  // the pacer: the next frame leaves one serialisation time later
  double t = double(bytes) * 8.0 / double(n.port->rate_bps);
  Simulator::Schedule(NanoSeconds(uint64_t(t * 1e9 + 0.5)), &TxDone, port_id);
}

static void RttSample(QP& q, int64_t rtt) {  // RFC 6298, floored by the agent's minimum
  if (q.srtt < 0) { q.srtt = double(rtt); q.rttvar = rtt / 2.0; }
  else {
    q.rttvar = 0.75 * q.rttvar + 0.25 * std::abs(q.srtt - double(rtt));
    q.srtt = 0.875 * q.srtt + 0.125 * double(rtt);
  }
  q.rto_base = std::max<uint64_t>(q.rto_min, uint64_t(q.srtt + 4 * q.rttvar));
  q.rto_ns = std::max(q.rto_ns, q.rto_base);
}

static void Advance(QP& q, uint64_t acked_through) {
  uint64_t new_una = acked_through + 1;
  if (new_una <= q.una || new_una > q.high) return;  // stale or bogus
  q.una = new_una;
  if (q.next_psn < q.una) q.next_psn = q.una;
  q.last_progress = NowNs();
  q.rto_ns = q.rto_base;
  for (auto it = q.rtt_probe.begin(); it != q.rtt_probe.end();) {
    if (it->first < q.una) it = q.rtt_probe.erase(it); else ++it;
  }
  while (!q.pending.empty()) {
    Msg* m = q.pending.front();
    if (m->first_psn + m->n_packets - 1 > acked_through) break;
    m->t_complete = NowNs();
    q.pending.pop_front();
    completed++;
    if (serve_mode) { serve_done.push_back({m->id, NowNs()}); Simulator::Stop(); }
    else if (completed == msgs.size()) Simulator::Stop();
  }
  if (serve_mode && q.pending.empty()) Retire(q);
}

static void OnTimer(int qid) {
  QP& q = qps[qid];
  q.timer_armed = false;
  uint64_t outstanding = q.next_psn - q.una;
  if (outstanding == 0 && q.una == q.tail) return;
  if (outstanding > 0 && uint64_t(NowNs() - q.last_progress) >= q.rto_ns) {
    q.timeouts++;
    q.next_psn = q.una;
    q.last_progress = NowNs();
    q.rto_ns = std::min(2 * q.rto_ns, P.rto_max_ns);
    TryTransmit(q.src_port);
  }
  ArmTimer(q);
}

static void ArmTimer(QP& q) {
  if (q.timer_armed || q.next_psn == q.una) return;
  q.timer_armed = true;
  int64_t at = q.last_progress + int64_t(q.rto_ns);
  Simulator::Schedule(NanoSeconds(std::max<int64_t>(at - NowNs(), 0)), &OnTimer, q.id);
}

static void OnAck(QP& q, const ZHeader& h) {
  if (h.op == NAK) {
    q.naks++;
    if (h.psn >= q.una && q.high > h.psn) {
      if (h.psn > 0) Advance(q, h.psn - 1);
      q.next_psn = h.psn;
    }
  } else {
    auto it = q.rtt_probe.find(h.psn);
    if (it != q.rtt_probe.end()) { RttSample(q, NowNs() - it->second); q.rtt_probe.erase(it); }
    Advance(q, h.psn);
  }
  ArmTimer(q);
  TryTransmit(q.src_port);
}

static void SendCtrl(QP& q, Op op, uint64_t psn) {
  ZHeader h;
  h.src_ip = ports[q.dst_port].ip; h.dst_ip = ports[q.src_port].ip; h.qp = q.id; h.sport = q.sport;
  h.op = op; h.psn = psn;
  nics[q.dst_port].ctrl.push_back(MakeFrame(h, P.ack_frame_bytes));
  TryTransmit(q.dst_port);
}

static void OnData(QP& q, const ZHeader& h, uint64_t frame_bytes) {
  if (h.ecn == CE && (q.last_cnp_tx < 0 || NowNs() - q.last_cnp_tx >= int64_t(P.cnp_interval_ns))) {
    q.last_cnp_tx = NowNs();  // the notification point: at most one CNP per QP per interval
    ports[q.dst_port].cnps_tx++;
    SendCtrl(q, CNP, 0);
  }
  if (h.psn < q.epsn) { q.duplicates++; SendCtrl(q, ACK, q.epsn - 1); return; }
  if (h.psn > q.epsn) {
    if (!q.nak_outstanding) { q.nak_outstanding = true; q.resp_naks++; SendCtrl(q, NAK, q.epsn); }
    return;
  }
  // in sequence: find the message this PSN belongs to (messages arrive in PSN order)
  while (!q.rx_msgs.empty() && h.psn >= q.rx_msgs.front()->first_psn + q.rx_msgs.front()->n_packets)
    q.rx_msgs.pop_front();
  Msg* m = q.rx_msgs.empty() ? nullptr : q.rx_msgs.front();
  q.epsn = h.psn + 1;
  q.nak_outstanding = false;
  q.unacked++;
  bool done = false;
  if (m) {
    uint64_t k = h.psn - m->first_psn;
    if (k == 0 && m->t_first_rx < 0) { m->t_first_rx = NowNs(); m->hops = h.hops; }
    m->got_bytes += frame_bytes - P.frame_overhead_bytes - (k == 0 ? P.reth_bytes : 0);
    if (k == m->n_packets - 1) { m->t_last_rx = NowNs(); done = true; }
  }
  if (h.ackreq || q.unacked >= P.ack_coalesce || done) { q.unacked = 0; SendCtrl(q, ACK, h.psn); }
}

static bool Receive(Ptr<NetDevice> dev, Ptr<const Packet> pkt, uint16_t, const Address&) {
  int port_id = port_of_dev[dev];
  int node = ports[port_id].node;
  Ptr<Packet> p = pkt->Copy();
  ZHeader h;
  p->PeekHeader(h);
  if (node_is_switch[node]) { Forward(node, port_id, p, h); return true; }
  QP& q = qps[h.qp];
  if (h.op == DATA) OnData(q, h, p->GetSize() + PPP_HEADER_BYTES);
  else if (h.op == CNP) OnCnp(q);
  else OnAck(q, h);
  return true;
}

static void Post(int qid, int mid) {
  QP& q = qps[qid];
  Msg& m = msgs[mid];
  m.n_packets = std::max<uint64_t>(1, (m.size_bytes + P.payload_per_packet - 1) / P.payload_per_packet);
  m.first_psn = q.tail;
  q.tail += m.n_packets;
  if (q.pending.empty() || q.una == q.next_psn) q.last_progress = NowNs();
  q.pending.push_back(&m);
  q.rx_msgs.push_back(&m);
  TryTransmit(q.src_port);
}

static void Retire(QP& q) {  // serve mode: a QP whose one message is acknowledged leaves its NIC's round robin
  Nic& n = nics[q.src_port];
  for (size_t i = 0; i < n.requesters.size(); i++) {
    if (n.requesters[i] != &q) continue;
    n.requesters.erase(n.requesters.begin() + i);
    if (n.rr > i) n.rr--;
    if (n.rr >= n.requesters.size()) n.rr = 0;
    return;
  }
}

// ---- measurement ----------------------------------------------------------------------------
static std::ofstream samples_out;
static uint64_t n_samples = 0;

static void Sample() {
  n_samples++;
  for (PortInfo& pi : ports) {
    if (!node_is_switch[pi.node] || !pi.dev) continue;
    if (CcMode()) {
      if (!pi.egq.empty()) samples_out << NowNs() << "," << pi.name << "," << pi.egq_bytes << "," << pi.egq.size() << "\n";
      continue;
    }
    if (P.link_model) {
      if (!pi.shq.empty()) samples_out << NowNs() << "," << pi.name << "," << pi.shq_bytes << "," << pi.shq.size() << "\n";
      continue;
    }
    Ptr<Queue<Packet>> q = pi.dev->GetQueue();
    uint32_t pk = q->GetNPackets(), by = q->GetNBytes();
    if (pk) samples_out << NowNs() << "," << pi.name << "," << by + pk * PPP_HEADER_BYTES << "," << pk << "\n";
  }
  if (completed < msgs.size()) Simulator::Schedule(NanoSeconds(P.sample_period_ns), &Sample);
}

static void OnPhyTx(int port_id, Ptr<const Packet> p) {
  ports[port_id].tx_frames++;
  ports[port_id].tx_bytes += p->GetSize();  // the PPP header is on the packet here: the frame length
}
static void OnDrop(int port_id, Ptr<const Packet>) { ports[port_id].drops++; }
static void OnQueueBytes(int port_id, uint32_t, uint32_t now) {
  PortInfo& pi = ports[port_id];
  if (P.link_model || CcMode()) return;  // the program's own queue is the port's queue
  uint32_t pk = pi.dev->GetQueue()->GetNPackets();
  uint64_t b = now + uint64_t(pk) * PPP_HEADER_BYTES;
  if (b > pi.max_backlog_bytes) pi.max_backlog_bytes = b;
  if (pk > pi.max_qlen_pkts) pi.max_qlen_pkts = pk;
}

// ---- input ----------------------------------------------------------------------------------
[[noreturn]] static void Fail(const std::string& why) {
  std::cerr << "zlab-referee: " << why << std::endl;
  std::exit(2);
}

static void SetParam(const std::string& k, uint64_t v) {
  std::map<std::string, uint64_t*> known = {
      {"payload_per_packet", &P.payload_per_packet}, {"frame_overhead_bytes", &P.frame_overhead_bytes},
      {"reth_bytes", &P.reth_bytes}, {"ack_frame_bytes", &P.ack_frame_bytes}, {"window_pkts", &P.window_pkts},
      {"ackreq_every", &P.ackreq_every}, {"ack_coalesce", &P.ack_coalesce}, {"rto_floor_ns", &P.rto_floor_ns},
      {"rto_max_ns", &P.rto_max_ns}, {"hop_delay_ns", &P.hop_delay_ns},
      {"sample_period_ns", &P.sample_period_ns}, {"deadline_ns", &P.deadline_ns},
      {"debug_no_pacing", &P.debug_no_pacing}, {"link_model", &P.link_model}, {"bucket_bytes", &P.bucket_bytes},
      {"cc", &P.cc}, {"window_bytes", &P.window_bytes}, {"ecn_enabled", &P.ecn_enabled},
      {"ecn_kmin_bytes_per_25g", &P.ecn_kmin_bytes_per_25g}, {"ecn_kmax_bytes_per_25g", &P.ecn_kmax_bytes_per_25g},
      {"ecn_pmax_ppm", &P.ecn_pmax_ppm}, {"pfc_enabled", &P.pfc_enabled}, {"buffer_bytes", &P.buffer_bytes},
      {"pfc_reserve_bytes", &P.pfc_reserve_bytes}, {"pfc_resume_offset_bytes", &P.pfc_resume_offset_bytes},
      {"pfc_alpha_inv", &P.pfc_alpha_inv}, {"pfc_headroom_factor", &P.pfc_headroom_factor},
      {"link_delay_ns", &P.link_delay_ns}, {"switch_latency_ns", &P.switch_latency_ns},
      {"dcqcn_g_inv", &P.dcqcn_g_inv}, {"dcqcn_alpha_update_ns", &P.dcqcn_alpha_update_ns},
      {"dcqcn_rate_decrease_ns", &P.dcqcn_rate_decrease_ns}, {"dcqcn_rate_increase_ns", &P.dcqcn_rate_increase_ns},
      {"dcqcn_byte_counter_bytes", &P.dcqcn_byte_counter_bytes}, {"dcqcn_f", &P.dcqcn_f},
      {"dcqcn_ai_bps_per_25g", &P.dcqcn_ai_bps_per_25g}, {"dcqcn_hai_bps_per_25g", &P.dcqcn_hai_bps_per_25g},
      {"dcqcn_min_rate_bps", &P.dcqcn_min_rate_bps}, {"cnp_interval_ns", &P.cnp_interval_ns},
      {"rng_seed", &P.rng_seed}, {"ecn_trace", &P.ecn_trace}};
  auto it = known.find(k);
  if (it == known.end()) Fail("unknown param " + k);
  *it->second = v;
}

static void InitQp(QP& q) {
  if (q.src_port < 0 || q.dst_port < 0 || q.src_port >= int(ports.size()) || q.dst_port >= int(ports.size()))
    Fail("qp " + std::to_string(q.id) + " names an unknown port");
  if (!ports.at(q.src_port).dev || !ports.at(q.dst_port).dev) Fail("qp " + std::to_string(q.id) + " uses an unlinked port");
  // the agent's floor: max(rto_floor, draining four full windows at line rate)
  uint64_t frame_bits = 8 * (P.payload_per_packet + P.frame_overhead_bytes + P.reth_bytes);
  double four_windows = 4.0 * P.window_pkts * frame_bits / double(ports[q.src_port].rate_bps) * 1e9;
  q.rto_ns = q.rto_base = q.rto_min = std::max<uint64_t>(P.rto_floor_ns, uint64_t(four_windows));
  nics[q.src_port].port = &ports[q.src_port];
  nics[q.dst_port].port = &ports[q.dst_port];
  nics[q.src_port].requesters.push_back(&q);
  q.rc = q.rt = double(ports[q.src_port].rate_bps);
}

static void StopNow() { Simulator::Stop(); }

// Serve mode's command loop (testbed/serving/ns3_engine.py drives it), one command a line:
//   start <flow_id> <src_port_id> <dst_port_id> <size_bytes> <udp_sport> <t_ns>
//     one message on a QP of its own, posted at t_ns (>= the clock); no answer
//   run <t_ns>
//     run to t_ns or to the first completion, whichever is earlier; answers "at <t_ns> <k>" and k
//     lines "done <flow_id> <t_complete_ns>" (a completion is the requester's last ACK, as in a replay)
//   quit (or end of input)
// Errors end the program with a line on stderr and exit code 2, so the driver fails loudly.
static int Serve() {
  std::unordered_map<int, int64_t> flow_of;  // msg id -> the driver's flow id
  EventId stop;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream s(line);
    std::string cmd;
    s >> cmd;
    if (cmd == "start") {
      int64_t flow, t_ns; int src, dst, sport; uint64_t size;
      s >> flow >> src >> dst >> size >> sport >> t_ns;
      if (s.fail()) Fail("malformed command: " + line);
      if (t_ns < NowNs()) Fail("flow " + std::to_string(flow) + " starts before the clock: " + line);
      QP q; q.id = int(qps.size()); q.src_port = src; q.dst_port = dst; q.sport = uint16_t(sport);
      qps.push_back(q);
      InitQp(qps.back());
      Msg m; m.id = int(msgs.size()); m.due_ns = uint64_t(t_ns); m.size_bytes = std::max<uint64_t>(1, size);
      msgs.push_back(m);
      flow_of[m.id] = flow;
      Simulator::Schedule(NanoSeconds(t_ns - NowNs()), &Post, q.id, m.id);
    } else if (cmd == "run") {
      int64_t t_ns; s >> t_ns;
      if (s.fail() || t_ns < NowNs()) Fail("bad run command (clock " + std::to_string(NowNs()) + "): " + line);
      if (serve_done.empty()) {  // completions not yet reported come back first, without running
        Simulator::Cancel(stop);
        stop = Simulator::Schedule(NanoSeconds(t_ns - NowNs()), &StopNow);
        Simulator::Run();
      }
      std::cout << "at " << NowNs() << " " << serve_done.size() << "\n";
      for (auto [mid, t] : serve_done) std::cout << "done " << flow_of[mid] << " " << t << "\n";
      std::cout.flush();
      for (auto [mid, t] : serve_done) flow_of.erase(mid);
      serve_done.clear();
    } else if (cmd == "quit") {
      break;
    } else if (!cmd.empty()) {
      Fail("unknown command: " + line);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--serve") serve_mode = true;
  else if (argc != 3) {
    std::cerr << "usage: zlab-referee SCENARIO.txt OUT_DIR | zlab-referee --serve FABRIC.txt\n"
                 "Replays a zlab run in ns-3; scenario files are written by `zlab referee`.\n"
                 "--serve: the fabric's nodes, ports, links and entries, then transfers and runs on stdin.\n";
    return 2;
  }
  auto wall0 = std::chrono::steady_clock::now();
  std::ifstream in(argv[serve_mode ? 2 : 1]);
  if (!in) Fail(std::string("cannot read ") + argv[serve_mode ? 2 : 1]);
  std::vector<std::pair<int, int>> links;
  std::vector<std::pair<int, int>> posts;  // (qp, msg)
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    lineno++;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string kind;
    s >> kind;
    if (kind == "param") { std::string k; uint64_t v; s >> k >> v; SetParam(k, v); }
    else if (kind == "node") {
      int id; std::string name, role; s >> id >> name >> role;
      node_name[id] = name; node_is_switch[id] = role == "switch"; nodes[id] = CreateObject<Node>();
    } else if (kind == "port") {
      PortInfo pi; s >> pi.id >> pi.node >> pi.number >> pi.name >> pi.ip >> pi.rate_bps >> pi.queue_pkts;
      if (pi.id != int(ports.size())) Fail("port ids must be dense and in order (line " + std::to_string(lineno) + ")");
      port_by_number[pi.node][pi.number] = pi.id;
      ports.push_back(pi);
    } else if (kind == "link") { int a, b; s >> a >> b; links.push_back({a, b}); }
    else if (kind == "entry") {
      int node; Entry e; s >> node >> e.priority >> e.dst >> e.mask >> e.uval >> e.umask >> e.out_port;
      tables[node].push_back(e);
    } else if (kind == "qp") {
      QP q; int sport; s >> q.id >> q.src_port >> q.dst_port >> sport; q.sport = uint16_t(sport);
      if (q.id != int(qps.size())) Fail("qp ids must be dense and in order");
      qps.push_back(q);
    } else if (kind == "msg") {
      Msg m; int qid; s >> m.id >> qid >> m.due_ns >> m.size_bytes;
      if (m.id != int(msgs.size())) Fail("msg ids must be dense and in order");
      msgs.push_back(m); posts.push_back({qid, m.id});
    } else Fail("unknown line kind '" + kind + "' at line " + std::to_string(lineno));
    if (s.fail()) Fail("malformed line " + std::to_string(lineno) + ": " + line);
  }
  if (msgs.empty() && !serve_mode) Fail("no messages to replay");
  if (P.link_model > 1) Fail("link_model must be 0 (serialiser) or 1 (token bucket)");
  if (P.link_model && !P.bucket_bytes) Fail("link_model 1 needs bucket_bytes");
  if (CcMode() && P.link_model) Fail("the congestion machinery (ecn, pfc, cc) needs link_model 0 (real-scale serialising links)");
  if (P.cc > 1) Fail("cc must be 0 (none) or 1 (dcqcn)");
  if (P.ecn_kmin_bytes_per_25g > P.ecn_kmax_bytes_per_25g || P.ecn_pmax_ppm > 1000000) Fail("ECN needs kmin <= kmax and pmax_ppm <= 1000000");
  if (!P.pfc_alpha_inv || !P.dcqcn_g_inv || !P.dcqcn_alpha_update_ns || !P.dcqcn_rate_increase_ns) Fail("pfc_alpha_inv, dcqcn_g_inv and the DCQCN timers must be > 0");
  rng.seed(P.rng_seed);

  for (auto [a, b] : links) {
    PortInfo &pa = ports.at(a), &pb = ports.at(b);
    if (pa.rate_bps != pb.rate_bps) Fail("link " + pa.name + " - " + pb.name + " has two rates");
    PointToPointHelper h;
    // link model 1: the wire does not serialise (1000x the line rate); the shaper ahead of it does
    h.SetDeviceAttribute("DataRate", DataRateValue(DataRate(pa.rate_bps * (P.link_model ? 1000 : 1))));
    h.SetChannelAttribute("Delay", TimeValue(NanoSeconds(P.hop_delay_ns + P.link_delay_ns)));
    NetDeviceContainer d = h.Install(nodes[pa.node], nodes[pb.node]);
    pa.dev = DynamicCast<PointToPointNetDevice>(d.Get(0));
    pb.dev = DynamicCast<PointToPointNetDevice>(d.Get(1));
    pa.peer = pb.id; pb.peer = pa.id;
    for (PortInfo* pi : {&pa, &pb}) {
      pi->dev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, P.link_model ? 100000 : pi->queue_pkts));
      pi->tokens_ns = FrameNs(*pi, P.bucket_bytes);  // link model 1: the bucket starts full
      pi->dev->SetReceiveCallback(MakeCallback(&Receive));
      port_of_dev[pi->dev] = pi->id;
      pi->dev->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&OnPhyTx, pi->id));
      pi->dev->TraceConnectWithoutContext("MacTxDrop", MakeBoundCallback(&OnDrop, pi->id));
      pi->dev->GetQueue()->TraceConnectWithoutContext("BytesInQueue", MakeBoundCallback(&OnQueueBytes, pi->id));
    }
  }
  if (P.pfc_enabled) {  // every linked switch port: its headroom (factor x rate x delay) and reserve
    for (PortInfo& pi : ports) {
      if (!pi.dev || !node_is_switch[pi.node]) continue;
      uint64_t bdp = uint64_t((unsigned __int128)pi.rate_bps * LinkDelayNs() / 8 / 1000000000ULL);
      pi.headroom = bdp * P.pfc_headroom_factor;
      mmus[pi.node].hdrm_total += pi.headroom;
      mmus[pi.node].reserve_total += P.pfc_reserve_bytes;
    }
    for (auto& [node, m] : mmus)
      if (Xoff(node) <= 0) Fail("switch " + node_name[node] + ": headroom and reserve leave no shared buffer (XOFF 0)");
  }
  for (QP& q : qps) InitQp(q);
  if (serve_mode) return Serve();
  for (auto [qid, mid] : posts) Simulator::Schedule(NanoSeconds(msgs[mid].due_ns), &Post, qid, mid);
  std::string out = argv[2];
  samples_out.open(out + "/queue_samples.csv");
  samples_out << "t_ns,port,backlog_bytes,qlen_pkts\n";
  if (CcMode()) {
    pfc_out.open(out + "/pfc.csv");
    pfc_out << "t_ns,port,peer_port,event,cause_port\n";
    rates_out.open(out + "/rates.csv");
    rates_out << "t_ns,qp,rate_bps\n";
    cnp_out.open(out + "/cnp.csv");
    cnp_out << "t_ns,qp\n";
  }
  if (P.ecn_trace) {
    ecn_out.open(out + "/ecn.csv");
    ecn_out << "t_ns,port,queue_bytes,marked\n";
  }
  Simulator::Schedule(NanoSeconds(0), &Sample);
  if (P.deadline_ns) Simulator::Stop(NanoSeconds(P.deadline_ns));
  Simulator::Run();
  int64_t end_ns = NowNs();
  for (PortInfo& pi : ports)
    if (pi.paused) pi.paused_ns += end_ns - pi.paused_at;  // still paused at the end
  Simulator::Destroy();
  samples_out.close();
  pfc_out.close(); rates_out.close(); cnp_out.close(); ecn_out.close();
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  std::ofstream mo(out + "/messages.csv");
  mo << "msg,qp,size_bytes,packets,t_due_ns,t_first_tx_ns,t_first_rx_ns,t_last_rx_ns,t_complete_ns,"
        "received_bytes,hops,qp_retransmits,qp_timeouts,qp_naks\n";
  for (Msg& m : msgs) {
    int qid = -1;
    for (auto [q, mm] : posts) if (mm == m.id) { qid = q; break; }
    QP& q = qps[qid];
    mo << m.id << "," << qid << "," << m.size_bytes << "," << m.n_packets << "," << m.due_ns << ","
       << m.t_first_tx << "," << m.t_first_rx << "," << m.t_last_rx << "," << m.t_complete << ","
       << m.got_bytes << "," << m.hops << "," << q.retransmits << "," << q.timeouts << "," << q.naks << "\n";
  }
  std::ofstream po(out + "/ports.csv");
  po << "port,tx_frames,tx_bytes,drops,max_qlen_pkts,max_backlog_bytes";
  if (CcMode()) po << ",marks,cnps_rx,cnps_tx,pauses_rx,paused_ns,headroom_drops,max_ingress_bytes,headroom_bytes";
  po << "\n";
  for (PortInfo& pi : ports) {
    if (!pi.dev) continue;
    po << pi.name << "," << pi.tx_frames << "," << pi.tx_bytes << "," << pi.drops << "," << pi.max_qlen_pkts << ","
       << pi.max_backlog_bytes;
    if (CcMode())
      po << "," << pi.marks << "," << pi.cnps_rx << "," << pi.cnps_tx << "," << pi.pauses_rx << "," << pi.paused_ns
         << "," << pi.headroom_drops << "," << pi.max_ingress_bytes << "," << pi.headroom;
    po << "\n";
  }
  std::ofstream so(out + "/summary.txt");
  so << "ns3_version 3.37\nmessages " << msgs.size() << "\ncompleted " << completed << "\nend_ns " << end_ns
     << "\nwall_s " << wall_s << "\nswitch_forwards " << forwards << "\nunroutable " << unroutable
     << "\nqueue_samples " << n_samples << "\nsample_period_ns " << P.sample_period_ns << "\n";
  std::cout << "zlab-referee: " << completed << "/" << msgs.size() << " messages in " << end_ns / 1e9
            << " s simulated, " << wall_s << " s wall\n";
  return completed == msgs.size() ? 0 : 3;
}
