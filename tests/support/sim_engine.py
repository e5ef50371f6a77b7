"""A recording stand-in speed model and a simulated engine to drive with it (the engine's tests).

The engine runs at a huge time scale with constant step times, so a test runs in milliseconds and
checks scheduling exactly; ``run_to_idle`` steps it synchronously in modelled time.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from autotune.sim.engine.core import Engine, StepResult
from autotune.sim.perf.knobs import KnobSpeed

FAST = 1e6  # time scale at which the tests do not wait


class RecordingPerf:
    """Constant step times; remembers every decode batch and prefill batch."""

    def __init__(self, decode_s: float = 0.02, prefill_s_per_token: float = 1e-5, accepted: float = 1.0,
                 accept_p: float = 0.0, draft_tokens: int = 1, overlap: bool = False,
                 knobs: KnobSpeed | None = None) -> None:
        self.overlap = overlap  # SGLang's overlap scheduler, as PerfModel.overlap
        if knobs is not None:  # the launch's speed knobs, as PerfModel.inputs.knobs
            self.inputs = SimpleNamespace(knobs=knobs)
        self.decode_s = decode_s
        self.prefill_s_per_token = prefill_s_per_token
        self.accepted = accepted
        self.decode_batches: list[int] = []
        self.prefill_batches: list[tuple[int, int]] = []
        if accept_p:
            self.accept_p = accept_p
            self.spec_draft_tokens = draft_tokens

    def prefill_time_s(self, num_tokens: int, batch_reqs: int, attn_pairs: float | None = None) -> float:
        self.prefill_batches.append((num_tokens, batch_reqs))
        return 0.005 + num_tokens * self.prefill_s_per_token

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        self.decode_batches.append(batch_size)
        return self.decode_s

    def accepted_tokens_per_step(self, batch_size: int) -> float:
        return self.accepted


def make_engine(perf: Any, **kw: Any) -> Engine:
    args: dict[str, Any] = dict(kv_tokens=100_000, max_running_requests=64, chunked_prefill_size=8192,
                                time_scale=FAST, seed=0)
    args.update(kw)
    return Engine(perf, **args)


def run_to_idle(engine: Engine) -> list[StepResult]:
    steps = []
    while (step := engine.step_once()) is not None:
        steps.append(step)
    return steps
