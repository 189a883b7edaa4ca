// The ns-3 modules and standard headers every part of the ns-3 engine's C++ uses.
#pragma once
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
