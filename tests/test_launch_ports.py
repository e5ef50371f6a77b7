"""free_port: fresh, bindable, never a port handed out or released recently."""

from __future__ import annotations

import socket

from autotune.launch import free_port, mark_port_used
from autotune.launch.ports import recently_used


def test_free_port_never_repeats() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(recently_used(p) for p in ports)


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_port_of_a_stopped_server_is_not_handed_out(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import autotune.launch.ports as ports

    released = 45678
    mark_port_used(released)
    handed = iter([released, released, 45679])

    class FakeSocket:
        def __init__(self, *a: object) -> None:
            self.port = next(handed)

        def __enter__(self) -> FakeSocket:
            return self

        def __exit__(self, *a: object) -> None:
            pass

        def bind(self, addr: object) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ports.socket, "socket", FakeSocket)
    assert free_port() == 45679
