// Access to ns-3 TCP internals the flow application needs: TcpSocketBase's state and RTO,
// TcpCubic's epoch.
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

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

}  // namespace mltcpns3
