// Host<Base>: a stock ns-3 congestion control with the host NIC's limit on window growth.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

namespace mltcpns3 {
using namespace ns3;

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

}  // namespace mltcpns3
