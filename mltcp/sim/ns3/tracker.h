// The iteration tracker for one flow (mltcp/tracker.py's IterationTracker).
// Part of the ns-3 engine (mltcp/sim/ns3_engine.py); compiled at run time by cppyy through mltcp_ns3.h.
#pragma once
#include "common.h"

namespace mltcpns3 {
using namespace ns3;

// ---- the iteration tracker (mltcp/tracker.py, one flow) ----------------------------------------
struct Tracker {
    double idleFraction = 0.9, minIdle = 1e-3;   // minIdle = inf: explicit marks only (boundary = mark)
    size_t history = 3;                // bytes per iteration = median of the last `history` iterations
    bool min2 = false;                 // idle_gap = min2: the threshold's reference is the shorter of the last two gaps
    bool atTx = false;                 // boundary = tx_start: the idle rule is checked at TxStart, not at the ACK
    double bytesCur = 0, bytesPerIter = 0, lastActive = -1, lastGap = 0, prevGap = 0;
    std::vector<double> hist;          // newest first, at most `history`
    void OnAck(double acked, double now) {
        if (acked <= 0) return;
        if (lastActive >= 0 && !atTx) Gap(now - lastActive);
        bytesCur += acked;
        lastActive = now;
    }
    void TxStart(double now) { if (lastActive >= 0 && atTx) Gap(now - lastActive); }   // tracker.tx_start
    void Gap(double gap) {
        if (!IsBoundary(gap)) return;
        prevGap = lastGap;
        lastGap = gap;
        if (bytesCur > 0) Close();
    }
    bool IsBoundary(double gap) const {       // does an idle gap start an iteration (tracker.is_boundary)
        double ref = (min2 && prevGap > 0) ? std::min(lastGap, prevGap) : lastGap;
        return gap > std::max(minIdle, idleFraction * ref);
    }
    void IterationStart() { if (bytesCur > 0) Close(); }   // explicit mark from the framework
    void Close() {
        hist.insert(hist.begin(), bytesCur);
        if (hist.size() > history) hist.resize(history);
        std::vector<double> s(hist);
        std::sort(s.begin(), s.end());
        size_t n = s.size();
        bytesPerIter = (s[(n - 1) / 2] + s[n / 2]) / 2.0;
        bytesCur = 0;
    }
    double Ratio() const {
        if (bytesPerIter <= 0) return 0.0;
        return std::min(1.0, std::max(0.0, bytesCur / bytesPerIter));
    }
};

}  // namespace mltcpns3
