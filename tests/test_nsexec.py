"""mltcp.nsexec: the one `ip netns exec` prefix every namespaced process start uses."""

from mltcp import nsexec


def test_prefixes_only_when_a_namespace_is_named():
    assert nsexec.argv(["ping", "-c", "1", "10.0.0.2"], "h1") == [
        "ip",
        "netns",
        "exec",
        "h1",
        "ping",
        "-c",
        "1",
        "10.0.0.2",
    ]
    assert nsexec.argv(("ethtool", "-K", "eth0"), None) == ["ethtool", "-K", "eth0"]
    assert nsexec.argv(["true"], "") == ["true"]


def test_no_other_module_spells_the_prefix():
    import pathlib
    import mltcp

    root = pathlib.Path(mltcp.__file__).resolve().parent.parent
    spelled = [
        str(p.relative_to(root))
        for d in ("mltcp", "traffic", "emulation", "controlplane")
        for p in (root / d).rglob("*.py")
        if '"ip", "netns", "exec"' in p.read_text()
    ]
    assert spelled == ["mltcp/nsexec.py"]
