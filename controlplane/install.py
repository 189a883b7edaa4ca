"""Install a topology on its switches: check everything first (:mod:`.preflight`), then write each
switch in turn through its P4Runtime connection (:mod:`.client`)."""

from __future__ import annotations

from typing import Callable

from .client import ControlPlaneError, InstallError, TlsOptions, configure_switch, connect_switch
from .preflight import plan_install
from .topology import Topology


def _summary(r: dict) -> str:
    return f"{r['switch']} ({r['routes']} routes, {r['ecn_thresholds']} ECN thresholds)"


def install_topology(
    topo: Topology,
    push: bool = False,
    only: str | None = None,
    timeout: float = 10.0,
    tls: TlsOptions | None = None,
    on_switch: Callable[[dict], None] | None = None,
    check: bool = True,
) -> list[dict]:
    """Configure every switch of `topo` (or only the one named `only`), one at a time.

    With ``check`` (the default) every switch's files and entries are first checked against the
    P4Info it will run (:mod:`~mltcp.controlplane.preflight`): a bad topology raises
    :class:`~mltcp.controlplane.topology.TopologyError` naming the file and field before any
    switch is written to.

    ``on_switch(summary)`` is called after each switch. If one fails, :class:`InstallError`
    says which switch, what it already holds, which switches were configured and which were
    not attempted (the configured ones keep their entries: nothing is rolled back)."""
    specs = [topo.switch(only)] if only else list(topo.switches)
    if check:
        plan_install(topo, specs, push, timeout, tls)
    out: list[dict] = []
    for k, spec in enumerate(specs):
        progress: dict = {}
        try:
            with connect_switch(spec, timeout, tls=tls) as conn:
                out.append(configure_switch(conn, spec, push, progress))
        except ControlPlaneError as e:
            left = [s.name for s in specs[k + 1 :]]
            partial = dict(
                {"pushed": False, "routes": 0, "ecn_thresholds": 0},
                **progress,
                routes_total=len(spec.routes),
                ecn_thresholds_total=len(spec.ecn),
            )
            held = (
                f"{'pipeline pushed, ' if partial.get('pushed') else ''}"
                f"{partial.get('routes', 0)} of {len(spec.routes)} routes and "
                f"{partial.get('ecn_thresholds', 0)} of {len(spec.ecn)} ECN thresholds "
                "installed"
            )
            msg = f"switch {spec.name} failed: {e} | on {spec.name}: {held}"
            if len(specs) > 1:
                msg += (
                    f" | configured: {', '.join(_summary(r) for r in out) or 'none'} | "
                    f"not attempted: {', '.join(left) or 'none'}"
                )
            raise InstallError(msg, out, spec.name, partial, left) from e
        if on_switch is not None:
            on_switch(out[-1])
    return out
