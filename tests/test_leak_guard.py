"""The suite's leak guard (tests/support/leak_guard.py) catches each kind of state a test can leave behind.

Its check is called directly on deliberately leaky functions, and a pytester run proves the
plugin itself: the leaky test fails (as an error of that test), the next test starts clean,
and a higher-scoped fixture may hold a process only when SHARED_ON_PURPOSE lists it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.leak_guard import GRACE_ENV, SESSION_ENV, leaky

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_child_process_is_caught_and_killed() -> None:
    procs: list[subprocess.Popen[bytes]] = []
    found = leaky(lambda: procs.append(subprocess.Popen(SLEEPER)))
    assert found == [f"a process: pid {procs[0].pid}: {' '.join(SLEEPER)}"]
    procs[0].wait(timeout=10)  # cleaned up: it has ended (the guard reaped it)


def test_a_process_that_left_the_tree_is_caught_by_its_session_marker(tmp_path: Path) -> None:
    """A double fork reparents the grandchild to init: only the marker in its environment says whose it is."""
    pid_file = tmp_path / "pid"
    code = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "    time.sleep(120)\n")
    found = leaky(lambda: subprocess.run([sys.executable, "-c", code, str(pid_file)], timeout=30, check=True))
    assert len(found) == 1 and found[0].startswith(f"a process: pid {pid_file.read_text()}:")
    assert SESSION_ENV in os.environ


def test_a_process_that_exits_within_the_grace_is_not_a_leak() -> None:
    assert leaky(lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"]), grace_s=10) == []


def test_a_listening_port_is_caught_and_closed() -> None:
    socks: list[socket.socket] = []

    def listen() -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)

    try:
        found = leaky(listen)
        assert found == [f"a listening port: 127.0.0.1:{socks[0].getsockname()[1]}"]
    finally:
        socks[0].close()


def test_a_changed_signal_handler_and_mask_are_caught_and_restored() -> None:
    before = signal.getsignal(signal.SIGINT)

    def ignore_ctrl_c() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})

    found = leaky(ignore_ctrl_c)
    assert f"a signal handler: SIGINT {getattr(before, '__qualname__', before)} -> SIG_IGN" in found
    assert "the blocked-signal mask: [] -> ['SIGUSR2']" in found
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.SIGUSR2 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_changed_environment_variable_and_cwd_are_caught_and_restored(tmp_path: Path) -> None:
    cwd = os.getcwd()

    def change() -> None:
        os.environ["RAY_ADDRESS"] = "127.0.0.1:1"
        os.chdir(tmp_path)

    found = leaky(change)
    assert found == ["an environment variable: RAY_ADDRESS=None -> '127.0.0.1:1'",
                     f"the working directory: {cwd} -> {tmp_path}"]
    assert "RAY_ADDRESS" not in os.environ and os.getcwd() == cwd


@pytest.mark.ray
def test_a_ray_instance_is_caught_and_shut_down() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process already joined Ray")
    env = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    try:
        found = leaky(lambda: ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024**2,
                                       logging_level="ERROR"), grace_s=2)
    finally:
        for k, v in env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert "a Ray instance still joined (ray.is_initialized())" in found
    assert any("raylet" in line or "gcs_server" in line for line in found)  # its processes, by name
    assert not ray.is_initialized()


INNER = '''
import os, signal, subprocess, sys, time
import pytest

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]

def test_leaves_a_child():
    subprocess.Popen(SLEEPER)

def test_leaves_sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_leaves_an_env_var():
    os.environ["LEAKY"] = "1"

def test_next_one_starts_clean():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert "LEAKY" not in os.environ

@pytest.fixture(scope="module")
def shared_sleeper():  # not in SHARED_ON_PURPOSE
    p = subprocess.Popen(SLEEPER)
    yield p
    p.kill()
    p.wait()

def test_uses_an_unlisted_shared_fixture(shared_sleeper):
    pass

@pytest.fixture(scope="module")
def sim():  # listed: a module may share one server
    p = subprocess.Popen(SLEEPER)
    yield p
    p.kill()
    p.wait()

def test_uses_a_listed_shared_fixture(sim):
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_uses_it_too(sim):
    pass
'''

INNER_FORGETFUL = '''
import subprocess, sys
import pytest

@pytest.fixture(scope="module")
def sim():  # listed, but forgets to stop its server
    yield subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

def test_uses_a_forgetful_shared_fixture(sim):
    pass
'''


def _sections(out: str) -> dict[str, str]:
    """Each 'ERROR at <phase> of <test>' section of pytest's output, by test name."""
    parts: dict[str, str] = {}
    for chunk in out.split(" ERROR at ")[1:]:
        head, _, body = chunk.partition("\n")
        name = head.split(" of ", 1)[1].strip(" _")
        parts[name] = body.split("\n___")[0].split("\n===")[0]
    return parts


def test_the_plugin_fails_the_leaky_test_and_the_next_one_starts_clean(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tests_dir = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv(SESSION_ENV)  # the inner session marks its own processes
    monkeypatch.setenv(GRACE_ENV, "1")  # its leaks never go: 1 s, not 5, before each is reported (twice here)
    pytester.makepyfile(test_inner=INNER, test_inner_forgetful=INNER_FORGETFUL)
    result = pytester.runpytest_subprocess("-p", "support.leak_guard", "-p", "no:cacheprovider", "-p", "no:randomly",
                                           "--timeout=120")
    out = result.stdout.str()
    sections = _sections(out)
    assert result.parseoutcomes().get("passed") == 7, out
    assert set(sections) == {"test_leaves_a_child", "test_leaves_sigint_ignored", "test_leaves_an_env_var",
                             "test_uses_an_unlisted_shared_fixture", "test_uses_a_forgetful_shared_fixture"}, out
    assert "this test left behind:\n  a process: pid " in sections["test_leaves_a_child"]
    assert "time.sleep(120)" in sections["test_leaves_a_child"]
    assert "a signal handler: SIGINT default_int_handler -> SIG_IGN" in sections["test_leaves_sigint_ignored"]
    assert "an environment variable: LEAKY=None -> '1'" in sections["test_leaves_an_env_var"]
    assert "fixture 'shared_sleeper' holds state for many tests but is not in" in \
        sections["test_uses_an_unlisted_shared_fixture"]
    assert "shared fixture 'sim' left, once torn down:\n  a process: pid " in \
        sections["test_uses_a_forgetful_shared_fixture"]


INNER_RESTART = '''
import subprocess, sys
import pytest
from support.leak_guard import held_by


class Holder:
    """A shared server that a test may stop; the next user starts it again (other argv: as a watchdog's)."""

    def __init__(self):
        self.p = None

    def running(self, tag):
        if self.p is None or self.p.poll() is not None:
            with held_by("sim"):
                self.p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", tag])
        return self.p


@pytest.fixture(scope="module")
def sim():  # listed
    h = Holder()
    h.running("first")
    yield h
    h.p.kill()
    h.p.wait()

def test_stops_the_shared_server(sim):
    sim.p.kill()
    sim.p.wait()

def test_starts_it_again(sim):
    sim.running("second")

def test_starts_a_stray_one_beside_it(sim):
    assert sim.running("third").poll() is None
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "stray"])
'''


def test_a_shared_server_started_again_by_a_test_stays_the_fixtures(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """held_by: what a test starts again for a shared fixture is the fixture's (and torn down with it);
    anything else that test starts is still its own leak."""
    tests_dir = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv(SESSION_ENV)
    monkeypatch.setenv(GRACE_ENV, "1")  # the stray never goes: 1 s, not 5, before it is reported
    pytester.makepyfile(test_inner_restart=INNER_RESTART)
    result = pytester.runpytest_subprocess("-p", "support.leak_guard", "-p", "no:cacheprovider", "-p", "no:randomly",
                                           "--timeout=120")
    out = result.stdout.str()
    sections = _sections(out)
    assert result.parseoutcomes().get("passed") == 3, out
    assert set(sections) == {"test_starts_a_stray_one_beside_it"}, out
    leak = sections["test_starts_a_stray_one_beside_it"]
    assert "this test left behind:\n  a process: pid " in leak and "stray" in leak and "second" not in leak, out
