"""A throwaway PostgreSQL server for tests: Debian's `postgresql` binaries, a scratch data folder,
a private unix-socket folder and a free port on 127.0.0.1, trust authentication for the loopback;
run as ``nobody`` when the tests run as root (the server refuses root). ``stop()``/``start()``
restart it in place (the database survives); ``close()`` removes everything, also after a failure."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from _ports import free_tcp_port

PG_BIN = Path(os.environ.get("MLTCP_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing_reason() -> str | None:
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return (
            f"PostgreSQL server binaries not found in {PG_BIN} (Debian package postgresql: scripts/install-system.sh)"
        )
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 not installed (pip install 'mltcp[tune]')"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: cannot start PostgreSQL as an unprivileged user"
    return None


class PostgresServer:
    def __init__(self, dbname: str = "mltcp"):
        self.dbname = dbname
        self.root = Path(tempfile.mkdtemp(prefix="mltcp-pg-", dir="/tmp"))
        self.data, self.sock, self.log = self.root / "data", self.root / "sock", self.root / "server.log"
        self.port = free_tcp_port()
        self.user = "nobody" if os.geteuid() == 0 else None
        self.sock.mkdir()
        if self.user:
            pw = pwd.getpwnam(self.user)
            for p in (self.root, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{self.dbname}"

    def _run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [str(PG_BIN / cmd[0]), *cmd[1:]]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        r = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
        )
        if check and r.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd[:2])} failed ({r.returncode}): {r.stdout.decode(errors='replace')[-2000:]}"
                f"\n{self.log.read_text(errors='replace')[-2000:] if self.log.exists() else ''}"
            )
        return r

    def create(self) -> "PostgresServer":
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"
        )
        self.start()
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.dbname}")
        conn.close()
        return self

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def query(self, sql: str):
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=self.dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
