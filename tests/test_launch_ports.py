"""free_port: fresh, bindable, never a port handed out or released recently."""

from __future__ import annotations

import socket

import pytest

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


def test_ports_are_drawn_below_the_ephemeral_range() -> None:
    """Outgoing connections take their local ports from the ephemeral range: a port drawn there could be taken
    before the server binds it (a launch lost as port_in_use); every port handed out is below it."""
    import autotune.launch.ports as ports

    span = ports.draw_range()
    assert span is not None
    drawn = [free_port() for _ in range(50)]
    assert all(span[0] <= p <= span[1] for p in drawn)
    if ports.EPHEMERAL_RANGE_FILE.exists():
        eph_low, eph_high = (int(x) for x in ports.EPHEMERAL_RANGE_FILE.read_text().split()[:2])
        assert not [p for p in drawn if eph_low <= p <= eph_high]


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ("32768\t60999\n", (20000, 32767)),  # Linux's default
    ("40000 65535", (20000, 32767)),
    ("15000 25000", (25001, 32767)),  # the room above it
    ("25000 60999", (20000, 24999)),
    ("1024 65535", None),  # no room: the kernel picks
    ("20500 32500", None),
    ("not numbers", (20000, 32767)),
    (None, (20000, 32767)),  # no such file (not Linux)
])
def test_the_draw_range_leaves_out_the_ephemeral_range(tmp_path, monkeypatch,  # type: ignore[no-untyped-def]
                                                       ephemeral: str | None, expected: tuple[int, int] | None) -> None:
    import autotune.launch.ports as ports

    f = tmp_path / "ip_local_port_range"
    if ephemeral is not None:
        f.write_text(ephemeral)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", f)
    assert ports.draw_range() == expected


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import autotune.launch.ports as ports

    monkeypatch.setattr(ports, "draw_range", lambda: None)
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_drawn_port_that_is_taken_is_not_handed_out(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import autotune.launch.ports as ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        draws = iter([taken, taken])
        monkeypatch.setattr(ports, "draw_range", lambda: (taken, taken + 1))
        monkeypatch.setattr(ports._draw, "randint", lambda a, b: next(draws, taken + 1))
        assert free_port() == taken + 1


def test_a_host_that_is_not_this_machines_is_an_error_not_a_retry() -> None:
    with pytest.raises(OSError) as err:
        free_port("192.0.2.1")  # TEST-NET-1: never a local address
    assert "no fresh port" not in str(err.value)
