"""A Ray cluster address checked before Ray is handed it: ``ray.init`` retries an address it cannot
reach for minutes, so a malformed or unresolvable one is refused at once (exit 2) and one where no
head answers is reported in seconds (exit 1). Process-free but for one name lookup and one TCP
connect; :mod:`autotune.preflight` runs it before anything starts, :mod:`autotune.study.execution.ray.cluster`
before it connects."""

from __future__ import annotations

import os

from autotune.errors import AutotuneError, ConfigError

#: How long the address check waits for a name to resolve and for the head to accept a connection.
#: ``ray.init`` itself retries an address it cannot reach for minutes before it gives up.
RESOLVE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0


class ClusterUnreachable(AutotuneError):
    """The Ray address is well formed and resolves, but nothing accepts a connection there (exit 1)."""


def resolve_address(address: str | None) -> str | None:
    """The cluster to join: the study's ``executor.address``, else ``RAY_ADDRESS``, else None (local)."""
    addr = address or os.environ.get("RAY_ADDRESS") or None
    if addr in (None, "", "local"):
        return None
    return addr


def address_field(address: str | None) -> str:
    """Where the address in use came from, as the one-line errors name it."""
    return "executor.address" if address else "RAY_ADDRESS"


def split_address(addr: str, field: str = "executor.address") -> tuple[str, int]:
    """``(host, port)`` of a Ray address (``host:port``, ``[v6]:port``, ``ray://host:port``);
    ConfigError naming ``field`` and the value for anything else."""
    bare = addr.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or "/" in bare or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{field}: not a Ray address: give host:port (the head's GCS port, 6379 by "
                          f"default), ray://host:port, auto or local (got {addr!r})")
    return host, int(port)


def check_address(address: str | None) -> None:
    """Check the cluster address before ``ray.init`` is handed it (ray.init retries an address it
    cannot reach for minutes): ConfigError (exit 2) for a malformed one or a host name that does
    not resolve; :class:`ClusterUnreachable` (exit 1) when nothing accepts a connection there.
    ``auto``, ``local`` and no address (a local instance) pass."""
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    addr = resolve_address(address)
    if addr is None or addr == "auto":
        return
    field = address_field(address)
    host, port = split_address(addr, field)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-resolve")
    try:  # getaddrinfo has no timeout of its own: a dead resolver would hang it
        infos = pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(RESOLVE_TIMEOUT_S)
    except FutureTimeout:
        raise ConfigError(f"{field}: host {host!r} did not resolve within {RESOLVE_TIMEOUT_S:.0f} s "
                          f"(got {addr!r})") from None
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"{field}: host {host!r} does not resolve ({exc}) (got {addr!r})") from None
    finally:
        pool.shutdown(wait=False)
    last: OSError | None = None
    for family, kind, proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(CONNECT_TIMEOUT_S)
                s.connect(sockaddr)
            return
        except OSError as exc:
            last = exc
    why = (last.strerror or str(last)) if last is not None else "no address"
    raise ClusterUnreachable(f"{field}: no Ray head answers at {addr!r} ({why}); start the cluster "
                             "(ray start --head) or correct the address")
