"""A throwaway PostgreSQL server: initdb a temporary cluster, listen on 127.0.0.1 and a free
port, trust auth, fsync off. PostgreSQL refuses to run as root, so under root the cluster is
owned and run by the ``postgres`` user (or ``nobody``).

``PgServer.start()/stop()/restart()`` let a test or a benchmark take the database away
mid-study. The test suite's ``pg`` fixture (tests/support/postgres.py) runs one per module;
``benchmarks/faults.py`` and ``benchmarks/scale.py`` start their own.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path


def find_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(cand) / "initdb").exists():
            return Path(cand)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.port = _free_port()
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            if self.user is None:
                raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL")
            os.chmod(root, 0o755)
            os.chown(root, self.user.pw_uid, self.user.pw_gid)

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self.user  # under root: run as the unprivileged user, without root's groups
        env = {**os.environ, "LC_ALL": "C", "HOME": str(self.root)}
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=self.root, env=env, user=user.pw_uid if user else None,
                              group=user.pw_gid if user else None, extra_groups=[] if user else None)

    def init(self) -> None:
        r = self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "autotune", "--auth=trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions")
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()[-500:]}")

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        r = self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.log),
                      "-w", "-t", "60", "start")
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self) -> None:
        self.stop("fast")
        self.start()

    def running(self) -> bool:
        return self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "status").returncode == 0

    def createdb(self, name: str) -> str:
        r = self._run(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "autotune", name)
        if r.returncode != 0 and "already exists" not in r.stderr:
            raise RuntimeError(f"createdb {name} failed: {r.stderr.strip()}")
        return self.url(name)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://autotune@127.0.0.1:{self.port}/{db}"

    def log_tail(self) -> str:
        try:
            return self.log.read_text()[-800:]
        except OSError:
            return ""
