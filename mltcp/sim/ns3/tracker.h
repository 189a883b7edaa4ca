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
    double firstAck = 0, lastComm = 0, bestRate = 0;   // the iteration's first ACK; last one's busy time; best rate
    double idleIn = 0, idlePending = 0;   // idle time inside the iteration; a send's gap not yet counted
    std::vector<double> hist;          // newest first, at most `history`
    // the online switch (mltcp/engage.py): on with `adaptive`, judged at each close
    bool adaptive = false, engaged = true;
    double trial = 4, contendedAbove = 1.25, holdMax = 32, inMode = 0, contended = 0, hold = 0;
    void OnAck(double acked, double now) {
        if (acked <= 0) return;
        if (lastActive >= 0 && !atTx) Gap(now - lastActive);
        idleIn += idlePending;           // the gap before a send inside the iteration (0 if it closed)
        idlePending = 0;
        if (bytesCur == 0) firstAck = now;
        bytesCur += acked;
        lastActive = now;
    }
    void TxStart(double now) {         // tracker.send_after_idle, and tracker.tx_start with atTx
        if (bytesCur > 0 && now > lastActive) idlePending = now - lastActive;
        if (lastActive >= 0 && atTx) Gap(now - lastActive);
    }
    void Gap(double gap) {
        if (!IsBoundary(gap)) return;
        prevGap = lastGap;
        lastGap = gap;
        if (bytesCur > 0) Close();
    }
    bool IsBoundary(double gap) const {       // does an idle gap start an iteration (tracker.is_boundary)
        if (!(gap > minIdle)) return false;
        if (bytesPerIter > 0 && bytesCur >= 2 * bytesPerIter) return true;   // two iterations' bytes: one missed
        double ref = (min2 && prevGap > 0) ? std::min(lastGap, prevGap) : lastGap;
        return gap > std::max(minIdle, idleFraction * ref);
    }
    void IterationStart() { if (bytesCur > 0) Close(); }   // explicit mark from the framework
    double Stretch() const {           // engage.stretch: last comm time over its bytes at the best rate
        if (bestRate <= 0 || lastComm <= 0 || hist.empty() || hist[0] <= 0) return 1.0;
        return lastComm * bestRate / hist[0];
    }
    void Judge() {                     // engage.judge
        bool c = Stretch() > contendedAbove;
        inMode += 1;
        if (engaged) {
            contended += c;
            if (inMode < trial) return;
            if (2 * contended > inMode) { engaged = false; hold = std::min(std::max(2 * hold, trial), holdMax); }
            else hold = 0;
            inMode = contended = 0;
        } else if (inMode >= std::max(hold, 1.0) && c) {
            engaged = true;
            inMode = contended = 0;
        }
    }
    bool Engaged() const { return !adaptive || engaged; }
    void Close() {
        lastComm = lastActive - firstAck - idleIn;   // busy time: idle gaps inside left out
        idleIn = idlePending = 0;
        if (lastComm > 0) bestRate = std::max(bestRate, bytesCur / lastComm);
        hist.insert(hist.begin(), bytesCur);
        if (hist.size() > history) hist.resize(history);
        std::vector<double> s(hist);
        std::sort(s.begin(), s.end());
        size_t n = s.size();
        bytesPerIter = (s[(n - 1) / 2] + s[n / 2]) / 2.0;
        bytesCur = 0;
        if (adaptive) Judge();
    }
    double Ratio() const {
        if (bytesPerIter <= 0) return 0.0;
        return std::min(1.0, std::max(0.0, bytesCur / bytesPerIter));
    }
};

}  // namespace mltcpns3
