// JitterChannel: random sending-host processing time on a point-to-point link.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

namespace mltcpns3 {
using namespace ns3;

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

}  // namespace mltcpns3
