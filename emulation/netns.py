"""Naming, cleanup and signal handling for emulated networks.

Every emulated network gets a *run tag*: five lowercase letters derived from the process id, so
that node and interface names of concurrent runs (other tests, other helpers) never collide and a
leftover check can look for exactly this run's names.  Mininet hosts are unshared processes, not
named namespaces, so "leftover" means: a link whose name starts with the run prefix, a node shell
still alive, or a child process we started still alive.

Nothing here calls ``mn -c`` (it kills by name and would hit other runs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Iterator

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def run_tag(pid: int | None = None) -> str:
    """Five letters encoding ``pid`` (base 26): unique among live processes (pid_max < 26**5)."""
    n = os.getpid() if pid is None else pid
    out = []
    for _ in range(5):
        n, r = divmod(n, 26)
        out.append(_LETTERS[r])
    return "".join(reversed(out))


def run_prefix(pid: int | None = None) -> str:
    """Prefix of every node name of one run: 'm' + run tag (6 chars; names stay < 15 chars)."""
    return "m" + run_tag(pid)


def root_links() -> list[str]:
    """Interface names in the root network namespace."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def named_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tagged_pids(prefix: str) -> list[int]:
    """Live processes that belong to run ``prefix``: Mininet node shells (``mininet:<prefix>...``),
    peers started with ``--run <prefix>`` and software switches on its ports (``-i N@<prefix>...``)."""
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                args = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == prefix or a.startswith("mininet:" + prefix) or f"@{prefix}" in a for a in args) and pid_alive(
            int(d)
        ):
            out.append(int(d))
    return out


@dataclass
class Leftovers:
    links: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.links or self.pids)


def leftovers(prefix: str, pids: list[int] = ()) -> Leftovers:
    """What of a run is still there: root-namespace links named ``prefix*``, live ``pids`` and live
    processes tagged with the prefix."""
    live = {p for p in pids if pid_alive(p)} | set(tagged_pids(prefix))
    return Leftovers(links=[n for n in root_links() if n.startswith(prefix)], pids=sorted(live))


def kill_pids(pids: list[int], grace_s: float = 1.0) -> None:
    """SIGTERM then SIGKILL each pid (and its process group if it leads one)."""
    live = [p for p in pids if pid_alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(p) == p:
                    os.killpg(p, sig)
                else:
                    os.kill(p, sig)
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            live = [p for p in live if pid_alive(p)]
            if live:
                time.sleep(0.02)
        if not live:
            return


def delete_links(prefix: str) -> None:
    """Delete root-namespace links (veths, bridges) whose names start with ``prefix``."""
    for name in root_links():
        if name.startswith(prefix):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


class Interrupted(Exception):
    """Raised inside the run when SIGTERM/SIGHUP arrives, so ``finally`` blocks clean up."""


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGINT into KeyboardInterrupt and SIGTERM/SIGHUP into :class:`Interrupted` while inside.

    Only possible from the main thread; elsewhere this is a no-op.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, _frame):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(f"signal {signal.Signals(signum).name}")

    old = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Cleanup:
    """Collects what a run created and removes it all, once, whatever happened.

    Use as a context manager around building and running a Mininet network::

        with Cleanup(prefix) as cl:
            net = Mininet(...); cl.net = net
            p = host.popen(...); cl.add_proc(p)
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.net = None
        self.procs: list[subprocess.Popen] = []
        self.node_pids: list[int] = []
        self.done = False
        # software switches log to /tmp/mltcp-switch-<name>.log; whoever reads their final port
        # statistics after the teardown sets this False and removes the files itself
        self.remove_switch_logs = True

    def add_proc(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(proc)
        return proc

    def all_pids(self) -> list[int]:
        pids = [p.pid for p in self.procs]
        if self.net is not None:
            pids += [n.pid for n in self.net.hosts + self.net.switches if getattr(n, "pid", None)]
        return pids + self.node_pids

    def run(self) -> None:
        if self.done:
            return
        self.done = True
        # block signals while tearing down so a second Ctrl-C does not leave half a network
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            if self.net is not None:
                self.node_pids = [n.pid for n in self.net.hosts + self.net.switches if getattr(n, "pid", None)]
            kill_pids([p.pid for p in self.procs])
            for p in self.procs:
                with contextlib.suppress(Exception):
                    p.wait(timeout=1)
                for s in (p.stdout, p.stderr, p.stdin):
                    with contextlib.suppress(Exception):
                        if s:
                            s.close()
            if self.net is not None:
                with contextlib.suppress(Exception):
                    self.net.stop()
            kill_pids(self.node_pids)
            kill_pids(tagged_pids(self.prefix))
            delete_links(self.prefix)
            if self.remove_switch_logs:
                import glob

                for f in glob.glob(f"/tmp/mltcp-switch-{self.prefix}*"):  # logs and stats files
                    with contextlib.suppress(OSError):
                        os.unlink(f)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def __enter__(self) -> "Cleanup":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.remove_switch_logs = True  # nobody will read them
        self.run()


def stop_process(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM a process we started (a switch logs its statistics and exits); SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def have_mininet_prereqs() -> str | None:
    """None if this process can run Mininet networks, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("mnexec", "ip", "tc", "brctl"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None
