// Flow (one TCP connection on a sender host) and Job (compute, then every flow sends its share).
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"
#include "access.h"
#include "mltcp_cc.h"
#include "prr_rfc.h"

namespace mltcpns3 {
using namespace ns3;

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
    bool prrRfc = false;               // recovery = "prr-rfc" (PrrRfc, prr_rfc.h)
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

}  // namespace mltcpns3
