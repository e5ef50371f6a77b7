"""Launching servers and guaranteeing their teardown (see docs/ARCHITECTURE.md).

Public surface:

* :class:`ServerProcess` - start, ``wait_ready``, ``kill_now``, ``stop``; a context manager.
* :func:`free_port` - a fresh loopback port per launch.
* :class:`ProcessRegistry` - launched groups on disk; ``reap_leftovers()``.
* :func:`classify` - (FailureKind, evidence line) from a dead server's log tail.
* :func:`install_signal_handlers`, :func:`stop_all` - orphan safety in the orchestrator.
* :func:`write_launch_artifacts` - command.sh, argv.json, env.json, launch.json.
"""

from autotune.launch.artifacts import shell_command, write_launch_artifacts
from autotune.launch.cleanup import install_signal_handlers, live_servers, register_atexit, stop_all
from autotune.launch.failures import classify
from autotune.launch.ports import free_port, mark_port_used
from autotune.launch.process import ServerProcess
from autotune.launch.registry import ProcessRegistry
from autotune.redact import redact_argv, redact_env

__all__ = [
    "ProcessRegistry",
    "ServerProcess",
    "classify",
    "free_port",
    "install_signal_handlers",
    "live_servers",
    "mark_port_used",
    "redact_argv",
    "redact_env",
    "register_atexit",
    "shell_command",
    "stop_all",
    "write_launch_artifacts",
]
