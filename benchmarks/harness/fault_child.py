"""A study driver with one fault patched in, run as its own process by the fault tables
(benchmarks/harness/faults.py ``start_run(..., child=KIND)``)::

    python benchmarks/harness/fault_child.py port|erofs|enospc STUDY

- ``port``: the N-th launch's port (``AUTOTUNE_FAULT_PORT_CALL``, the second by default) is bound
  by someone else between autotune's probe and the server's bind; ``port.taken`` beside the study
  says which trial and when;
- ``erofs`` / ``enospc``: the trial's artifact writes fail with EROFS / ENOSPC while
  ``erofs.now`` / ``enospc.now`` exists beside the study.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any


def child(kind: str, study: str) -> int:
    import errno

    root = Path(study).resolve().parent
    if kind == "port":
        from autotune import launch

        real = launch.free_port
        calls = {"n": 0}
        squat_call = int(os.environ.get("AUTOTUNE_FAULT_PORT_CALL", "2"))  # the second launch by default
        squatters: list[socket.socket] = []

        def free_port(host: str = "127.0.0.1") -> int:
            port = real(host)
            calls["n"] += 1
            if calls["n"] == squat_call:  # that launch: someone binds the port after the probe
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, port))
                s.listen(1)
                squatters.append(s)
                trials = sorted((root / "run" / "trials").glob("0*"))
                n = int(trials[-1].name) if trials else 1
                (root / "port.taken").write_text(f"{n} {time.time()}")
            return port

        launch.free_port = free_port
    elif kind in ("erofs", "enospc"):
        from autotune.launch import artifacts

        code = errno.EROFS if kind == "erofs" else errno.ENOSPC
        flag = root / f"{kind}.now"
        real_write = artifacts.write_launch_artifacts

        def write(*a: Any, **kw: Any) -> Any:
            if flag.exists():
                raise OSError(code, os.strerror(code), str(a[0]))
            return real_write(*a, **kw)

        artifacts.write_launch_artifacts = write
    from autotune.cli import main

    return main(["run", study, "--no-progress"])


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], sys.argv[2]))
