"""Fabrics: leaf-spine and fat-tree links and ECMP paths (mltcp.fabric)."""

from collections import Counter

import pytest

from mltcp.fabric import Fabric, FabricError, ecmp_hash, fat_tree, leaf_spine


def _check_path(f: Fabric, names: set, src: str, dst: str, path: list[str]):
    """A path is a chain of existing directed links from src to dst, no node twice."""
    assert all(p in names for p in path), path
    hops = [p.split(">") for p in path]
    assert hops[0][0] == src and hops[-1][1] == dst
    assert all(a[1] == b[0] for a, b in zip(hops, hops[1:]))
    nodes = [h[0] for h in hops] + [dst]
    assert len(nodes) == len(set(nodes))


@pytest.mark.parametrize("k", [2, 4, 8])
def test_fat_tree_sizes_and_link_names(k):
    f = fat_tree(k)
    links = f.links()
    names = [n for n, _ in links]
    assert len(names) == len(set(names)) == f.n_links
    assert f.n_hosts == k**3 // 4 == len(f.hosts())
    tiers = Counter(t for _, t in links)
    assert tiers["host"] == 2 * f.n_hosts
    assert tiers["fabric"] == 2 * 2 * k * (k // 2) ** 2  # edge-agg and agg-core cables, both ways
    switches = {n.split(">")[0] for n in names} - set(f.hosts())
    assert len(switches) == k * k + (k // 2) ** 2  # k pods of k switches, (k/2)^2 cores


def test_fat_tree_paths_and_equal_cost_counts():
    f = fat_tree(4)  # 16 hosts, 2 per edge, 4 per pod
    names = {n for n, _ in f.links()}
    cases = {("h0", "h1"): (2, 1), ("h0", "h2"): (4, 2), ("h0", "h5"): (6, 4), ("h15", "h0"): (6, 4)}
    for (s, d), (hops, npaths) in cases.items():
        assert f.n_paths(s, d) == npaths
        paths = {tuple(f.path(s, d, c)) for c in range(3 * npaths)}
        assert len(paths) == npaths  # every choice is one of them, all reached
        for p in paths:
            assert len(p) == hops
            _check_path(f, names, s, d, list(p))


def test_leaf_spine_paths():
    f = leaf_spine(leaves=3, spines=2, hosts_per_leaf=4)
    names = {n for n, _ in f.links()}
    assert f.n_hosts == 12 and f.n_links == 2 * (12 + 6) == len(names)
    assert f.path("h0", "h3") == ["h0>l0", "l0>h3"]
    assert {tuple(f.path("h0", "h11", c)) for c in range(4)} == {
        ("h0>l0", "l0>s0", "s0>l2", "l2>h11"),
        ("h0>l0", "l0>s1", "s1>l2", "l2>h11"),
    }
    _check_path(f, names, "h5", "h9", f.ecmp_path("h5", "h9", 1, "job", 0))


def test_ecmp_spreads_flows_evenly_and_is_deterministic():
    f = fat_tree(8)  # 16 equal-cost paths across pods
    use = Counter(tuple(f.ecmp_path("h0", "h100", 7, "job", i)) for i in range(3200))
    assert len(use) == 16
    assert max(use.values()) < 1.35 * 200 and min(use.values()) > 0.65 * 200  # ~200 each
    assert f.ecmp_path("h0", "h100", 7, "job", 5) == f.ecmp_path("h0", "h100", 7, "job", 5)
    assert ecmp_hash(1, "a") != ecmp_hash(1, "b")
    # a different seed moves flows to other paths
    moved = sum(f.ecmp_path("h0", "h100", 1, "j", i) != f.ecmp_path("h0", "h100", 2, "j", i) for i in range(100))
    assert moved > 70


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: fat_tree(3), "even"),
        (lambda: fat_tree(0), "even"),
        (lambda: fat_tree(True), "even"),
        (lambda: fat_tree(400), "more than"),
        (lambda: leaf_spine(0, 2, 2), "leaves"),
        (lambda: leaf_spine(2, 2, 1.5), "hosts_per_leaf"),
        (lambda: leaf_spine(10**6, 10**3, 2), "more than"),
    ],
)
def test_bad_fabrics(make, match):
    with pytest.raises(FabricError, match=match):
        make()


def test_bad_routes():
    f = fat_tree(4)
    for bad in ("h16", "x1", "h-1", "h01", 3):
        with pytest.raises(FabricError, match="not a host"):
            f.path("h0", bad)
    with pytest.raises(FabricError, match="itself"):
        f.path("h2", "h2")
