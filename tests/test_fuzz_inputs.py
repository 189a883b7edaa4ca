"""Property-based fuzzing (hypothesis) of everything that reads outside input (issue 12, item 5):
the scenario and topology loaders, the MLTCP shim header, and the userspace transport's wire
decoding on both ends.

Bounded and never flaky: every test has a fixed example budget (``max_examples``), runs
derandomized (the same examples on every run, no example database), and has a per-example
deadline far above what an example takes (each takes milliseconds; the deadline guards against
a hang, not against a slow machine). The number of cases actually run is printed at the end
(``fuzz cases run: N``)."""

from __future__ import annotations

import math
import socket
import tomllib
import zlib
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mltcp import scenario as scn
from mltcp.controlplane.topology import MAX_PORT, MAX_THRESHOLD, TopologyError, load_topology, parse_topology
from mltcp.traffic import header
from mltcp.traffic.transport import FlowSender, Receiver, auth, build_cc, pattern, wire
from mltcp.traffic.transport.reassembly import Reassembly

CASES = {"n": 0}
OUTCOMES: dict[str, int] = {}  # "<test>:<outcome>" -> count, printed with the total


def fuzz(n: int):
    """The suite's settings: ``n`` examples, derandomized, no database, a generous deadline."""
    return settings(
        max_examples=n,
        deadline=timedelta(seconds=10),
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def counted():
    CASES["n"] += 1


def outcome(what: str) -> None:
    OUTCOMES[what] = OUTCOMES.get(what, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report_count(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cap = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and cap is not None:
        with cap.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(
                f"fuzz cases run: {CASES['n']} ({', '.join(f'{k} {v}' for k, v in sorted(OUTCOMES.items()))})"
            )


# -- values of every TOML type, with the edges that broke things -----------------------------------

EDGE_NUMBERS = [
    0,
    1,
    -1,
    2,
    64,
    1448,
    9000,
    10_000,
    100_000,
    100_001,
    10**9,
    10**12,
    2**63 - 1,
    -(2**63),
    0.0,
    -0.0,
    0.5,
    1.0,
    1e-9,
    1e-300,
    1e30,
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
]
scalars = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "l",
            "l{g}",
            "l{i}",
            "{x}",
            "{",
            "}",
            "l{0}",
            "",
            "reno",
            "red",
            "step",
            "none",
            "fluid",
            "packet",
            "vgg16",
            "resnet50",
        ]
    ),
)
plausible = st.one_of(st.integers(0, 50), st.floats(0.001, 500), st.sampled_from(["l", "m{i}", "reno", "step"]))
values = st.one_of(
    plausible,
    plausible,
    scalars,
    st.lists(st.one_of(plausible, scalars), max_size=4),
    st.dictionaries(st.text(max_size=6), scalars, max_size=3),
)

BASE_SCENARIO = {
    "name": "fuzz",
    "iterations": 20,
    "warmup_iterations": 2,
    "seed": 1,
    "cc": "reno",
    "network": {"mss": 1448, "step_us": 20, "min_rto_ms": 200},
    "links": [
        {"name": "l", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 20},
        {"name": "m", "count": 2, "rate_mbps": 100, "delay_ms": 0.1, "buffer_bdp": 2, "ecn": "step", "ecn_k_pkts": 5},
    ],
    "jobs": [
        {"name": "a", "compute_ms": 1, "bytes": 100_000, "path": ["l"]},
        {"name": "b", "count": 2, "compute_ms": 2, "comm_mb": 0.5, "path": ["m{i}"], "stagger_ms": 1},
    ],
    "mltcp": {"slope": 4.0, "intercept": 0.25},
}
SCENARIO_KEYS = {
    (): [
        "name",
        "iterations",
        "warmup_iterations",
        "seed",
        "cc",
        "description",
        "network",
        "links",
        "jobs",
        "mltcp",
        "cc_params",
        "bogus",
    ],
    ("network",): ["mss", "step_us", "min_rto_ms", "host_delay_us", "slow_start_after_idle", "loss_model", "x"],
    ("links", 0): [
        "name",
        "count",
        "rate_gbps",
        "rate_mbps",
        "delay_us",
        "delay_ms",
        "buffer_pkts",
        "buffer_kb",
        "buffer_bdp",
        "ecn",
        "ecn_k_pkts",
        "ecn_k_kb",
        "red_kmin_pkts",
        "red_kmax_pkts",
        "red_pmax",
    ],
    ("links", 1): ["name", "count", "rate_mbps", "delay_ms", "buffer_bdp", "ecn", "ecn_k_pkts", "red_pmax"],
    ("jobs", 0): [
        "name",
        "count",
        "share",
        "model",
        "workers",
        "compute_ms",
        "compute_s",
        "bytes",
        "comm_mb",
        "start_offset_ms",
        "start_offset_s",
        "stagger_ms",
        "path",
        "jitter",
        "straggler_prob",
        "straggler_delay_ms",
        "iterations",
    ],
    ("jobs", 1): ["name", "count", "share", "compute_ms", "comm_mb", "path", "stagger_ms", "iterations"],
    ("mltcp",): ["slope", "intercept", "idle_fraction", "min_idle_ms", "scale_decrease", "y"],
}
mutation = st.tuples(st.sampled_from(sorted(SCENARIO_KEYS, key=str)), st.integers(0, 20), st.one_of(st.none(), values))


def _mutated(base, table, muts):
    import copy

    doc = copy.deepcopy(base)
    for where, k, v in muts:
        node = doc
        try:
            for part in where:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(node, dict):
            continue
        keys = table[where]
        key = keys[k % len(keys)]
        if v is None:
            node.pop(key, None)
        else:
            node[key] = v
    return doc


def _check_scenario(sc):
    assert 1 <= len(sc.jobs) <= scn.MAX_JOBS and 1 <= len(sc.links) <= scn.MAX_LINKS
    for lk in sc.links.values():
        assert scn.MIN_RATE_BPS <= lk.rate_bps <= scn.MAX_RATE_BPS
        assert 0 <= lk.delay_s <= scn.MAX_DELAY_S and 1 <= lk.buffer_bytes <= scn.MAX_BUFFER_BYTES
    for j in sc.jobs:
        assert j.path and all(h in sc.links for h in j.path)
        assert 0 < j.bytes_per_iter <= scn.MAX_BYTES_PER_ITER and 0 <= j.compute_s <= scn.MAX_TIME_S
        assert 1 <= j.iterations <= scn.MAX_ITERATIONS and sc.warmup_iterations < j.iterations
        assert all(
            math.isfinite(x)
            for x in (j.compute_s, j.bytes_per_iter, j.start_offset_s, j.jitter, j.straggler_prob, j.straggler_delay_s)
        )
        assert sc.ideal_iter_s(j) > 0 and math.isfinite(sc.ideal_iter_s(j))
    for v in sc.mltcp_params.values():
        assert isinstance(v, bool) or math.isfinite(v)


@fuzz(400)
@given(st.lists(mutation, min_size=1, max_size=3))
def test_scenario_loader_mutated_documents(muts):
    counted()
    doc = _mutated(BASE_SCENARIO, SCENARIO_KEYS, muts)
    try:
        sc = scn.from_dict(doc, "fuzz.toml")
    except scn.ScenarioError as e:
        assert str(e).startswith("fuzz.toml: ") and e.field
        outcome("scenario:refused")
        return
    outcome("scenario:accepted")
    _check_scenario(sc)


NUMERIC_KEYS = {
    (): ["iterations", "warmup_iterations", "seed"],
    ("network",): ["mss", "step_us", "min_rto_ms", "host_delay_us"],
    ("links", 0): ["count", "rate_gbps", "delay_us", "buffer_pkts"],
    ("links", 1): ["count", "rate_mbps", "delay_ms", "buffer_bdp", "ecn_k_pkts", "red_pmax"],
    ("jobs", 0): [
        "compute_ms",
        "bytes",
        "start_offset_ms",
        "jitter",
        "straggler_prob",
        "straggler_delay_ms",
        "iterations",
        "count",
        "share",
    ],
    ("jobs", 1): ["count", "share", "compute_ms", "comm_mb", "stagger_ms", "iterations"],
    ("mltcp",): ["slope", "intercept", "idle_fraction", "min_idle_ms"],
}
numbers = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(-10, 10**6),
    st.floats(-1, 1e6),
    st.floats(allow_nan=True, allow_infinity=True),
)


@fuzz(300)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(NUMERIC_KEYS, key=str)), st.integers(0, 20), numbers), min_size=1, max_size=2
    )
)
def test_scenario_loader_numbers_at_their_edges(muts):
    """Only numbers change (edges, NaN, infinities, huge, negative): accepted scenarios keep every
    limit; refusals name the field."""
    counted()
    doc = _mutated(BASE_SCENARIO, NUMERIC_KEYS, muts)
    try:
        sc = scn.from_dict(doc, "num.toml")
    except scn.ScenarioError as e:
        assert str(e).startswith("num.toml: ") and e.field
        outcome("scenario-numbers:refused")
        return
    outcome("scenario-numbers:accepted")
    _check_scenario(sc)


@fuzz(150)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.sampled_from([b"\xef\xbb\xbfname='x'", b"name = 1e400", b"[[links]]\n" * 3, b"\x00" * 10]),
    )
)
def test_scenario_file_of_any_bytes(tmp_path_factory, raw):
    counted()
    f = tmp_path_factory.mktemp("sc") / "x.toml"
    f.write_bytes(raw)
    try:
        sc = scn.load(str(f))
    except scn.ScenarioError as e:
        assert str(e).startswith(str(f))
        return
    _check_scenario(sc)


# -- topology ----------------------------------------------------------------------------------------

BASE_TOPOLOGY = {
    "defaults": {"device_id": 1, "election_id": [1, 0]},
    "switches": [
        {
            "name": "s1",
            "grpc": "127.0.0.1:9559",
            "routes": [{"prefix": "10.0.0.0/24", "port": 1, "mac": "00:00:00:00:00:01"}],
            "ecn": [{"port": 1, "threshold": 20}],
        }
    ],
}
TOPO_KEYS = {
    (): ["defaults", "switches", "extra"],
    ("defaults",): ["device_id", "election_id", "p4info", "config", "name"],
    ("switches", 0): ["name", "grpc", "device_id", "election_id", "p4info", "config", "routes", "ecn", "z"],
    ("switches", 0, "routes", 0): ["prefix", "port", "mac", "q"],
    ("switches", 0, "ecn", 0): ["port", "threshold", "q"],
}
topo_values = st.one_of(
    values,
    st.sampled_from(
        [
            "10.0.0.1",
            "10.0.0.1/33",
            "10.0.0.1/24",
            "::1",
            "256.0.0.0/8",
            "١٠.0.0.0/8",
            "0.0.0.0/0",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "[::1]:9559",
            "host:²",
            "a b:1",
            ":9559",
            "h:0009559",
            "00:00:00:00:00:0g",
            "AA:BB:CC:DD:EE:FF",
            [0, 0],
            [2**64, 0],
            [1, -1],
            [True, 1],
            MAX_PORT,
            MAX_PORT + 1,
            MAX_THRESHOLD,
            MAX_THRESHOLD + 1,
            2**64,
            "a\x00b",
        ]
    ),
)
topo_mutation = st.tuples(
    st.sampled_from(sorted(TOPO_KEYS, key=str)), st.integers(0, 20), st.one_of(st.none(), topo_values)
)


@fuzz(400)
@given(st.lists(topo_mutation, min_size=1, max_size=3))
def test_topology_parser_mutated_documents(tmp_path_factory, muts):
    counted()
    doc = _mutated(BASE_TOPOLOGY, TOPO_KEYS, muts)
    try:
        topo = parse_topology(doc, "t.toml")
    except TopologyError as e:
        assert str(e).startswith("t.toml: ")
        outcome("topology:refused")
        return
    outcome("topology:accepted")
    for sw in topo.switches:
        assert 0 <= sw.device_id < 2**64 and sw.election_id != (0, 0)
        host, _, port = sw.grpc.rpartition(":")
        assert host and 0 < int(port) < 65536
        assert all(0 <= r.port <= MAX_PORT and r.network for r in sw.routes)
        assert all(0 <= e.port <= MAX_PORT and 0 <= e.threshold <= MAX_THRESHOLD for e in sw.ecn)


@fuzz(400)
@given(
    st.sampled_from(["grpc", "prefix", "mac", "port", "threshold", "election_id"]),
    st.one_of(
        st.text(max_size=24),
        st.from_regex(r"[0-9a-z.\[\]:]{1,12}:[0-9²٣]{1,6}", fullmatch=True),
        st.from_regex(r"[0-9١]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?", fullmatch=True),
        topo_values,
    ),
)
def test_topology_field_validators_take_any_value(which, v):
    """Each validator alone, on any text or value: a normalised value or a TopologyError, never
    another exception (the old gRPC check took "host:²" for a port and crashed in int())."""
    counted()
    from mltcp.controlplane import topology as tp

    check = {
        "grpc": tp.check_grpc_addr,
        "prefix": tp.check_prefix,
        "mac": tp.check_mac,
        "port": tp.check_port,
        "threshold": tp.check_threshold,
        "election_id": tp.check_election_id,
    }[which]
    try:
        out = check(v, "t.toml", which)
    except TopologyError as e:
        assert str(e).startswith(f"t.toml: {which}: ")
        outcome("topology-field:refused")
        return
    outcome("topology-field:accepted")
    if which == "grpc":
        assert 0 < int(out.rpartition(":")[2]) < 65536 and out.isascii()
    elif which == "prefix":
        import ipaddress

        assert str(ipaddress.IPv4Network(out)) == out


@fuzz(100)
@given(st.binary(max_size=300))
def test_topology_file_of_any_bytes(tmp_path_factory, raw):
    counted()
    f = tmp_path_factory.mktemp("topo") / "t.toml"
    f.write_bytes(raw)
    try:
        load_topology(f)
    except TopologyError as e:
        assert str(e).startswith(str(f))


# -- the MLTCP shim header ---------------------------------------------------------------------------


@fuzz(300)
@given(st.binary(max_size=40))
def test_shim_parse_of_any_bytes(raw):
    counted()
    try:
        m = header.parse_mltcp(raw)
    except header.MLTCPParseError:
        assert len(raw) < header.MLTCP_HEADER_LEN or raw[0] >> 4 != header.MLTCP_VERSION
        return
    assert m.version == 1 and bytes(m)[:12] == raw[:12]
    assert 0 <= m.ratio <= 1 + 1e-12


@fuzz(200)
@given(
    st.integers(0, 15),
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**32 - 1),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
)
def test_shim_roundtrip_matches_the_transport_codec(flags, res, job, it, ratio, res2):
    counted()
    raw = bytes(header.MLTCP(flags=flags, reserved=res, job_id=job, iteration=it, bytes_ratio=ratio, reserved2=res2))
    assert raw == wire.SHIM.pack((1 << 4) | flags, res, job, it, ratio, res2)
    m = header.parse_mltcp(raw)
    assert (int(m.flags), m.reserved, m.job_id, m.iteration, m.bytes_ratio, m.reserved2) == (
        flags,
        res,
        job,
        it,
        ratio,
        res2,
    )


@fuzz(200)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, -0.0, 1 + 1e-16])))
def test_ratio_q16_any_float(r):
    counted()
    try:
        q = header.ratio_to_q16(r)
    except ValueError:
        assert not 0 <= r <= 1
        assert wire.ratio_q16(r) in (0, wire.Q16_ONE)  # the data path clamps instead of raising
        return
    assert 0 <= q <= 0xFFFF and abs(header.q16_to_ratio(q) - r) <= 0.5 / 0xFFFF + 1e-12
    assert abs(wire.ratio_q16(r) - q) <= 1


# -- the transport's wire codec ----------------------------------------------------------------------

FUZZ_KEY = bytes(range(16))  # every datagram made here carries (handshake) and is sealed with it


def _valid_datagram(draw_conn, seq, length, tflags=wire.T_DATA, flags=0, body=None):
    body = pattern.chunk(seq, length) if body is None else body
    return auth.seal(
        wire.encode(flags, 1, 0, 0, draw_conn, seq, 0, 0, 0, len(body), tflags) + body, FUZZ_KEY, send_key=True
    )


def _flip(data: bytes, positions: list[int]) -> bytes:
    b = bytearray(data)
    for p in positions:
        if b:
            b[p % len(b)] ^= 1 << (p % 8)
    return bytes(b)


datagrams = st.one_of(
    st.binary(max_size=120),
    st.builds(
        lambda c, s, n: _valid_datagram(c, s, n),
        st.sampled_from([1, 2, 0xFFFF_FFFF_FFFF]),
        st.one_of(
            st.integers(0, 20_000),
            st.sampled_from([wire.RCV_WINDOW - 1, wire.RCV_WINDOW, 2**32, 2**32 + 1, 2**64 - 1 - 100]),
        ),
        st.integers(0, 200),
    ),
    st.builds(
        lambda c, s, n, g: _valid_datagram(c, s, n, body=g),
        st.sampled_from([1, 2]),
        st.integers(0, 20_000),
        st.integers(0, 50),
        st.binary(max_size=50),
    ),
    st.builds(
        lambda c, s, n, pos: _flip(_valid_datagram(c, s, n), pos),
        st.sampled_from([1, 2]),
        st.integers(0, 5000),
        st.integers(0, 64),
        st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
    ),
)


@fuzz(500)
@given(datagrams)
def test_wire_decode_of_any_datagram(raw):
    counted()
    try:
        p = wire.decode(raw)
    except wire.WireError:
        outcome("wire:refused")
        return
    outcome("wire:decoded")
    trailer = (wire.TAG_LEN if p.tflags & wire.T_AUTH else 0) + len(p.key)
    assert p.payload_off + p.length + trailer == len(raw) and len(p.sacks) <= wire.MAX_SACK
    assert 0 <= p.conn_id < 2**48 and 0 <= p.seq < 2**64 and all(s < e for s, e in p.sacks)


@fuzz(300)
@given(
    st.integers(0, 15),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**32 - 1),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**48 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 0xFFFF),
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.lists(st.tuples(st.integers(0, 2**31), st.integers(1, 2**31)), max_size=4),
)
def test_wire_roundtrip(flags, job, it, ratio, conn, seq, ack, tsval, tsecr, length, tflags, ce, rel):
    counted()
    sacks = [(ack + a, ack + a + b) for a, b in rel]
    try:
        head = wire.encode(flags, job, it, ratio, conn, seq, ack, tsval, tsecr, length, tflags, ce, sacks)
    except wire.WireError:
        assert any(e - ack > wire.U32 for _, e in sacks)
        return
    trailer = (wire.TAG_LEN if tflags & wire.T_AUTH else 0) + (wire.KEY_LEN if tflags & wire.T_KEY else 0)
    if tflags & wire.T_KEY and not tflags & wire.T_AUTH:  # a key without a MAC: refused
        with pytest.raises(wire.WireError):
            wire.decode(head + bytes(length + trailer))
        return
    p = wire.decode(head + bytes(length + trailer))
    assert (
        p.flags,
        p.job_id,
        p.iteration,
        p.ratio_q16,
        p.conn_id,
        p.seq,
        p.ack,
        p.tsval,
        p.tsecr,
        p.length,
        p.tflags,
        p.ce_count,
    ) == (flags, job, it, ratio, conn, seq, ack, tsval, tsecr, length, tflags, ce)
    assert p.sacks == tuple(sacks)


LEGIT = ("127.0.0.1", 9)


@fuzz(250)
@given(
    st.integers(1, 30),
    st.integers(1, 500),
    st.randoms(use_true_random=False),
    st.lists(st.tuples(st.sampled_from([LEGIT, ("10.9.9.9", 9)]), datagrams, st.sampled_from([0, 2, 3])), max_size=25),
)
def test_receiver_takes_only_the_pattern_and_stays_bounded(nseg, size, rnd, attacks):
    """A legitimate flow's segments in any order, mixed with random, spoofed (same address and
    conn_id), bit-flipped and far-away datagrams: every flow's delivered bytes are the sender's
    pattern (CRC), the legitimate stream is complete, buffering stays inside the window, nothing
    raises."""
    counted()
    legit = [(LEGIT, _valid_datagram(1, k * size, size), 0) for k in range(nseg)]
    mixed = legit + attacks
    rnd.shuffle(mixed)
    rx = Receiver(("127.0.0.1", 0), window=64 << 10, max_flows=16, max_held=1 << 20)
    try:
        for peer, raw, tos in mixed:
            rx.handle(raw, len(raw), peer, tos, 0.0)
        assert rx.held == sum(f.ra.held_bytes for f in rx.flows.values()) <= 1 << 20
        flow = rx.flows[(LEGIT, 1)]
        assert flow.delivered >= nseg * size  # complete despite the noise
        if any(f.mismatched or f.refused or f.forged for f in rx.flows.values()) or rx.bad or rx.unauthenticated:
            outcome("receiver:noise-dropped")
        for f in rx.flows.values():
            assert f.ra.held_bytes <= 64 << 10
            assert f.crc == pattern.expected_crc(0, f.delivered)  # only the pattern, in order
            for s, e in f.ra.sack_blocks(wire.MAX_SACK):
                assert f.delivered < s < e <= f.delivered + (64 << 10)
    finally:
        rx.close()


@fuzz(200)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 400)), min_size=1, max_size=60), st.integers(1000, 5000))
def test_reassembly_any_order_delivers_the_prefix(segs, window):
    counted()
    ra = Reassembly(window=window)
    got = bytearray()
    for seq, n in segs:
        out, _dup = ra.add(seq, pattern.chunk(seq, n))
        for c in out:
            got += c
        assert ra.held_bytes <= window and len(ra._segs) <= ra.max_segments
    assert bytes(got) == pattern.chunk(0, len(got)) and ra.rcv_nxt == len(got)


@fuzz(100)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=80),
            st.tuples(
                st.booleans(),
                st.integers(0, 30_000),
                st.lists(st.tuples(st.integers(1, 20_000), st.integers(1, 5000)), max_size=4),
                st.integers(0, 15),
                st.integers(0, 2**32 - 1),
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_sender_survives_any_ack(acks):
    """Random bytes and ACKs with the right or a wrong conn_id, any ack/SACK/flags/timestamp: the
    sender never raises, never acknowledges past what it sent, keeps its books consistent."""
    counted()
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    f = FlowSender(peer.getsockname(), build_cc("mltcp-reno"), payload=1000, clock=lambda: 0.0)
    try:
        f.enqueue(50_000, 0)
        f.service(0.0)
        for a in acks:
            if isinstance(a, bytes):
                raw = a
            else:
                right, ack, rel, flags, tsecr = a
                conn = f.conn_id if right else f.conn_id ^ 0x10000
                raw = wire.encode(
                    flags | wire.FLAG_ACK,
                    0,
                    0,
                    0,
                    conn,
                    0,
                    ack,
                    0,
                    tsecr,
                    0,
                    0,
                    sacks=[(ack + s, ack + s + n) for s, n in rel],
                )
                if right:  # made by someone holding the flow's key: the sender's books are what is tested
                    raw = auth.seal(raw, f.key)
            peer.sendto(raw, f.sock.getsockname())
        f.drain(0.001, limit=4096)
        f.service(0.002)
        sb = f.sb
        if sb.snd_una:
            outcome("sender:acked")
        if f.fault:
            outcome("sender:fault")
        assert 0 <= sb.snd_una <= sb.snd_nxt <= 50_000 and sb.inflight_bytes >= 0
        assert math.isfinite(float(f.st.cwnd[0])) and float(f.st.cwnd[0]) > 0
        assert f.stats["acks"] + f.stats["bad"] + f.stats["forged"] <= len(acks)
    finally:
        f.close()
        peer.close()


def test_fuzz_helpers_are_sound():
    """The strategies above reach both outcomes (accepted and refused), so the properties test
    something: the base documents are valid and a known-bad mutation is refused."""
    _check_scenario(scn.from_dict(BASE_SCENARIO, "base.toml"))
    assert parse_topology(BASE_TOPOLOGY, "t.toml").switches[0].name == "s1"
    with pytest.raises(scn.ScenarioError):
        scn.from_dict(_mutated(BASE_SCENARIO, SCENARIO_KEYS, [(("jobs", 0), 6, 1e30)]), "x.toml")
    assert zlib.crc32(b"") == 0 and tomllib.loads("a = 1") == {"a": 1}
