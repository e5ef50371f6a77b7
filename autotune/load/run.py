"""Entry points of the load generator: :func:`run_load` (sync) and :func:`run_load_async`.

One call runs one load point: probe the server (``/server_info`` for the simulated
server's time scale; ``/v1/models`` for the served model name when needed), send the
warm-up requests, flush the cache if asked, pre-open the connections, then run the
timed part and return a :class:`~autotune.load.result.LoadResult`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from autotune.errors import ConfigError, LoadGenError
from autotune.limits import JSON_BYTES, MAX_SIM_FACTOR, MIN_TIME_SCALE, shown
from autotune.load.result import LoadPointFailed, LoadResult
from autotune.load.runner import LoadRunner, SnapshotCallback
from autotune.load.sources import check_files
from autotune.load.spec import LoadSpec, shown_url, url_problem
from autotune.load.transport.http import StreamPool

try:  # optional speed-up: halves client CPU per token when events are not coalesced
    import uvloop

    _loop_factory: Any = uvloop.new_event_loop
except ImportError:  # pragma: no cover - exercised only without uvloop
    _loop_factory = None

log = logging.getLogger(__name__)


def check_base_url(base_url: str | None) -> str:
    """Normalise a base URL (no trailing slash); ConfigError when missing or not http(s)."""
    if not base_url:
        raise ConfigError("base_url=None: a server URL is required")
    problem = url_problem(base_url)
    if problem:
        raise ConfigError(f"base_url={shown_url(base_url)}: {problem}")
    return base_url.rstrip("/")


# Control requests (server info, model name, cache flush, the simulator's clock) answer at
# once from a live server; a hung one (SIGSTOP, deadlock) must not hang the load point.
CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=30.0)
#: A control answer is a few KB (SGLang's /server_info: its server args and internal states); a larger
#: body is no answer, and is not read whole.
CONTROL_BYTES = 4 * 2**20
#: The simulator's modelled clock (``/sim/stats`` ``modelled_now_s``): a value past this (about 3 x 10^7
#: years) is no clock.
MAX_CLOCK_S = 1e15


async def _get_json(session: aiohttp.ClientSession, url: str, limit: int = CONTROL_BYTES) -> Any:
    """The JSON answer of a control GET; None for another status, a body over ``limit`` bytes or one
    that is not JSON."""
    # no redirect is followed: a control request stays on the server's own host and port (aiohttp
    # followed a 302 to any host, a proxy's or a hostile server's pick); a redirect is no answer
    async with session.get(url, timeout=CONTROL_TIMEOUT, allow_redirects=False) as resp:
        if resp.status != 200:
            return None
        body = bytearray()
        async for chunk in resp.content.iter_chunked(1 << 16):
            body += chunk
            if len(body) > limit:
                log.warning("%s answered more than %d bytes: ignored", url, limit)
                return None
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None


async def probe_server(session: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    """``GET /server_info``; ``{}`` when the server has none. LoadPointFailed when unreachable."""
    try:
        info = await _get_json(session, base_url + "/server_info")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise LoadPointFailed(f"cannot reach the server at {base_url}: {exc}") from None
    return info if isinstance(info, dict) else {}


async def accept_length(session: aiohttp.ClientSession, base_url: str) -> float | None:
    """Speculative decoding's accept length after the run: the server's ``avg_spec_accept_length``
    (tokens a request gains per draft/verify cycle, the bonus token included: SGLang's
    ``cum_spec_accept_length / cum_spec_accept_count``, kept since the server started), read from
    ``/server_info`` once the load point is over, as bench_serving reads it. None without speculative
    decoding, or when the server does not say."""
    try:
        return accept_length_of(await probe_server(session, base_url))
    except LoadPointFailed:  # the server went away after its load point: the figure is just missing
        return None


def accept_length_of(server_info: Any) -> float | None:
    """``internal_states[0].avg_spec_accept_length`` of a ``/server_info`` answer, when a positive number."""
    states = server_info.get("internal_states") if isinstance(server_info, dict) else None
    first = states[0] if isinstance(states, list) and states else None
    value = first.get("avg_spec_accept_length") if isinstance(first, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def time_scale_of(server_info: dict[str, Any]) -> float:
    """The simulated server's time scale (modelled seconds per wall second), else 1.0.

    A scale outside the simulator's own bounds (``MIN_TIME_SCALE`` to ``MAX_SIM_FACTOR``, as
    ``server.sim.time_scale``) is no simulator's: 1.0, with a warning (1e308 from a server that
    claimed to be one was a ValueError traceback from the metrics; 1e-300 scaled every figure to 0).
    """
    sim = server_info.get("sim")
    if isinstance(sim, dict):
        value = sim.get("time_scale", 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return 1.0
        x = float(value)
        if not MIN_TIME_SCALE <= x <= MAX_SIM_FACTOR:  # NaN too
            log.warning("the server's /server_info says sim.time_scale=%s, outside %g to %g: ignored",
                        shown(value), MIN_TIME_SCALE, MAX_SIM_FACTOR)
            return 1.0
        return x
    return 1.0


def sim_clock_probe(
    session: aiohttp.ClientSession, base_url: str
) -> Callable[[], Awaitable[tuple[float, float] | None]]:
    """A probe of the simulated server's modelled clock (``/sim/stats`` ``modelled_now_s``).

    Returns ``(wall, modelled)`` with ``wall`` the midpoint of the request, or None when
    the server does not expose the clock.
    """

    async def probe() -> tuple[float, float] | None:
        t0 = time.perf_counter()
        try:
            # without the record per request served (~200 bytes each, every request since the server started): a
            # probe polled through a long run would otherwise fetch them all each time and, past JSON_BYTES, fail
            stats = await _get_json(session, base_url + "/sim/stats?requests=0", JSON_BYTES)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        t1 = time.perf_counter()
        now = stats.get("modelled_now_s") if isinstance(stats, dict) else None
        if isinstance(now, bool) or not isinstance(now, (int, float)) or not 0 <= now < MAX_CLOCK_S:
            return None  # not a clock (NaN, inf, a string): the run keeps the nominal time scale
        return (t0 + t1) / 2, float(now)

    return probe


async def served_model(session: aiohttp.ClientSession, base_url: str) -> str:
    """The first model id listed by ``GET /v1/models``."""
    try:
        data = await _get_json(session, base_url + "/v1/models")
        return str(data["data"][0]["id"])
    except (TimeoutError, aiohttp.ClientError, OSError, KeyError, IndexError, TypeError) as exc:
        raise LoadGenError(
            f"model=None: could not read the served model name from {base_url}/v1/models ({exc!r}); pass a model"
        ) from None


async def flush_cache(session: aiohttp.ClientSession, base_url: str, attempts: int = 10) -> bool:
    """``POST /flush_cache``, retried while the server still has requests running (HTTP 400)."""
    for _ in range(attempts):
        try:
            async with session.post(base_url + "/flush_cache", timeout=CONTROL_TIMEOUT, allow_redirects=False) as resp:
                # only the status matters: the body is not read (a server could send one without end)
                if resp.status == 200:
                    return True
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("flush_cache failed: %s", exc)
            return False
        await asyncio.sleep(0.2)
    log.warning("flush_cache: the server kept refusing (requests still running?)")
    return False


async def _with_model_id_range(session: aiohttp.ClientSession, base_url: str, spec: LoadSpec) -> LoadSpec:
    """``spec`` drawing token ids inside the served model's vocabulary, when its directory is local."""
    from autotune.load.prompts import token_id_range

    for path in ("/model_info", "/get_model_info"):
        try:
            info = await _get_json(session, base_url + path)
        except (TimeoutError, aiohttp.ClientError, OSError):
            info = None
        model_path = info.get("model_path") if isinstance(info, dict) else None
        if isinstance(model_path, str) and model_path:
            ids = token_id_range(model_path)
            return spec.model_copy(update={"token_id_range": ids}) if ids is not None else spec
    return spec


async def run_load_async(
    base_url: str | None, spec: LoadSpec, *, on_snapshot: SnapshotCallback | None = None
) -> LoadResult:
    """Run one load point against ``base_url`` (or ``spec.base_url``) and return its result.

    Raises :class:`~autotune.load.result.LoadPointFailed` (a ``LoadGenError``) when the
    server cannot be reached, dies, or no request completes.
    """
    base = check_base_url(base_url or spec.base_url)
    check_files(spec)  # a malformed dataset fails before any request is sent
    t = spec.timeouts
    timeout = aiohttp.ClientTimeout(total=t.total_s, sock_connect=t.connect_s, connect=t.connect_s)
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    connector = aiohttp.TCPConnector(limit=spec.concurrency or 0, limit_per_host=0, keepalive_timeout=30)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers, read_bufsize=1 << 20, auto_decompress=False
    ) as session:
        info = await probe_server(session, base)
        if spec.backend == "sglang" and spec.token_id_range is None and spec.dataset_path is None:
            spec = await _with_model_id_range(session, base, spec)
        model = spec.model
        if model is None and spec.backend != "sglang":
            model = await served_model(session, base)
        pool = StreamPool(base, limit=spec.concurrency or 0, headers=headers, connect_timeout_s=t.connect_s)
        runner = LoadRunner(base, spec, model, pool)
        runner.time_scale = time_scale_of(info)
        watchdog = asyncio.get_running_loop().create_task(runner._watchdog())
        try:
            await runner.warmup()
            if spec.flush_cache:
                await flush_cache(session, base)
            await runner.preopen()
            clock = sim_clock_probe(session, base) if "sim" in info else None
            result = await runner.measure(on_snapshot, clock)
            result.metrics["accept_length"] = await accept_length(session, base)
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            pool.close()
    result.server_info = info
    return result


def run_load(base_url: str | None, spec: LoadSpec, *, on_snapshot: SnapshotCallback | None = None) -> LoadResult:
    """Synchronous :func:`run_load_async`, on uvloop when installed.

    Called from inside a running event loop, it runs the load point on a helper thread.
    """
    coro_args = (base_url, spec)

    def _run() -> LoadResult:
        with asyncio.Runner(loop_factory=_loop_factory) as runner:
            return runner.run(run_load_async(*coro_args, on_snapshot=on_snapshot))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run).result()
