"""mltcp.ddp.netstat: the kernel's TCP counters of a namespace, parsed and differenced."""

from mltcp.ddp import netstat

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RetransSegs InErrs
Tcp: 1 200 57 0
Udp: InDatagrams
Udp: 3
"""
NETSTAT = """TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts TCPFastRetrans TCPDSACKRecvSegs
TcpExt: 0 12 3 40 9
IpExt: InNoRoutes
IpExt: 0
"""


def test_parse_reads_the_tcp_counters_from_both_files():
    got = netstat.parse(SNMP, NETSTAT)
    want = {"RetransSegs": 57, "TCPLossProbes": 12, "TCPTimeouts": 3, "TCPFastRetrans": 40, "TCPDSACKRecvSegs": 9}
    assert got == want


def test_between_and_summed_count_what_happened_in_each_namespace():
    a = netstat.between({"RetransSegs": 10, "TCPTimeouts": 1}, {"RetransSegs": 25, "TCPTimeouts": 1})
    b = netstat.between({}, {"RetransSegs": 5, "TCPTimeouts": 2})
    assert a == {"RetransSegs": 15, "TCPTimeouts": 0}
    assert netstat.summed([a, b]) == {"RetransSegs": 20, "TCPTimeouts": 2}


def test_read_parses_this_machine_s_counters():
    got = netstat.read()
    assert {"RetransSegs", "TCPTimeouts", "TCPLossProbes"} <= set(got) and all(v >= 0 for v in got.values())
