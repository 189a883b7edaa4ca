"""Memory a receiver holds when 100 MB arrive out of order behind a hole (issue 12): prints the
bytes held, datagrams refused, RSS growth and CPU per datagram. Run: python bench/bench_receiver_flood.py"""

import resource
import time
from mltcp.traffic.transport import Receiver, auth, wire, pattern


def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


rx = Receiver(("127.0.0.1", 0))
base = rss()
mss = wire.DEFAULT_PAYLOAD
key = bytes(16)  # the flood is authenticated (an attacker holding the flow's key): it reaches the buffers
t0 = time.process_time()
n = 0
for seq in range(mss, 100_000_000, mss):  # 100 MB far ahead of a hole at 0
    d = auth.seal(wire.encode(0, 1, 0, 0, 7, seq, 0, 0, 0, mss, wire.T_DATA) + pattern.chunk(seq, mss), key, True)
    rx.handle(d, len(d), ("127.0.0.1", 40000), 0, 0.0)
    n += 1
(f,) = rx.flows.values()
print(
    f"sent {n * mss / 1e6:.1f} MB out of order; held {f.ra.held_bytes / 1e6:.1f} MB in {len(f.ra._segs)} segments; "
    f"refused {f.refused} datagrams; max RSS grew {rss() - base:.1f} MB; "
    f"{1e6 * (time.process_time() - t0) / n:.1f} us CPU per datagram"
)
