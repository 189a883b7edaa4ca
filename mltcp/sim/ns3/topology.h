// Topology helpers Python calls (thin wrappers that keep cppyy away from templates).
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"
#include "app.h"
#include "counters.h"

namespace mltcpns3 {
using namespace ns3;

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
