"""Retransmission timer estimator (RFC 6298)."""

from __future__ import annotations


class RttEstimator:
    """SRTT/RTTVAR/RTO per RFC 6298 with a configurable minimum RTO (Linux uses 200 ms).

    ``granularity`` is the clock granularity G of the RFC; RTO = SRTT + max(G, 4 RTTVAR),
    clamped to [min_rto, max_rto]. ``backoff()`` doubles the RTO after a timeout (5.5);
    the next RTT sample restores the computed value.
    """

    K = 4
    ALPHA = 1 / 8
    BETA = 1 / 4

    def __init__(
        self, min_rto: float = 0.2, max_rto: float = 60.0, initial_rto: float = 1.0, granularity: float = 1e-3
    ):
        if min_rto <= 0 or max_rto < min_rto:
            raise ValueError(f"need 0 < min_rto <= max_rto, got {min_rto}, {max_rto}")
        self.min_rto, self.max_rto, self.g = min_rto, max_rto, granularity
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt = float("inf")
        self.latest = 0.0
        self._rto = max(min_rto, min(initial_rto, max_rto))
        self._backoff = 1

    def sample(self, r: float) -> None:
        if r < 0:
            return
        self.latest = r
        self.min_rtt = min(self.min_rtt, r)
        if self.srtt is None:  # (2.2) first measurement
            self.srtt, self.rttvar = r, r / 2
        else:  # (2.3) rttvar first, with the old srtt
            self.rttvar = (1 - self.BETA) * self.rttvar + self.BETA * abs(self.srtt - r)
            self.srtt = (1 - self.ALPHA) * self.srtt + self.ALPHA * r
        self._rto = min(self.max_rto, max(self.min_rto, self.srtt + max(self.g, self.K * self.rttvar)))
        self._backoff = 1

    def backoff(self) -> None:
        self._backoff = min(self._backoff * 2, 1 << 16)

    @property
    def rto(self) -> float:
        return min(self.max_rto, self._rto * self._backoff)
