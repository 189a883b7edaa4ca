"""Data-centre fabrics for scenarios: leaf-spine and k-ary fat-tree, with ECMP routing.

A fabric names its hosts ``h0 .. h{H-1}`` (numbered leaf by leaf, or pod by pod and edge by edge)
and its switches (leaf-spine: ``l{i}``, ``s{i}``; fat-tree: ``e{pod}.{i}`` edge, ``a{pod}.{i}``
aggregation, ``c{i}`` core). Every cable is two directed links named ``from>to`` (``h3>l0``,
``l0>s1``), so a path is a list of link names, as a scenario job's ``path`` is.

Routing is shortest-path ECMP: each flow hashes (seed, job, flow index, source, destination) to
one of the equal-cost paths, the way a switch hashing a flow's 5-tuple at each hop spreads flows
(uniform over the up-links at each tier). Pure topology: rates, delays and buffers are the
scenario's (:mod:`mltcp.scenario`).

Fat-tree (Al-Fares et al., SIGCOMM'08): k pods, each with k/2 edge and k/2 aggregation switches,
k/2 hosts per edge switch (k^3/4 hosts), (k/2)^2 core switches; aggregation switch j of every pod
connects to cores j*k/2 .. j*k/2 + k/2 - 1. Paths: 2 links under one edge switch, 4 inside a pod
(k/2 choices), 6 across pods ((k/2)^2 choices).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

MAX_LINKS = 100_000  # as for a scenario's links in all (k = 40 is the largest fat-tree: 96,000)


class FabricError(ValueError):
    """A fabric that cannot be built or a route that does not exist (the message says which)."""


def ecmp_hash(*key) -> int:
    """Deterministic 64-bit hash of a flow's key (same on every run and machine)."""
    return int.from_bytes(hashlib.blake2b("|".join(map(str, key)).encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Fabric:
    kind: str  # "leaf-spine" or "fat-tree"
    k: int = 0  # fat-tree arity
    leaves: int = 0
    spines: int = 0
    hosts_per_leaf: int = 0

    # ---- shape ------------------------------------------------------------------------------
    @property
    def n_hosts(self) -> int:
        if self.kind == "fat-tree":
            return self.k**3 // 4
        return self.leaves * self.hosts_per_leaf

    @property
    def n_links(self) -> int:
        if self.kind == "fat-tree":
            h = self.k // 2
            return 2 * (self.n_hosts + 2 * self.k * h * h)
        return 2 * (self.n_hosts + self.leaves * self.spines)

    def hosts(self) -> list[str]:
        return [f"h{n}" for n in range(self.n_hosts)]

    def host_index(self, name: str) -> int:
        if not (isinstance(name, str) and name[:1] == "h" and name[1:].isdigit()):
            raise FabricError(f"{name!r} is not a host of this fabric (hosts are h0 .. h{self.n_hosts - 1})")
        n = int(name[1:])
        if n >= self.n_hosts or name[1:] != str(n):
            raise FabricError(f"{name!r} is not a host of this fabric (hosts are h0 .. h{self.n_hosts - 1})")
        return n

    def links(self) -> list[tuple[str, str]]:
        """Every directed link as (name, tier): tier "host" for host<->switch, "fabric" otherwise."""
        out: list[tuple[str, str]] = []
        if self.kind == "fat-tree":
            h = self.k // 2
            for n in range(self.n_hosts):
                e = self._edge(n)
                out += [(f"h{n}>{e}", "host"), (f"{e}>h{n}", "host")]
            for p in range(self.k):
                for i in range(h):
                    for j in range(h):
                        e, a = f"e{p}.{i}", f"a{p}.{j}"
                        out += [(f"{e}>{a}", "fabric"), (f"{a}>{e}", "fabric")]
                for j in range(h):
                    for c in range(j * h, (j + 1) * h):
                        a = f"a{p}.{j}"
                        out += [(f"{a}>c{c}", "fabric"), (f"c{c}>{a}", "fabric")]
            return out
        for n in range(self.n_hosts):
            leaf = f"l{n // self.hosts_per_leaf}"
            out += [(f"h{n}>{leaf}", "host"), (f"{leaf}>h{n}", "host")]
        for i in range(self.leaves):
            for s in range(self.spines):
                out += [(f"l{i}>s{s}", "fabric"), (f"s{s}>l{i}", "fabric")]
        return out

    def _edge(self, n: int) -> str:
        h = self.k // 2
        return f"e{n // (h * h)}.{(n % (h * h)) // h}"

    # ---- routing ----------------------------------------------------------------------------
    def n_paths(self, src: str, dst: str) -> int:
        """How many equal-cost shortest paths join two hosts."""
        s, d = self.host_index(src), self.host_index(dst)
        if self.kind == "fat-tree":
            h = self.k // 2
            if s // h == d // h:
                return 1
            return h if s // (h * h) == d // (h * h) else h * h
        return 1 if s // self.hosts_per_leaf == d // self.hosts_per_leaf else self.spines

    def path(self, src: str, dst: str, choice: int = 0) -> list[str]:
        """Equal-cost path number ``choice`` (taken modulo the number of paths) from src to dst."""
        s, d = self.host_index(src), self.host_index(dst)
        if s == d:
            raise FabricError(f"a flow from {src} to itself crosses no link")
        if self.kind == "fat-tree":
            h = self.k // 2
            es, ed = self._edge(s), self._edge(d)
            if es == ed:
                return [f"{src}>{es}", f"{es}>{dst}"]
            ps, pd = s // (h * h), d // (h * h)
            j = choice % h  # aggregation switch (same index in both pods)
            if ps == pd:
                a = f"a{ps}.{j}"
                return [f"{src}>{es}", f"{es}>{a}", f"{a}>{ed}", f"{ed}>{dst}"]
            c = j * h + (choice // h) % h  # one of aggregation j's cores
            a1, a2 = f"a{ps}.{j}", f"a{pd}.{j}"
            return [f"{src}>{es}", f"{es}>{a1}", f"{a1}>c{c}", f"c{c}>{a2}", f"{a2}>{ed}", f"{ed}>{dst}"]
        ls, ld = f"l{s // self.hosts_per_leaf}", f"l{d // self.hosts_per_leaf}"
        if ls == ld:
            return [f"{src}>{ls}", f"{ls}>{dst}"]
        sp = f"s{choice % self.spines}"
        return [f"{src}>{ls}", f"{ls}>{sp}", f"{sp}>{ld}", f"{ld}>{dst}"]

    def ecmp_path(self, src: str, dst: str, *flow_key) -> list[str]:
        """The path ECMP gives the flow identified by ``flow_key`` (e.g. seed, job, flow index)."""
        return self.path(src, dst, ecmp_hash(*flow_key, src, dst))


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int) -> Fabric:
    for name, v, lo in (("leaves", leaves, 1), ("spines", spines, 1), ("hosts_per_leaf", hosts_per_leaf, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise FabricError(f"{name} must be an integer >= {lo}, got {v!r}")
    f = Fabric("leaf-spine", leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf)
    if f.n_links > MAX_LINKS:
        raise FabricError(f"{f.n_links:,} links is more than {MAX_LINKS:,}")
    return f


def fat_tree(k: int) -> Fabric:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
        raise FabricError(f"k must be an even integer >= 2, got {k!r}")
    f = Fabric("fat-tree", k=k)
    if f.n_links > MAX_LINKS:
        raise FabricError(f"k = {k} gives {f.n_links:,} links, more than {MAX_LINKS:,}")
    return f
