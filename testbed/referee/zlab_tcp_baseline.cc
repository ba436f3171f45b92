// zlab-tcp-baseline: the same fabric, flow entries and message schedule as zlab-referee, carried by
// ns-3's own TCP (NewReno, ns-3 3.37's internet module) instead of zlab's transport.
//
// Why: a sanity baseline written by others. zlab's transport and its C++ re-implementation share
// one description; ns-3's TCP shares nothing with either. Same bytes per link (each QP is one TCP
// connection whose source port is the QP's UDP source port, so the switches' masked source-port
// entries route it on the QP's path) and plausible completion times are what is expected, not
// equality: TCP starts slowly, has its own ACK clock and headers.
//
// Input: the scenario file zlab-referee reads (param/node/port/link/entry/qp/msg lines; params other
// than payload_per_packet, sample_period_ns and deadline_ns are ignored). Output in OUT_DIR:
// messages.csv (msg, qp, size_bytes, t_due_ns, t_done_ns: the last byte's arrival at the receiver)
// and ports.csv (port, tx_frames, tx_bytes, drops).

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

struct Entry { int priority; uint32_t dst, mask, uval, umask; int out_port; };
struct PortInfo {
  int id, node, number; std::string name; uint32_t ip; uint64_t rate_bps, queue_pkts;
  Ptr<PointToPointNetDevice> dev; uint32_t ifindex = 0;
  uint64_t tx_frames = 0, tx_bytes = 0, drops = 0;
};
struct QPInfo { int id, src, dst; uint16_t sport; Ptr<Socket> tx; uint64_t sent = 0, got = 0; std::vector<int> msgs; size_t done = 0; };
struct MsgInfo { int id, qp; uint64_t due_ns, size, end_offset; int64_t t_done = -1; };

static std::vector<PortInfo> ports;
static std::map<int, bool> is_switch;
static std::map<int, Ptr<Node>> nodes;
static std::map<int, std::vector<Entry>> tables;
static std::map<std::pair<int, int>, int> port_by_number;
static std::vector<QPInfo> qps;
static std::vector<MsgInfo> msgs;
static std::map<std::pair<uint32_t, uint16_t>, int> qp_by_src;  // (src ip, sport) -> qp
static uint64_t payload = 4096, deadline_ns = 0, completed = 0;

// ---- routing: the switches' flow entries, matched on the TCP source port ----------------------
class ZRouting : public Ipv4RoutingProtocol {
 public:
  int node = -1;
  Ptr<Ipv4> ipv4;
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("zlab::ZRouting").SetParent<Ipv4RoutingProtocol>().AddConstructor<ZRouting>();
    return tid;
  }
  int Lookup(uint32_t dst, uint16_t sport) const {
    const Entry* best = nullptr;
    auto it = tables.find(node);
    if (it == tables.end()) return -1;
    for (const Entry& e : it->second) {
      if ((dst & e.mask) != (e.dst & e.mask)) continue;
      if (e.umask && (sport & e.umask) != e.uval) continue;
      if (!best || e.priority > best->priority) best = &e;
    }
    if (!best) return -1;
    auto p = port_by_number.find({node, best->out_port});
    return p == port_by_number.end() ? -1 : p->second;
  }
  Ptr<Ipv4Route> Make(const Ipv4Header& h, int port) const {
    Ptr<Ipv4Route> r = Create<Ipv4Route>();
    r->SetDestination(h.GetDestination());
    r->SetGateway(Ipv4Address::GetZero());
    r->SetOutputDevice(ports[port].dev);
    r->SetSource(ipv4->GetAddress(ports[port].ifindex, 0).GetLocal());
    return r;
  }
  Ptr<Ipv4Route> RouteOutput(Ptr<Packet>, const Ipv4Header& h, Ptr<NetDevice> oif, Socket::SocketErrno& err) override {
    // a GPU: the port its socket is bound to (oif), or whose address is the source, else its first
    int pick = -1;
    for (const PortInfo& p : ports) {
      if (p.node != node || !p.dev) continue;
      bool mine = (oif && oif == p.dev) || h.GetSource() == Ipv4Address(p.ip);
      if (pick < 0 || mine) pick = p.id;
      if (mine) break;
    }
    if (pick < 0) { err = Socket::ERROR_NOROUTETOHOST; return nullptr; }
    err = Socket::ERROR_NOTERROR;
    Ptr<Ipv4Route> r = Make(h, pick);
    r->SetSource(Ipv4Address(ports[pick].ip));
    return r;
  }
  bool RouteInput(Ptr<const Packet> p, const Ipv4Header& h, Ptr<const NetDevice> idev, UnicastForwardCallback ucb,
                  MulticastForwardCallback, LocalDeliverCallback lcb, ErrorCallback ecb) override {
    uint32_t iif = ipv4->GetInterfaceForDevice(idev);
    if (ipv4->IsDestinationAddress(h.GetDestination(), iif)) { lcb(p, h, iif); return true; }
    if (!is_switch[node]) return false;
    TcpHeader tcp;
    p->PeekHeader(tcp);
    int out = Lookup(h.GetDestination().Get(), tcp.GetSourcePort());
    if (out < 0) { ecb(p, h, Socket::ERROR_NOROUTETOHOST); return false; }
    ucb(Make(h, out), p, h);
    return true;
  }
  void NotifyInterfaceUp(uint32_t) override {}
  void NotifyInterfaceDown(uint32_t) override {}
  void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
  void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}
  void SetIpv4(Ptr<Ipv4> ip) override { ipv4 = ip; }
  void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override {}
};

// ---- endpoints ----------------------------------------------------------------------------------
static void Push(int qid) {  // keep the socket's buffer full with what has been posted
  QPInfo& q = qps[qid];
  uint64_t posted = 0;
  for (int m : q.msgs) if (int64_t(msgs[m].due_ns) <= Simulator::Now().GetNanoSeconds()) posted = msgs[m].end_offset;
  while (q.sent < posted) {
    uint32_t room = q.tx->GetTxAvailable();
    if (!room) return;
    uint32_t n = uint32_t(std::min<uint64_t>({posted - q.sent, room, 65536}));
    int r = q.tx->Send(Create<Packet>(n));
    if (r <= 0) return;
    q.sent += uint64_t(r);
  }
}
static void OnTxRoom(int qid, Ptr<Socket>, uint32_t) { Push(qid); }

static void OnRecv(Ptr<Socket> s) {
  Address from;
  while (Ptr<Packet> p = s->RecvFrom(from)) {
    if (!p->GetSize()) break;
    InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
    auto it = qp_by_src.find({a.GetIpv4().Get(), a.GetPort()});
    if (it == qp_by_src.end()) continue;
    QPInfo& q = qps[it->second];
    q.got += p->GetSize();
    while (q.done < q.msgs.size() && q.got >= msgs[q.msgs[q.done]].end_offset) {
      msgs[q.msgs[q.done]].t_done = Simulator::Now().GetNanoSeconds();
      q.done++;
      if (++completed == msgs.size()) Simulator::Stop();
    }
  }
}
static void OnAccept(Ptr<Socket> s, const Address&) { s->SetRecvCallback(MakeCallback(&OnRecv)); }

static void OnPhyTx(int port, Ptr<const Packet> p) { ports[port].tx_frames++; ports[port].tx_bytes += p->GetSize(); }
static void OnDrop(int port, Ptr<const Packet>) { ports[port].drops++; }

[[noreturn]] static void Fail(const std::string& why) { std::cerr << "zlab-tcp-baseline: " << why << std::endl; std::exit(2); }

int main(int argc, char** argv) {
  if (argc != 3) { std::cerr << "usage: zlab-tcp-baseline SCENARIO.txt OUT_DIR\n"; return 2; }
  std::ifstream in(argv[1]);
  if (!in) Fail(std::string("cannot read ") + argv[1]);
  std::vector<std::pair<int, int>> links;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string kind; s >> kind;
    if (kind == "param") { std::string k; uint64_t v; s >> k >> v; if (k == "payload_per_packet") payload = v; if (k == "deadline_ns") deadline_ns = v; }
    else if (kind == "node") { int id; std::string name, role; s >> id >> name >> role; is_switch[id] = role == "switch"; nodes[id] = CreateObject<Node>(); }
    else if (kind == "port") { PortInfo p; s >> p.id >> p.node >> p.number >> p.name >> p.ip >> p.rate_bps >> p.queue_pkts; port_by_number[{p.node, p.number}] = p.id; ports.push_back(p); }
    else if (kind == "link") { int a, b; s >> a >> b; links.push_back({a, b}); }
    else if (kind == "entry") { int n; Entry e; s >> n >> e.priority >> e.dst >> e.mask >> e.uval >> e.umask >> e.out_port; tables[n].push_back(e); }
    else if (kind == "qp") { QPInfo q; int sport; s >> q.id >> q.src >> q.dst >> sport; q.sport = uint16_t(sport); qps.push_back(q); }
    else if (kind == "msg") { MsgInfo m; s >> m.id >> m.qp >> m.due_ns >> m.size; msgs.push_back(m); }
    else Fail("unknown line kind " + kind);
    if (s.fail()) Fail("malformed line: " + line);
  }
  if (msgs.empty()) Fail("no messages");
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(uint32_t(payload)));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1u << 26));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1u << 26));
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));

  InternetStackHelper stack;
  stack.SetRoutingHelper(Ipv4ListRoutingHelper());  // replaced below by ZRouting on every node
  for (auto& [id, n] : nodes) {
    stack.Install(n);
    Ptr<Ipv4> ip = n->GetObject<Ipv4>();
    Ptr<ZRouting> r = CreateObject<ZRouting>();
    r->node = id;
    ip->SetRoutingProtocol(r);
  }
  uint32_t subnet = 0;
  for (auto [a, b] : links) {
    PortInfo &pa = ports.at(a), &pb = ports.at(b);
    PointToPointHelper h;
    h.SetDeviceAttribute("DataRate", DataRateValue(DataRate(pa.rate_bps)));
    h.SetChannelAttribute("Delay", TimeValue(NanoSeconds(0)));
    h.SetDeviceAttribute("Mtu", UintegerValue(9000));  // a whole segment per frame: no IP fragments
    NetDeviceContainer d = h.Install(nodes[pa.node], nodes[pb.node]);
    pa.dev = DynamicCast<PointToPointNetDevice>(d.Get(0));
    pb.dev = DynamicCast<PointToPointNetDevice>(d.Get(1));
    for (PortInfo* p : {&pa, &pb}) {
      p->dev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, p->queue_pkts));
      Ptr<Ipv4> ip = nodes[p->node]->GetObject<Ipv4>();
      p->ifindex = ip->AddInterface(p->dev);
      // a GPU port has its own address; a switch port an address of a private /30 per cable
      uint32_t addr = p->ip ? p->ip : (0xAC100000u + 4 * subnet + (p == &pa ? 1 : 2));
      ip->AddAddress(p->ifindex, Ipv4InterfaceAddress(Ipv4Address(addr), Ipv4Mask(p->ip ? 0xFFFFFFFFu : 0xFFFFFFFCu)));
      ip->SetUp(p->ifindex);
      p->dev->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&OnPhyTx, p->id));
      p->dev->TraceConnectWithoutContext("MacTxDrop", MakeBoundCallback(&OnDrop, p->id));
    }
    subnet++;
  }
  // receivers: one listening socket per destination port
  std::map<int, Ptr<Socket>> listeners;
  for (QPInfo& q : qps) {
    if (!listeners.count(q.dst)) {
      Ptr<Socket> l = Socket::CreateSocket(nodes[ports[q.dst].node], TcpSocketFactory::GetTypeId());
      l->Bind(InetSocketAddress(Ipv4Address(ports[q.dst].ip), 4791));
      l->Listen();
      l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(), MakeCallback(&OnAccept));
      listeners[q.dst] = l;
    }
    q.tx = Socket::CreateSocket(nodes[ports[q.src].node], TcpSocketFactory::GetTypeId());
    if (q.tx->Bind(InetSocketAddress(Ipv4Address(ports[q.src].ip), q.sport)) != 0) Fail("cannot bind qp " + std::to_string(q.id));
    q.tx->BindToNetDevice(ports[q.src].dev);  // the QP's own NIC port (a GPU may have two)
    q.tx->Connect(InetSocketAddress(Ipv4Address(ports[q.dst].ip), 4791));
    q.tx->SetSendCallback(MakeBoundCallback(&OnTxRoom, q.id));
    qp_by_src[{ports[q.src].ip, q.sport}] = q.id;
  }
  for (MsgInfo& m : msgs) {
    QPInfo& q = qps.at(m.qp);
    m.end_offset = (q.msgs.empty() ? 0 : msgs[q.msgs.back()].end_offset) + m.size;
    q.msgs.push_back(m.id);
    Simulator::Schedule(NanoSeconds(m.due_ns), &Push, m.qp);
  }
  if (deadline_ns) Simulator::Stop(NanoSeconds(deadline_ns));
  Simulator::Run();
  int64_t end_ns = Simulator::Now().GetNanoSeconds();
  Simulator::Destroy();
  std::string out = argv[2];
  std::ofstream mo(out + "/messages.csv");
  mo << "msg,qp,size_bytes,t_due_ns,t_done_ns\n";
  for (MsgInfo& m : msgs) mo << m.id << "," << m.qp << "," << m.size << "," << m.due_ns << "," << m.t_done << "\n";
  std::ofstream po(out + "/ports.csv");
  po << "port,tx_frames,tx_bytes,drops\n";
  for (PortInfo& p : ports) if (p.dev) po << p.name << "," << p.tx_frames << "," << p.tx_bytes << "," << p.drops << "\n";
  std::cout << "zlab-tcp-baseline: " << completed << "/" << msgs.size() << " messages in " << end_ns / 1e9 << " s simulated\n";
  return completed == msgs.size() ? 0 : 3;
}
