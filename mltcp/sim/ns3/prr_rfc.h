// PrrRfc: proportional rate reduction counting delivered data as RFC 6937 and Linux do.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

namespace mltcpns3 {
using namespace ns3;

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

}  // namespace mltcpns3
