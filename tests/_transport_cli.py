"""One userspace-transport transfer between two namespaces through the `mltcp traffic` CLI, with
the integrity checks every such test makes (shared by the namespace tests)."""

import json
import signal
import subprocess
import sys

CLI = [sys.executable, "-m", "mltcp.traffic.cli"]


def transfer(ns_tx: str, ns_rx: str, addr: str, cc: str, nbytes: int, iterations: int, timeout_s: int = 40):
    """Send ``iterations`` x ``nbytes`` from ``ns_tx`` to ``addr`` (``ip:port`` in ``ns_rx``) with
    ``cc``; assert every byte arrived once, in order (CRC-32 equal on both sides). Returns (the
    sender's iteration records, its summary, the receiver's flow report)."""
    # The receiver runs until the sender is done and is then told to stop (SIGTERM: it prints its
    # report and exits). An idle exit would race with the sender's RTO backoff: with 5 % loss both
    # ways, three timeouts in a row (0.2 + 0.4 + 0.8 s) outlast a 1 s idle rule now and then.
    rx = subprocess.Popen(
        ["ip", "netns", "exec", ns_rx, *CLI, "recv", "--bind", addr, "--duration", f"{3 * timeout_s + 30}s", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = rx.stderr.readline()
        assert line.startswith("listening"), line + rx.stderr.read()
        tx = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns_tx,
                *CLI,
                "send",
                "--to",
                addr,
                "--cc",
                cc,
                "--bytes",
                str(nbytes),
                "--compute",
                "5ms",
                "--iterations",
                str(iterations),
                "--line-rate",
                "100mbit",
                "--json",
                "--timeout",
                f"{timeout_s}s",
            ],
            capture_output=True,
            text=True,
            timeout=3 * timeout_s,
        )
        assert tx.returncode == 0, tx.stderr
        rx.send_signal(signal.SIGTERM)  # `ip netns exec` execs the CLI: this is its pid
        out, _ = rx.communicate(timeout=60)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    sent = json.loads(tx.stdout)  # one JSON document each (mltcp.console.print_json)
    flows = json.loads(out)["flows"]
    assert len(flows) == 1
    f = flows[0]
    assert f["bytes"] == nbytes * iterations and f["mismatched"] == 0 and f["iterations"] == iterations
    assert sent["summary"][0]["crc32"] == f["crc32"]  # the same stream, exactly once, in order
    return sent["records"], sent["summary"][0], f
