// The C++ half of the ns-3 engine (mltcp/sim/ns3_engine.py), compiled at run time by cppyy
// (mltcp/sim/ns3_cxx.py: cppyy.include of this file). Everything is in namespace mltcpns3.
#pragma once
#include "access.h"
#include "tracker.h"
#include "host.h"
#include "mltcp_cc.h"
#include "prr_rfc.h"
#include "app.h"
#include "counters.h"
#include "jitter.h"
#include "topology.h"
