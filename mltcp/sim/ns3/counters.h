// Counters: drops and ECN marks by sender address.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

namespace mltcpns3 {
using namespace ns3;

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

}  // namespace mltcpns3
