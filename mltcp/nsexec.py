"""The one ``ip netns exec`` prefix (pure): a command's argv, run inside a named network namespace
when one is given. Every place that starts a process in a namespace it created builds its argv here."""

from __future__ import annotations

from collections.abc import Iterable


def argv(cmd: Iterable[str], netns: str | None) -> list[str]:
    """``cmd`` as a list, prefixed with ``ip netns exec NETNS`` when ``netns`` (None or "": unchanged)."""
    return (["ip", "netns", "exec", netns] if netns else []) + list(cmd)
