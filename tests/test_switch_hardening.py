"""Probes of issue 12 as tests: option ranges of mltcp-switch, the default listen address, TLS
(server credentials, mutual TLS, the client side of `mltcp switch` and the library), and
`mltcp switch push --p4info` with a file that is not a P4Info.

The TLS and CLI tests run an in-process P4Runtime server (no root); the listen-address test
starts mltcp-switch on a veth pair (root).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc
from typer.testing import CliRunner

from mltcp.controlplane.cli import app as switch_app
from mltcp.controlplane.client import ControlPlaneError, PipelineFileError, TlsOptions, connect
from mltcp.controlplane.topology import Route
from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, TlsConfig, serve

CLI = [sys.executable, "-m", "mltcp.emulation.switch_cli"]
runner = CliRunner()


# ------------------------------------------------------------------ option ranges (exit 2)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--grpc-port", "70000"], "--grpc-port"),
        (["--grpc-port", "-1"], "--grpc-port"),
        (["--device-id", "-1"], "--device-id"),
        (["--device-id", str(2**64)], "--device-id"),
        (["--grpc-host", "not a host!"], "--grpc-host"),
        (["--buffer", "0"], "--buffer"),
        (["--max-streams", "0"], "--max-streams"),
        (["--log-level", "loud"], "--log-level"),
        (["--tls-cert", "/nonexistent.pem"], "--tls-key"),
        (["-i", "600@x"], "--interface"),
    ],
)
def test_switch_options_out_of_range_exit_2_naming_the_option(args, option):
    if "-i" not in args:
        args = args + ["-i", "1@x"]
    r = subprocess.run(CLI + args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert option in r.stderr, (args, r.stderr)
    assert "Traceback" not in r.stderr


def test_tls_files_are_checked_before_start(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    r = subprocess.run(
        CLI + ["-i", "1@x", "--tls-cert", str(junk), "--tls-key", str(junk)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "junk.pem" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        CLI + ["-i", "1@x", "--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(junk)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "none.pem" in r.stderr


# ------------------------------------------------------------------ default listen address


def _listen_addresses(pid: int, port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on ``port`` owned by ``pid`` (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            addr, p = f[1].split(":")
            if int(p, 16) == port and f[3] == "0A" and f[9] in inodes:
                raw = bytes.fromhex(addr)
                if width == 8:
                    out.add(str(ipaddress.IPv4Address(raw[::-1])))
                else:
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    a6 = ipaddress.IPv6Address(words)
                    out.add(str(a6.ipv4_mapped or a6))  # gRPC binds v4 on a v6 socket
    return out


@pytest.mark.root
def test_switch_listens_on_loopback_by_default(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for the veth port")
    from mltcp.emulation.switch.runtime import free_tcp_port, stop_switch, wait_grpc
    from mltcp.emulation.switch.testbed import Testbed

    tb = Testbed("hsbind")
    proc = None
    try:
        pid = os.getpid() % 100000
        sw, _ = tb.veth(f"hb{pid}s", f"hb{pid}h")
        port = free_tcp_port()
        proc = subprocess.Popen(
            CLI + ["-i", f"1@{sw}", "--grpc-port", str(port)], stderr=open(tmp_path / "sw.log", "w")
        )
        wait_grpc(f"127.0.0.1:{port}", 20, proc)
        assert _listen_addresses(proc.pid, port) == {"127.0.0.1"}
    finally:
        if proc is not None:
            stop_switch(proc, 10)
        tb.close()


# ------------------------------------------------------------------ TLS


def _pki(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (PEM)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, key, issuer, issuer_key, ca=False, san=None, usage=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        if usage:
            b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    out = {}

    def write(stem, c, k):
        out[f"{stem}_cert"] = d / f"{stem}.pem"
        out[f"{stem}_cert"].write_bytes(c.public_bytes(serialization.Encoding.PEM))
        out[f"{stem}_key"] = d / f"{stem}.key"
        out[f"{stem}_key"].write_bytes(
            k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("mltcp test CA", ca_key, "mltcp test CA", ca_key, ca=True)
    write("ca", ca, ca_key)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    write(
        "server",
        cert(
            "mltcp-switch",
            srv_key,
            "mltcp test CA",
            ca_key,
            san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
            usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        ),
        srv_key,
    )
    cl_key = ec.generate_private_key(ec.SECP256R1())
    write(
        "client", cert("controller", cl_key, "mltcp test CA", ca_key, usage=[ExtendedKeyUsageOID.CLIENT_AUTH]), cl_key
    )
    other_key = ec.generate_private_key(ec.SECP256R1())  # a CA nobody trusts
    write("other", cert("other CA", other_key, "other CA", other_key, ca=True), other_key)
    return out


@pytest.fixture
def tls_server(tmp_path):
    pki = _pki(tmp_path)
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
    tls = TlsConfig(pki["server_cert"].read_bytes(), pki["server_key"].read_bytes(), pki["ca_cert"].read_bytes())
    srv = serve(target, "127.0.0.1:0", tls=tls)
    try:
        yield target, f"127.0.0.1:{target.port}", pki
    finally:
        srv.stop(0)


def test_tls_server_refuses_plaintext_and_unknown_clients(tls_server):
    target, addr, pki = tls_server
    ch = grpc.insecure_channel(addr)
    with pytest.raises(grpc.RpcError) as e:
        p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(pb.CapabilitiesRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()
    # TLS, right CA, but no client certificate: the handshake fails (mutual TLS)
    creds = grpc.ssl_channel_credentials(pki["ca_cert"].read_bytes())
    ch = grpc.secure_channel(addr, creds)
    with pytest.raises(grpc.RpcError) as e:
        p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(pb.CapabilitiesRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()
    # a client certificate signed by another CA: refused too
    creds = grpc.ssl_channel_credentials(
        pki["ca_cert"].read_bytes(), pki["other_key"].read_bytes(), pki["other_cert"].read_bytes()
    )
    ch = grpc.secure_channel(addr, creds)
    with pytest.raises(grpc.RpcError):
        p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(pb.CapabilitiesRequest(), timeout=5)
    ch.close()
    assert target.streams == [] and target.dev is None


def test_library_over_mutual_tls(tls_server):
    target, addr, pki = tls_server
    tls = TlsOptions(pki["ca_cert"], pki["client_cert"], pki["client_key"])
    with connect(addr, timeout=10, tls=tls) as sw:
        sw.push_pipeline()
        sw.install_routes([Route("10.9.0.0/24", 3, "00:00:00:00:09:03")])
        assert sw.verify() == []
    assert target.pipeline.lpm.lookup(0x0A090001).port == 3
    # without the client certificate the library says what is wrong, and fails
    with pytest.raises(ControlPlaneError, match="TLS handshake failed"):
        connect(addr, timeout=1, tls=TlsOptions(pki["ca_cert"]))
    with pytest.raises(ControlPlaneError, match="TLS server"):
        connect(addr, timeout=1)  # plaintext to a TLS port


def test_cli_over_mutual_tls(tls_server):
    target, addr, pki = tls_server
    tls = ["--tls-ca", str(pki["ca_cert"]), "--tls-cert", str(pki["client_cert"]), "--tls-key", str(pki["client_key"])]
    res = runner.invoke(switch_app, ["push", "--grpc", addr] + tls)
    assert res.exit_code == 0, res.output
    res = runner.invoke(switch_app, ["set-ecn", "--grpc", addr, "--port", "2", "--threshold", "9"] + tls)
    assert res.exit_code == 0, res.output
    assert target.pipeline.ecn_thresholds == {2: 9}
    res = runner.invoke(switch_app, ["counters", "--grpc", addr, "--json", "--timeout", "1"])
    assert res.exit_code == 1 and "TLS" in res.output
    res = runner.invoke(switch_app, ["counters", "--grpc", addr, "--tls-cert", str(pki["client_cert"])])
    assert res.exit_code == 2 and "--tls-key" in res.output


# ------------------------------------------------------------------ push --p4info <not a P4Info>


@pytest.mark.parametrize(
    "content",
    [
        b"hello world\n",
        b"",
        b"[[switches]]\nname = 's1'\n",
        b"tables { preamble { id: 1 } }\n",
        b"\xff\xfe\x00garbage",
        b'pkg_info { arch: "v1model" }\n',
    ],
)
def test_push_with_a_file_that_is_not_a_p4info_is_one_line_exit_2(tmp_path, content):
    bad = tmp_path / "notes.txt"
    bad.write_bytes(content)
    # nothing listens on port 1: exit 2 (not 1, "not reachable") shows it stopped before connecting
    res = runner.invoke(switch_app, ["push", "--p4info", str(bad), "--grpc", "127.0.0.1:1", "--timeout", "2"])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "notes.txt" in lines[0], res.output
    assert "Traceback" not in res.output


def test_library_push_with_a_bad_p4info_raises_pipeline_file_error(tmp_path):
    bad = tmp_path / "x.txtpb"
    bad.write_text("this is not protobuf text {")
    from mltcp.controlplane.client import read_p4info

    with pytest.raises(PipelineFileError, match="x.txtpb"):
        read_p4info(bad)
