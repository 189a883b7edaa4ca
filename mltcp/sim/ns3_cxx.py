"""The C++ half of the ns-3 engine, compiled at run time by cppyy (``cppyy.cppdef``).

It holds what must run inside ns-3's event loop, per packet or per ACK:

* ``Tracker``: :class:`mltcp.tracker.IterationTracker` for one flow (idle gap longer than
  ``max(min_idle, idle_fraction x the previous gap)`` - or the shorter of the last two with
  ``idle_gap = "min2"`` - starts an iteration, or an explicit mark when ``boundary = "mark"``;
  bytes per iteration are the median of the last ``history`` completed iterations; bytes_ratio =
  acked this iteration / that, in [0, 1]).
* ``Mltcp<Base>``: MLTCP as a ``TcpCongestionOps`` subclass of a stock ns-3 algorithm
  (``TcpNewReno`` or ``TcpCubic``). Slow start is the base's; in congestion avoidance the base's
  window increase is multiplied by F(bytes_ratio) (linear, capped or convex, as
  :func:`mltcp.cc.mltcp.gain`; the fractional part is carried to the next ACK); optionally the
  decrease is scaled as :func:`mltcp.cc.mltcp.dscale` does (decrease_at_start .. decrease_at_end).
  Bytes acked come from the cumulative ACK (``m_lastAckedSeq``), not from segment counts.
* ``Flow``: an application on a sender host with one TCP socket; it sends its share of each
  iteration's bytes when its job says so and reports when the last byte is acknowledged. Before
  sending after an idle period longer than the RTO it applies Linux's ``tcp_cwnd_restart`` (RFC 2861,
  the scenario's ``slow_start_after_idle``), which ns-3's TCP does not do by itself; and for CUBIC,
  after any idle period, Linux's ``bictcp_cwnd_event``: the curve's epoch moves by the idle time
  (ns-3's ``TcpCubic`` has no ``CwndEvent`` and counts the idle time in W(t)).
* ``Job``: alternates compute and communication over its flows and records per-iteration times,
  drops and ECN marks; ``Counters`` attributes queue drops and marks to jobs by source address.

Only Python decides topology, parameters and records (:mod:`mltcp.sim.ns3_engine`).
"""
from __future__ import annotations

CXX = r"""
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/applications-module.h"
#include "ns3/traffic-control-module.h"
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace mltcpns3 {
using namespace ns3;

// ---- access to TcpSocketBase internals the app needs (cwnd restart after idle) -----------------
struct SocketPeek : public TcpSocketBase {
    static Ptr<TcpSocketState> Tcb(TcpSocketBase* s) { return s->*(&SocketPeek::m_tcb); }
    static Time Rto(TcpSocketBase* s) { return (s->*(&SocketPeek::m_rto)).Get(); }
};

// ---- TcpCubic's epoch (private): named through an explicit instantiation, which C++ exempts from
// access checks, so that the flow can move it after an idle period as Linux does
template <typename Tag, typename Tag::type Member>
struct Unlock { friend typename Tag::type Field(Tag) { return Member; } };
struct CubicEpoch { using type = Time TcpCubic::*; friend type Field(CubicEpoch); };
template struct Unlock<CubicEpoch, &TcpCubic::m_epochStart>;

// ---- the iteration tracker (mltcp/tracker.py, one flow) ----------------------------------------
struct Tracker {
    double idleFraction = 0.9, minIdle = 1e-3;   // minIdle = inf: explicit marks only (boundary = mark)
    size_t history = 3;                // bytes per iteration = median of the last `history` iterations
    bool min2 = false;                 // idle_gap = min2: the threshold's reference is the shorter of the last two gaps
    bool atTx = false;                 // boundary = tx_start: the idle rule is checked at TxStart, not at the ACK
    double bytesCur = 0, bytesPerIter = 0, lastActive = -1, lastGap = 0, prevGap = 0;
    std::vector<double> hist;          // newest first, at most `history`
    void OnAck(double acked, double now) {
        if (acked <= 0) return;
        if (lastActive >= 0 && !atTx) Gap(now - lastActive);
        bytesCur += acked;
        lastActive = now;
    }
    void TxStart(double now) { if (lastActive >= 0 && atTx) Gap(now - lastActive); }   // tracker.tx_start
    void Gap(double gap) {
        if (!IsBoundary(gap)) return;
        prevGap = lastGap;
        lastGap = gap;
        if (bytesCur > 0) Close();
    }
    bool IsBoundary(double gap) const {       // does an idle gap start an iteration (tracker.is_boundary)
        double ref = (min2 && prevGap > 0) ? std::min(lastGap, prevGap) : lastGap;
        return gap > std::max(minIdle, idleFraction * ref);
    }
    void IterationStart() { if (bytesCur > 0) Close(); }   // explicit mark from the framework
    void Close() {
        hist.insert(hist.begin(), bytesCur);
        if (hist.size() > history) hist.resize(history);
        std::vector<double> s(hist);
        std::sort(s.begin(), s.end());
        size_t n = s.size();
        bytesPerIter = (s[(n - 1) / 2] + s[n / 2]) / 2.0;
        bytesCur = 0;
    }
    double Ratio() const {
        if (bytesPerIter <= 0) return 0.0;
        return std::min(1.0, std::max(0.0, bytesCur / bytesPerIter));
    }
};

// ---- the host's NIC limit on window growth (Linux tcp_is_cwnd_limited with TSQ) ----------------
// ns-3's TCP has no TCP Small Queues: a flow whose NIC is the bottleneck queues its whole window in
// the NIC's device queue and stays "cwnd-limited", so its window grows without bound while it
// sends alone. Linux (and the fast engine) count only what left the host: in congestion avoidance
// the window grows only while the NIC holds at most two segments (TSQ's floor; ns-3 always fills
// its window, so then the window is what limits), in slow start while the segments out (sent
// minus that backlog) exceed cwnd / 2, as the fast engine's cwnd_limited.
template <class Base>
class Host : public Base {
  public:
    Ptr<Queue<Packet>> nic;            // the sender's device queue; null: stock ns-3 growth
    double allowance = 0.0;            // packets that may wait in it while the window still grows
    uint32_t held = 0;                 // growths skipped (diagnosis)
    bool CwndLimited(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) const {
        if (!nic) return true;
        // a NIC backlog beyond the allowance ([network] nic_backlog_segments) is the NIC's limit
        double backlog = std::max(0.0, double(nic->GetNPackets()) - allowance);
        if (tcb->m_cWnd >= tcb->m_ssThresh) return backlog == 0.0;
        // slow start (Linux: cwnd < 2 x packets out): out = what had left the host before this ACK
        double out = double(tcb->m_bytesInFlight.Get()) + double(segmentsAcked) * tcb->m_segmentSize
                     - backlog * tcb->m_segmentSize;
        return double(tcb->m_cWnd.Get()) < 2.0 * out;
    }
    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override {
        if (!CwndLimited(tcb, segmentsAcked)) { held++; return; }
        Base::IncreaseWindow(tcb, segmentsAcked);
    }
    Ptr<TcpCongestionOps> Fork() override { return CopyObject<Host<Base>>(this); }
};
using HostReno = Host<TcpLinuxReno>;     // Linux Reno: ssthresh from cwnd, segment counting
using HostNewReno = Host<TcpNewReno>;    // ns-3's NewReno: ssthresh from the bytes in flight
using HostCubic = Host<TcpCubic>;

// ---- MLTCP = base algorithm + aggressiveness hook ---------------------------------------------
template <class Base>
class Mltcp : public Base {
  public:
    double slope = 4.0, intercept = 0.25;
    int shape = 0;                     // 0 linear, 1 capped (min(cap, linear)), 2 convex (slope r^exponent + intercept)
    double cap = INFINITY, exponent = 2.0;
    bool scaleDecrease = false;
    double restartWindow = 0;          // segments; 0 = off (mltcp.cc.mltcp.iteration_restart)
    double decStart = 0.8, decEnd = 0.2;   // fraction removed at r = 0 / r = 1, in Reno terms (x base / 0.5)
    double baseKeep = 0.5;             // fraction of the window the base keeps on a reduction
    std::string name = "Mltcp";
    Tracker tracker;
    SequenceNumber32 lastAcked{1};     // ns-3's ISN is 0: data starts at 1
    double carry = 0;

    std::string GetName() const override { return name; }
    double F() const {
        double r = tracker.Ratio();
        if (shape == 2) return slope * std::pow(r, exponent) + intercept;
        double f = slope * r + intercept;
        return shape == 1 ? std::min(f, cap) : f;
    }

    void Track(Ptr<TcpSocketState> tcb) {
        SequenceNumber32 a = tcb->m_lastAckedSeq;
        if (a > lastAcked) {
            tracker.OnAck(double(a - lastAcked), Simulator::Now().GetSeconds());
            lastAcked = a;
        }
    }
    void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked, const Time& rtt) override {
        Track(tcb);
        Base::PktsAcked(tcb, segmentsAcked, rtt);
    }
    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override {
        Track(tcb);
        if (tcb->m_cWnd < tcb->m_ssThresh) {         // slow start: unchanged
            Base::IncreaseWindow(tcb, segmentsAcked);
            return;
        }
        uint32_t before = tcb->m_cWnd;
        Base::IncreaseWindow(tcb, segmentsAcked);
        uint32_t after = tcb->m_cWnd;
        if (after > before) {
            double inc = F() * double(after - before) + carry;
            double whole = std::floor(inc);
            carry = inc - whole;
            tcb->m_cWnd = before + uint32_t(whole);
        }
    }
    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override {
        uint32_t ss = Base::GetSsThresh(tcb, bytesInFlight);
        if (!scaleDecrease) return ss;
        double ref = ss / baseKeep;                  // what the base reduced from
        double r = tracker.Ratio();
        double removed = (ref - ss) * (decStart + (decEnd - decStart) * r) / 0.5;
        double v = std::max(2.0 * tcb->m_segmentSize, ref - removed);
        return uint32_t(v);
    }
    // restart_window: an iteration's first send restarts the window (Linux's restart after idle)
    bool IterationRestart(Ptr<TcpSocketState> tcb, double idle) {
        if (restartWindow <= 0) return false;
        bool start = (std::isinf(tracker.minIdle) || tracker.atTx) ? tracker.bytesCur == 0 : tracker.IsBoundary(idle);
        double w = restartWindow * tcb->m_segmentSize;
        if (!start || double(tcb->m_cWnd.Get()) <= w) return false;
        tcb->m_ssThresh = std::max<uint32_t>(tcb->m_ssThresh, uint32_t(0.75 * tcb->m_cWnd.Get()));
        tcb->m_cWnd = uint32_t(w);
        return true;
    }
    Ptr<TcpCongestionOps> Fork() override { return CopyObject<Mltcp<Base>>(this); }
};

// the hook's numbers: slope, intercept, shape, cap, exponent, decrease_at_start, decrease_at_end,
// idle_fraction, min_idle (inf with explicit marks), history, idle_gap == min2, scale_decrease,
// restart_window, boundary == tx_start
template <class M>
void SetHook(Ptr<M> m, const std::vector<double>& h, double baseKeep) {
    m->slope = h[0]; m->intercept = h[1]; m->shape = int(h[2]); m->cap = h[3]; m->exponent = h[4];
    m->decStart = h[5]; m->decEnd = h[6];
    m->tracker.idleFraction = h[7]; m->tracker.minIdle = h[8]; m->tracker.history = size_t(h[9]);
    m->tracker.min2 = h[10] != 0.0; m->scaleDecrease = h[11] != 0.0; m->restartWindow = h[12];
    m->tracker.atTx = h[13] != 0.0;
    m->baseKeep = baseKeep;
}

Ptr<TcpCongestionOps> MakeCc(std::string name, std::vector<double> hook, double baseKeep, bool linuxReno) {
    if (name == "reno" && !linuxReno) return CreateObject<HostNewReno>();
    if (name == "reno") return CreateObject<HostReno>();
    if (name == "cubic") return CreateObject<HostCubic>();
    NS_ABORT_MSG_IF(hook.size() != 14, "MakeCc: 14 hook numbers expected");
    if (name == "mltcp-reno" && !linuxReno) {
        Ptr<Mltcp<HostNewReno>> m = CreateObject<Mltcp<HostNewReno>>();
        SetHook(m, hook, baseKeep); m->name = "MltcpNewReno";
        return m;
    }
    if (name == "mltcp-reno") {
        Ptr<Mltcp<HostReno>> m = CreateObject<Mltcp<HostReno>>();
        SetHook(m, hook, baseKeep); m->name = "MltcpReno";
        return m;
    }
    if (name == "mltcp-cubic") {
        Ptr<Mltcp<HostCubic>> m = CreateObject<Mltcp<HostCubic>>();
        SetHook(m, hook, baseKeep); m->name = "MltcpCubic";
        return m;
    }
    NS_FATAL_ERROR("unknown congestion control " << name);
    return nullptr;
}

// fn(the MLTCP ops behind cc), for each base's Mltcp<Host<Base>>; `none` when cc is not MLTCP
template <class R, class Fn>
R WithMltcp(Ptr<TcpCongestionOps> cc, R none, Fn fn) {
    if (auto m = DynamicCast<Mltcp<HostReno>>(cc)) return fn(*PeekPointer(m));
    if (auto m = DynamicCast<Mltcp<HostNewReno>>(cc)) return fn(*PeekPointer(m));
    if (auto m = DynamicCast<Mltcp<HostCubic>>(cc)) return fn(*PeekPointer(m));
    return none;
}

// the same for the host-side ops (Host<Base>) of a plain base
template <class R, class Fn>
R WithHost(Ptr<TcpCongestionOps> cc, R none, Fn fn) {
    if (auto m = DynamicCast<HostReno>(cc)) return fn(*PeekPointer(m));
    if (auto m = DynamicCast<HostNewReno>(cc)) return fn(*PeekPointer(m));
    if (auto m = DynamicCast<HostCubic>(cc)) return fn(*PeekPointer(m));
    return none;
}

void MltcpIterationStart(Ptr<TcpCongestionOps> cc) {
    WithMltcp(cc, false, [](auto& m) { m.tracker.IterationStart(); return true; });
}

void MltcpTxStart(Ptr<TcpCongestionOps> cc, double now) {
    WithMltcp(cc, false, [now](auto& m) { m.tracker.TxStart(now); return true; });
}

bool MltcpIterationRestart(Ptr<TcpCongestionOps> cc, Ptr<TcpSocketState> tcb, double idle) {
    return WithMltcp(cc, false, [&](auto& m) { return m.IterationRestart(tcb, idle); });
}

double MltcpRatio(Ptr<TcpCongestionOps> cc) {
    return WithMltcp(cc, -1.0, [](auto& m) { return m.tracker.Ratio(); });
}

double MltcpBytesPerIter(Ptr<TcpCongestionOps> cc) {
    return WithMltcp(cc, -1.0, [](auto& m) { return m.tracker.bytesPerIter; });
}

// the NIC whose backlog does not count as the window's (Host<Base>); growths held back so far
void SetNic(Ptr<TcpCongestionOps> cc, Ptr<NetDevice> dev, double allowance) {
    Ptr<Queue<Packet>> q = DynamicCast<PointToPointNetDevice>(dev)->GetQueue();
    WithHost(cc, false, [&](auto& m) { m.nic = q; m.allowance = allowance; return true; });
}
uint32_t HeldGrowths(Ptr<TcpCongestionOps> cc) {
    return WithHost(cc, uint32_t(0), [](auto& m) { return m.held; });
}

// ---- PRR as RFC 6937 / Linux count delivered data (Ns3Options.recovery = "prr-rfc") ---------------
// ns-3 3.44's TcpPrrRecovery adds one segment to DeliveredData on every duplicate ACK even with SACK,
// where the caller's DeliveredData already counts the newly SACKed bytes: prr_delivered grows twice
// as fast as data leaves the network and PRR sends 2 x ssthresh / RecoverFS per delivered segment
// (CUBIC 1.4, Reno 1.0) instead of 0.7 / 0.5. This one counts DeliveredData once (RFC 6937 sec. 3;
// later ns-3 releases made the same change). Bound: PRR-CRB, PRR-SSRB once a retransmission is
// cumulatively acknowledged (Linux tcp_cwnd_reduction); the fast retransmit always goes out.
class PrrRfc : public TcpRecoveryOps {
  public:
    uint32_t delivered = 0, out = 0, recoverFs = 1;
    std::string GetName() const override { return "PrrRfc"; }
    void EnterRecovery(Ptr<TcpSocketState> tcb, uint32_t, uint32_t, uint32_t deliveredBytes) override {
        delivered = 0; out = 0;
        recoverFs = std::max<uint32_t>(tcb->m_bytesInFlight.Get(), 1);
        DoRecovery(tcb, deliveredBytes, true);
    }
    void DoRecovery(Ptr<TcpSocketState> tcb, uint32_t deliveredBytes, bool) override {
        if (deliveredBytes == 0) return;
        delivered += deliveredBytes;
        int64_t pipe = tcb->m_bytesInFlight.Get(), ss = tcb->m_ssThresh.Get(), snd;
        if (pipe > ss) {        // proportional part: ceil(delivered * ssthresh / RecoverFS) - out
            snd = (int64_t)((uint64_t(delivered) * uint64_t(ss) + recoverFs - 1) / recoverFs) - (int64_t)out;
        } else {                // reduction bound
            int64_t limit = std::max<int64_t>((int64_t)delivered - (int64_t)out, deliveredBytes);
            if (tcb->m_isRetransDataAcked) limit += tcb->m_segmentSize;
            snd = std::min<int64_t>(limit, ss - pipe);
        }
        snd = std::max<int64_t>(snd, out > 0 ? 0 : (int64_t)tcb->m_segmentSize);
        tcb->m_cWnd = (uint32_t)(pipe + snd);
        tcb->m_cWndInfl = tcb->m_cWnd;
    }
    void ExitRecovery(Ptr<TcpSocketState> tcb) override { tcb->m_cWndInfl = tcb->m_cWnd; }
    void UpdateBytesSent(uint32_t bytesSent) override { out += bytesSent; }
    Ptr<TcpRecoveryOps> Fork() override { return CopyObject<PrrRfc>(this); }
};

class Job;

// ---- one flow: a TCP connection on a sender host ----------------------------------------------
class Flow : public Application {
  public:
    Address peer;
    Ptr<TcpCongestionOps> cc;
    Ptr<Socket> sock;
    Job* job = nullptr;
    bool restartAfterIdle = true;
    bool marks = false;                // boundary = mark: tell the tracker where each iteration starts
    uint32_t mss = 1448;
    uint64_t target = 0;               // cumulative data bytes that must be acknowledged
    uint64_t acked = 0;
    uint64_t txBytes = 0;              // including retransmissions
    double lastTx = 0;
    bool waiting = false;
    int64_t synAck = 1;                // the SYN's sequence number is not data
    uint32_t retx = 0, timeouts = 0, recoveries = 0;   // retransmitted segments, RTOs, fast recoveries
    uint32_t iterationRestarts = 0;    // windows restarted at an iteration start (restart_window)
    uint32_t epochShifts = 0;          // CUBIC epochs moved by an idle period (bictcp_cwnd_event)
    SequenceNumber32 highSent{0};
    std::vector<double> dbgT, dbgSeq;  // filled when debug is set
    std::vector<double> cwT, cwV, ssV, rtoT;   // debug: every cwnd change (time, cwnd, ssthresh bytes), RTO times
    std::vector<double> rtoLeft, rtoUnsent;   // at each RTO: bytes not yet acked / not yet sent
    bool debug = false;
    bool prrRfc = false;               // recovery = "prr-rfc" (PrrRfc above)
    void SetDebug(bool d) { debug = d; }
    void SetPrrRfc(bool b) { prrRfc = b; }

    void StartApplication() override {
        sock = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        Ptr<TcpSocketBase> tsb = DynamicCast<TcpSocketBase>(sock);
        if (cc) tsb->SetCongestionControlAlgorithm(cc);
        if (prrRfc) tsb->SetRecoveryAlgorithm(CreateObject<PrrRfc>());
        sock->TraceConnectWithoutContext("HighestRxAck", MakeCallback(&Flow::OnAck, this));
        sock->TraceConnectWithoutContext("Tx", MakeCallback(&Flow::OnTx, this));
        sock->TraceConnectWithoutContext("CongState", MakeCallback(&Flow::OnState, this));
        if (debug) sock->TraceConnectWithoutContext("CongestionWindow", MakeCallback(&Flow::OnCwnd, this));
        sock->Bind();
        sock->Connect(peer);
    }
    void StopApplication() override {
        if (sock) sock->Close();
    }
    void OnTx(Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase> s) {
        if (p->GetSize() > 0) {
            txBytes += p->GetSize();
            lastTx = Simulator::Now().GetSeconds();
            SequenceNumber32 seq = h.GetSequenceNumber();
            if (seq < highSent) retx++;
            else highSent = seq + p->GetSize();
            if (debug) { dbgT.push_back(lastTx); dbgSeq.push_back(seq.GetValue()); }
        }
    }
    void OnCwnd(uint32_t oldv, uint32_t newv) {
        Ptr<TcpSocketBase> tsb = DynamicCast<TcpSocketBase>(sock);
        cwT.push_back(Simulator::Now().GetSeconds()); cwV.push_back(newv);
        ssV.push_back(SocketPeek::Tcb(PeekPointer(tsb))->m_ssThresh.Get());
    }
    void OnState(TcpSocketState::TcpCongState_t oldv, TcpSocketState::TcpCongState_t newv) {
        if (newv == TcpSocketState::CA_LOSS) {
            timeouts++;
            if (debug) rtoT.push_back(Simulator::Now().GetSeconds());
            Ptr<TcpSocketBase> tsb = DynamicCast<TcpSocketBase>(sock);
            Ptr<TcpSocketState> tcb = SocketPeek::Tcb(PeekPointer(tsb));
            rtoLeft.push_back(double(target) - double(acked));          // bytes of the iteration not yet acked
            rtoUnsent.push_back(double(target + 1) - double(tcb->m_highTxMark.Get().GetValue()));  // never sent yet
        }
        if (newv == TcpSocketState::CA_RECOVERY) recoveries++;
    }
    void Send(uint64_t bytes);
    void OnAck(SequenceNumber32 oldv, SequenceNumber32 newv);
};

// ---- a job: compute, then every flow sends its share; the iteration ends when all are acked ------
class Job : public SimpleRefCount<Job> {
  public:
    int index = 0;
    std::vector<Ptr<Flow>> flows;
    std::vector<double> compute;       // per iteration
    double startOffset = 0;
    uint64_t flowBytes = 0;
    int iter = 0, pending = 0;
    bool done = false;
    double itStart = 0, commStart = 0;
    double drops = 0, marks = 0, dropsAt = 0, marksAt = 0;
    std::vector<double> rStart, rComm, rEnd, rDrops, rMarks;
    // delivered bytes per trace bin (receiver side)
    double binWidth = 0;
    std::vector<double> bins;

    void Start() {
        itStart = startOffset;
        Simulator::Schedule(Seconds(startOffset + compute[0]), &Job::BeginComm, this);
    }
    void BeginComm() {
        commStart = Simulator::Now().GetSeconds();
        dropsAt = drops; marksAt = marks;
        pending = int(flows.size());
        for (auto& f : flows) f->Send(flowBytes);
    }
    void FlowDone() {
        if (--pending > 0) return;
        double now = Simulator::Now().GetSeconds();
        rStart.push_back(itStart); rComm.push_back(commStart); rEnd.push_back(now);
        rDrops.push_back(drops - dropsAt); rMarks.push_back(marks - marksAt);
        iter++;
        if (iter >= int(compute.size())) { done = true; return; }
        itStart = now;
        Simulator::Schedule(Seconds(compute[iter]), &Job::BeginComm, this);
    }
    void OnRx(Ptr<const Packet> p, const Address& from) {
        if (binWidth <= 0) return;
        size_t b = size_t(Simulator::Now().GetSeconds() / binWidth);
        if (bins.size() <= b) bins.resize(b + 1, 0.0);
        bins[b] += p->GetSize();
    }
    void WatchSink(Ptr<Application> sink) {
        sink->TraceConnectWithoutContext("Rx", MakeCallback(&Job::OnRx, this));
    }
};

void Flow::Send(uint64_t bytes) {
    Ptr<TcpSocketBase> tsb = DynamicCast<TcpSocketBase>(sock);
    double now = Simulator::Now().GetSeconds();
    Ptr<TcpCubic> cubic = DynamicCast<TcpCubic>(cc);
    if (cubic && txBytes > 0 && now > lastTx) {
        // Linux bictcp_cwnd_event(CA_EVENT_TX_START): the curve's epoch moves by the idle time, so
        // W(t) does not count time the flow was not sending (ns-3's TcpCubic counts it)
        Time& epoch = PeekPointer(cubic)->*Field(CubicEpoch());
        if (epoch != Time::Min()) {
            epoch = std::min(epoch + Seconds(now - lastTx), Simulator::Now());
            epochShifts++;
        }
    }
    if (restartAfterIdle && txBytes > 0) {
        // Linux tcp_cwnd_restart: halve cwnd once per RTO idle, not below the initial window
        Ptr<TcpSocketState> tcb = SocketPeek::Tcb(PeekPointer(tsb));
        double rto = SocketPeek::Rto(PeekPointer(tsb)).GetSeconds();
        double idle = now - lastTx;
        if (rto > 0 && idle > rto) {
            uint32_t cwnd = tcb->m_cWnd;
            uint32_t restart = std::min<uint32_t>(10 * tcb->m_segmentSize, cwnd);
            tcb->m_ssThresh = std::max<uint32_t>(tcb->m_ssThresh, cwnd / 4 * 3);
            double halvings = std::floor(idle / rto);
            double w = double(cwnd) / std::pow(2.0, std::min(halvings, 60.0));
            tcb->m_cWnd = std::max<uint32_t>(uint32_t(w), restart);
        }
    }
    if (marks && cc) MltcpIterationStart(cc);
    if (cc) MltcpTxStart(cc, now);
    if (cc && txBytes > 0)
        iterationRestarts += MltcpIterationRestart(cc, SocketPeek::Tcb(PeekPointer(tsb)), now - lastTx);
    target += bytes;
    waiting = true;
    int sent = sock->Send(Create<Packet>(uint32_t(bytes)));
    NS_ABORT_MSG_IF(sent < 0, "socket send buffer too small for one iteration");
}

void Flow::OnAck(SequenceNumber32 oldv, SequenceNumber32 newv) {
    int32_t d = newv - oldv;
    if (d <= 0) return;
    int64_t step = d;
    if (synAck > 0) { int64_t s = std::min<int64_t>(synAck, step); synAck -= s; step -= s; }
    acked += uint64_t(step);
    if (waiting && acked >= target) {
        waiting = false;
        job->FlowDone();
    }
}

// ---- drops and ECN marks by sender address ----------------------------------------------------
class Counters : public SimpleRefCount<Counters> {
  public:
    std::map<uint32_t, Job*> bySource;
    double drops = 0, marks = 0, otherDrops = 0;
    bool keepDrops = false;                  // diagnosis: every drop's time and job (trace mode)
    std::vector<double> dropT;
    std::vector<uint32_t> dropSrc;
    void KeepDrops(bool k) { keepDrops = k; }
    void Add(Ipv4Address src, Ptr<Job> job) { bySource[src.Get()] = PeekPointer(job); }
    void Hit(uint32_t src, bool mark) {
        auto it = bySource.find(src);
        if (it == bySource.end()) { if (!mark) otherDrops += 1; return; }
        if (keepDrops && !mark) { dropT.push_back(Simulator::Now().GetSeconds()); dropSrc.push_back(src); }
        if (mark) { it->second->marks += 1; marks += 1; }
        else { it->second->drops += 1; drops += 1; }
    }
    void OnDeviceDrop(Ptr<const Packet> p) {
        Ptr<Packet> c = p->Copy();
        PppHeader ppp;
        c->RemoveHeader(ppp);
        Ipv4Header ip;
        c->PeekHeader(ip);
        Hit(ip.GetSource().Get(), false);
    }
    void OnTcDrop(Ptr<const Packet> p) {       // device queue full, no queue disc: the TC layer drops
        Ipv4Header ip;
        p->PeekHeader(ip);
        Hit(ip.GetSource().Get(), false);
    }
    void WatchNode(Ptr<Node> node) {
        node->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext("TcDrop", MakeCallback(&Counters::OnTcDrop, this));
    }
    void OnDiscDrop(Ptr<const QueueDiscItem> item) {
        Ptr<const Ipv4QueueDiscItem> i = DynamicCast<const Ipv4QueueDiscItem>(item);
        if (i) Hit(i->GetHeader().GetSource().Get(), false);
    }
    void OnDiscMark(Ptr<const QueueDiscItem> item, const char* why) {
        Ptr<const Ipv4QueueDiscItem> i = DynamicCast<const Ipv4QueueDiscItem>(item);
        if (i) Hit(i->GetHeader().GetSource().Get(), true);
    }
    void WatchDevice(Ptr<NetDevice> dev) {
        Ptr<PointToPointNetDevice> p = DynamicCast<PointToPointNetDevice>(dev);
        p->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&Counters::OnDeviceDrop, this));
    }
    void WatchDisc(Ptr<QueueDisc> q) {
        q->TraceConnectWithoutContext("Drop", MakeCallback(&Counters::OnDiscDrop, this));
        q->TraceConnectWithoutContext("Mark", MakeCallback(&Counters::OnDiscMark, this));
    }
};

// ---- host jitter: random sending-host processing time (Floyd & Jacobson's cure for phase effects) --
// A point-to-point channel that delays each packet its side-0 device sends by a uniform draw in
// [0, maxJitter) on top of the propagation delay. maxJitter <= one packet's transmission time at
// that device, so packets of one host never overtake each other.
struct JitterChannel : public PointToPointChannel {
    Ptr<UniformRandomVariable> rv = CreateObject<UniformRandomVariable>();
    double maxJitter = 0;
    bool TransmitStart(Ptr<const Packet> p, Ptr<PointToPointNetDevice> src, Time txTime) override {
        uint32_t wire = (src == GetSource(0)) ? 0 : 1;
        Ptr<PointToPointNetDevice> dst = GetDestination(wire);
        Time extra = (wire == 0 && maxJitter > 0) ? Seconds(rv->GetValue(0, maxJitter)) : Time(0);
        Simulator::ScheduleWithContext(dst->GetNode()->GetId(), txTime + GetDelay() + extra,
                                       &PointToPointNetDevice::Receive, dst, p->Copy());
        return true;
    }
};

// Moves the two devices of a helper-built link (a first) onto a JitterChannel with the same delay.
void AddHostJitter(Ptr<NetDevice> a, Ptr<NetDevice> b, double delay, double maxJitter, int64_t stream) {
    Ptr<JitterChannel> ch = CreateObject<JitterChannel>();
    ch->SetAttribute("Delay", TimeValue(Seconds(delay)));
    ch->maxJitter = maxJitter;
    ch->rv->SetStream(stream);
    DynamicCast<PointToPointNetDevice>(a)->Attach(ch);
    DynamicCast<PointToPointNetDevice>(b)->Attach(ch);
}

// ---- topology helpers (thin wrappers that keep cppyy away from templates) ----------------------
void SetDeviceQueue(Ptr<NetDevice> dev, uint32_t packets) {
    Ptr<PointToPointNetDevice> p = DynamicCast<PointToPointNetDevice>(dev);
    p->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, packets));
}

void AddHostRoute(Ptr<Node> node, Ptr<NetDevice> out, Ipv4Address dest, Ipv4Address nextHop) {
    Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
    Ipv4StaticRoutingHelper h;
    Ptr<Ipv4StaticRouting> r = h.GetStaticRouting(ipv4);
    r->AddHostRouteTo(dest, nextHop, ipv4->GetInterfaceForDevice(out));
}

Ptr<Flow> MakeFlow(Ptr<Node> node, Address peer, Ptr<TcpCongestionOps> cc, bool restart, bool marks) {
    Ptr<Flow> f = CreateObject<Flow>();
    f->peer = peer; f->cc = cc; f->restartAfterIdle = restart; f->marks = marks;
    node->AddApplication(f);
    f->SetStartTime(Seconds(0));
    return f;
}

Ptr<Job> MakeJob(int index, double startOffset, uint64_t flowBytes, double binWidth) {
    Ptr<Job> j = Create<Job>();
    j->index = index; j->startOffset = startOffset; j->flowBytes = flowBytes; j->binWidth = binWidth;
    return j;
}

Ptr<Counters> MakeCounters() { return Create<Counters>(); }

void Attach(Ptr<Job> job, Ptr<Flow> f) { f->job = PeekPointer(job); job->flows.push_back(f); }

void ScheduleJob(Ptr<Job> job) { Simulator::ScheduleNow(&Job::Start, PeekPointer(job)); }

}  // namespace mltcpns3
"""

_loaded = False


def load():
    """Import ns-3 (PyPI ``ns3``) and compile the classes above once per process; returns
    ``(ns, mltcpns3)``. Raises ImportError when ns-3 is not installed."""
    global _loaded
    from ns import ns  # noqa: F401  (PyPI ns3: loads the ns-3 libraries and headers into cppyy)
    import cppyy
    if not _loaded:
        if not cppyy.cppdef(CXX):
            raise RuntimeError("compiling the ns-3 helper classes failed")
        _loaded = True
    return ns, cppyy.gbl.mltcpns3
