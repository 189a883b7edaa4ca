// Mltcp<Base>: MLTCP as a TcpCongestionOps subclass of a stock algorithm; MakeCc and the
// accessors Python and the flow application call.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"
#include "tracker.h"
#include "host.h"

namespace mltcpns3 {
using namespace ns3;

// ---- MLTCP = base algorithm + aggressiveness hook ---------------------------------------------
template <class Base>
class Mltcp : public Base {
  public:
    double slope = 4.0, intercept = 0.25;
    int shape = 0;                     // 0 linear, 1 capped (min(cap, linear)), 2 convex (slope r^exponent + intercept)
    double cap = INFINITY, exponent = 2.0;
    bool scaleDecrease = false;
    double restartWindow = 0;          // segments; 0 = off (mltcp.cc.mltcp.iteration_restart)
    double minWindow = 0;              // segments: below this window (or the path BDP if less) F never slows the increase
    double aboveBdpGain = 1.0;         // disengaged, a window above the path BDP grows x this (mltcp.cc.mltcp.window_gain)
    double decStart = 0.8, decEnd = 0.2;   // fraction removed at r = 0 / r = 1, in Reno terms (x base / 0.5)
    double baseKeep = 0.5;             // fraction of the window the base keeps on a reduction
    std::string name = "Mltcp";
    Tracker tracker;
    SequenceNumber32 lastAcked{1};     // ns-3's ISN is 0: data starts at 1
    double carry = 0;

    std::string GetName() const override { return name; }
    double F() const {                 // 1 (the base) while the online switch has the hook off
        if (!tracker.Engaged()) return 1.0;
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
            double f = F();             // mltcp.cc.mltcp.window_gain
            if (!tracker.Engaged()) {
                double bdp = Bdp(tcb);
                if (bdp > 0.0 && double(before) > bdp) f = aboveBdpGain;
            } else if (f < 1.0 && double(before) < FloorBytes(tcb)) {
                f = 1.0;
            }
            double inc = f * double(after - before) + carry;
            double whole = std::floor(inc);
            carry = inc - whole;
            tcb->m_cWnd = before + uint32_t(whole);
        }
    }
    // mltcp.cc.mltcp.floor_bytes: minWindow segments, at most the path's BDP once known (the best
    // rate of a completed iteration x the min RTT): a flow at one BDP fills the link alone
    double FloorBytes(Ptr<TcpSocketState> tcb) const {
        double floor = minWindow * tcb->m_segmentSize, bdp = Bdp(tcb);
        return bdp > 0.0 ? std::min(floor, bdp) : floor;
    }
    // mltcp.tracker.path_bdp: the best rate of a completed iteration x the min RTT, 0 until both are known
    double Bdp(Ptr<TcpSocketState> tcb) const {
        return tcb->m_minRtt != Time::Max() ? tracker.bestRate * tcb->m_minRtt.GetSeconds() : 0.0;
    }
    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override {
        uint32_t ss = Base::GetSsThresh(tcb, bytesInFlight);
        if (!scaleDecrease || !tracker.Engaged()) return ss;
        double ref = ss / baseKeep;                  // what the base reduced from
        double r = tracker.Ratio();
        double removed = (ref - ss) * (decStart + (decEnd - decStart) * r) / 0.5;
        double v = std::max(2.0 * tcb->m_segmentSize, ref - removed);
        return uint32_t(v);
    }
    // restart_window: an iteration's first send restarts the window (Linux's restart after idle)
    bool IterationRestart(Ptr<TcpSocketState> tcb, double idle) {
        if (restartWindow <= 0 || !tracker.Engaged()) return false;
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
// restart_window, boundary == tx_start, adaptive, trial, contended_above, hold_max, min_window,
// above_bdp_gain
template <class M>
void SetHook(Ptr<M> m, const std::vector<double>& h, double baseKeep) {
    m->slope = h[0]; m->intercept = h[1]; m->shape = int(h[2]); m->cap = h[3]; m->exponent = h[4];
    m->decStart = h[5]; m->decEnd = h[6];
    m->tracker.idleFraction = h[7]; m->tracker.minIdle = h[8]; m->tracker.history = size_t(h[9]);
    m->tracker.min2 = h[10] != 0.0; m->scaleDecrease = h[11] != 0.0; m->restartWindow = h[12];
    m->tracker.atTx = h[13] != 0.0;
    m->tracker.adaptive = h[14] != 0.0; m->tracker.trial = h[15]; m->tracker.contendedAbove = h[16];
    m->tracker.holdMax = h[17]; m->minWindow = h[18]; m->aboveBdpGain = h[19];
    m->baseKeep = baseKeep;
}

Ptr<TcpCongestionOps> MakeCc(std::string name, std::vector<double> hook, double baseKeep, bool linuxReno) {
    if (name == "reno" && !linuxReno) return CreateObject<HostNewReno>();
    if (name == "reno") return CreateObject<HostReno>();
    if (name == "cubic") return CreateObject<HostCubic>();
    NS_ABORT_MSG_IF(hook.size() != 20, "MakeCc: 20 hook numbers expected");
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

// the online switch at the end of the run: 1 engaged, 0 the base algorithm, -1 not MLTCP
double MltcpEngaged(Ptr<TcpCongestionOps> cc) {
    return WithMltcp(cc, -1.0, [](auto& m) { return m.tracker.Engaged() ? 1.0 : 0.0; });
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

}  // namespace mltcpns3
