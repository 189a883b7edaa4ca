"""P4Runtime control plane for the MLTCP switch program (p4src/mltcp.p4).

Library: :mod:`mltcp.controlplane.client` (``connect``, ``SwitchConnection``),
:mod:`mltcp.controlplane.install` (``install_topology``: checked, then written), topology files
:mod:`mltcp.controlplane.topology`, entry construction :mod:`mltcp.controlplane.entries`, counter
snapshots :mod:`mltcp.controlplane.counters`.
CLI: ``app`` in :mod:`mltcp.controlplane.cli` (mounted as ``mltcp switch``).
"""
