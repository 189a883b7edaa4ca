"""A Dask cluster as separate processes on this machine: ``dask scheduler`` and ``dask worker``
processes on the loopback, started the way a real cluster's nodes start them (for the tests and
the benchmark; on a cluster, run the same two commands on the nodes, docs/distributed.md).

The processes get a session of their own (no Ctrl-C from the terminal reaches them) and are
stopped by :meth:`LoopbackCluster.close`, which the context manager calls even on error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class LoopbackCluster:
    """``with LoopbackCluster(workers=2) as c: run_tasks(..., scheduler=c.address)``."""

    def __init__(self, workers: int = 2, start_timeout: float = 60.0, env: dict | None = None):
        self.n, self.start_timeout = workers, start_timeout
        self.env = dict(os.environ, **(env or {}))
        self.dir = Path(tempfile.mkdtemp(prefix="mltcp-dask-"))
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address = ""

    def _spawn(self, *args: str, log: str) -> subprocess.Popen:
        fh = open(self.dir / log, "wb")
        return subprocess.Popen(
            [sys.executable, "-m", "dask", *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
            cwd=self.dir,
        )

    def start(self) -> "LoopbackCluster":
        sfile = self.dir / "scheduler.json"
        self.scheduler = self._spawn(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--dashboard-address",
            "127.0.0.1:0",
            "--scheduler-file",
            str(sfile),
            log="scheduler.log",
        )
        deadline = time.monotonic() + self.start_timeout
        while not sfile.exists():
            self._check_alive(self.scheduler, "scheduler.log", deadline)
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written in one go; let it land
        self.address = json.loads(sfile.read_text())["address"]
        for i in range(self.n):
            self.workers.append(
                self._spawn(
                    "worker",
                    self.address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-dashboard",
                    "--local-directory",
                    str(self.dir / f"w{i}"),
                    "--name",
                    f"w{i}",
                    log=f"worker{i}.log",
                )
            )
        self.wait_for_workers(self.n, deadline)
        return self

    def wait_for_workers(self, n: int, deadline: float) -> None:
        from distributed import Client

        with Client(self.address, timeout=10) as c:
            while len(c.scheduler_info(n_workers=-1)["workers"]) < n:
                for i, w in enumerate(self.workers):
                    self._check_alive(w, f"worker{i}.log", deadline)
                time.sleep(0.2)

    def _check_alive(self, p: subprocess.Popen, log: str, deadline: float) -> None:
        if p.poll() is not None or time.monotonic() > deadline:
            tail = (self.dir / log).read_text(errors="replace")[-2000:]
            self.close()
            raise RuntimeError(f"dask {log.split('.')[0]} did not start: {tail}")

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> the pid of the process that runs its tasks (the nanny's child)."""
        from distributed import Client

        with Client(self.address, timeout=10) as c:
            return c.run(os.getpid)

    def close(self) -> None:
        procs = [*self.workers, *([self.scheduler] if self.scheduler else [])]
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LoopbackCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
