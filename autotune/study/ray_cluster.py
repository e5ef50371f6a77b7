"""Connecting to Ray: an existing cluster, or a local instance bound to loopback.

Why each setting (Ray's docs on starting Ray and on token authentication,
https://docs.ray.io/en/latest/ray-core/starting-ray.html, and what Ray 2.60 did here):

* Ray 2.60 turns token auth on for local instances and writes ``~/.ray/auth_token``;
  a driver that passes an explicit address does not pick that token up by itself
  and fails after ~20 s with "Unauthenticated". So when ``RAY_AUTH_MODE`` is
  unset and a token is available, we set ``RAY_AUTH_MODE=token`` before connecting.
* Ray binds the host's routable IP unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``;
  with it, a local instance listens on 127.0.0.1 only.
* ``address="local"`` always starts a fresh instance (a bare ``ray.init()`` would try
  a dead cluster left in ``/tmp/ray/ray_current_cluster``).
* No dashboard, usage stats off, and a small object store: trial results are a few KiB.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

log = logging.getLogger(__name__)

LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2


def token_available() -> bool:
    """Whether a Ray auth token can be found (env or ``~/.ray/auth_token``)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return Path(path).expanduser().is_file()
    return (Path.home() / ".ray" / "auth_token").is_file()


def resolve_address(address: str | None) -> str | None:
    """The cluster to join: the study's ``executor.address``, else ``RAY_ADDRESS``, else None (local)."""
    addr = address or os.environ.get("RAY_ADDRESS") or None
    if addr in (None, "", "local"):
        return None
    return addr


def connect(address: str | None, *, num_cpus: int | None, num_gpus: int, namespace: str = "autotune") -> bool:
    """Connect this process to Ray; return True when it started a local instance (then it owns it).

    Reuses an instance this process already initialised (tests share one that way).
    """
    import ray

    env_before = dict(os.environ)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        log.info("using the Ray instance this process already joined")
        return False
    addr = resolve_address(address)
    if addr is not None:
        explicit = addr != "auto" and not addr.startswith("ray://")
        if explicit and "RAY_AUTH_MODE" not in os.environ and token_available():
            os.environ["RAY_AUTH_MODE"] = "token"
            log.info("RAY_AUTH_MODE=token (a Ray auth token is present; explicit address %s)", addr)
        log.info("joining the Ray cluster at %s", addr)
        try:
            ray.init(address=addr, namespace=namespace, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"executor.address: cannot join the Ray cluster at {addr!r}: {first} "
                "(token auth: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or ~/.ray/auth_token as on the head; "
                "Ray and Python versions must match the cluster's)"
            ) from exc
        return False
    _loopback_only()
    marker = _guard_local_instance()
    cpus = num_cpus if num_cpus is not None else (os.cpu_count() or 1)
    log.info("starting a local Ray instance on loopback: %d CPU(s), %d GPU(s) declared", cpus, num_gpus)
    handlers = _handlers()
    with _sigint_default():
        ray.init(
            address="local",
            num_cpus=cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            namespace=namespace,
            logging_level=logging.WARNING,
        )
    _local["marker"] = marker
    _local["handlers"] = handlers  # ray.init replaces the driver's SIGTERM handler and never puts it back
    _local["env"] = {k: env_before.get(k) for k in set(env_before) | set(os.environ)
                     if env_before.get(k) != os.environ.get(k)}
    return True


# What starting the local instance changed in this process: its guard's marker and the
# environment entries it (and ray.init) set, undone by disconnect().
_local: dict[str, Any] = {}


def _handlers() -> dict[int, Any]:
    """The driver's SIGINT/SIGTERM handlers (Python-level ones only: a C-level one reads as None)."""
    out = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    return {sig: h for sig, h in out.items() if h is not None}


@contextmanager
def _sigint_default() -> Iterator[None]:
    """Start Ray's processes with SIGINT's default disposition.

    A driver started in the background (nohup, `cmd &` in a script) has SIGINT ignored, and
    an ignored signal is inherited through fork and exec: every Ray worker would ignore it
    too. Ray's soft cancel is a SIGINT in the worker (interrupt_main), so shutdown(cancel=True)
    could never stop a trial body gracefully and every cancel waited for the force. A handler
    (unlike SIG_IGN) is reset to the default by exec, so setting one while Ray starts suffices.
    """
    ignored = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _guard_local_instance() -> str:
    """Make the local instance die with this driver, even on ``kill -9``.

    Ray's head processes follow a driver that exits, but after a SIGKILL its
    dashboard and runtime-env agents were seen living on, reparented to init. Every
    process Ray starts inherits this driver's environment, so a marker set before
    ``ray.init`` tags them all, and the same detached guard that watches each trial's
    worker watches this driver and ends whatever carries the marker once it is gone.
    """
    import uuid

    from autotune.study import ray_guard

    marker = f"ray-local-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[ray_guard.MARKER_ENV] = marker
    ray_guard.spawn(marker)
    return marker


def _loopback_only() -> None:
    """Keep a local instance on 127.0.0.1.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when ``ray`` is first
    imported, so setting the variable now only reaches the processes Ray starts;
    the driver's already-imported constant is set too (a private name, hence guarded).
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0":
        return
    try:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    except (ImportError, AttributeError):  # a Ray without that switch: it binds where it binds
        log.warning("could not keep the local Ray instance on loopback")


def disconnect(owned: bool) -> None:
    """Shut down a local instance this process started; leave a joined cluster running."""
    import ray

    if owned and ray.is_initialized():
        ray.shutdown()
        log.info("local Ray instance shut down")
    if owned and _local:
        # Shut down cleanly: its guard has nothing left to watch for, and this process's
        # environment and signal handlers go back to what they were (a library call leaves
        # no marker and no handler of Ray's behind).
        from autotune.study import ray_guard

        ray_guard.stop_guards(_local["marker"])
        if threading.current_thread() is threading.main_thread():
            for sig, handler in _local["handlers"].items():
                signal.signal(sig, handler)
        for k, v in _local["env"].items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _local.clear()


def node_totals() -> list[dict[str, float]]:
    """Resources of each live node, without Ray's internal ``node:*`` markers."""
    import ray

    out = []
    for node in ray.nodes():
        if not node.get("Alive", False):
            continue
        res: dict[str, Any] = node.get("Resources", {}) or {}
        out.append({k: float(v) for k, v in res.items() if not k.startswith("node:")})
    return out


def local_instance_lost() -> str | None:
    """For a Ray instance this process started: which of its processes died (raylet, GCS),
    else None. A trial whose worker died then says nothing about the candidate: the
    instance itself is gone, and every later trial would fail the same way."""
    try:
        import ray

        node = ray._private.worker._global_node  # the local instance this driver started
        dead: list[tuple[Any, Any]] = node.dead_processes() if node is not None else []
    except Exception:  # noqa: BLE001 - private API: unknown is not "lost"
        return None
    names = sorted({str(kind) for kind, _ in dead})
    return ", ".join(names) or None

