"""Test support: what only the tests use (fixtures, fakes, helpers); no test module imports another.

Tests import it as ``support.<module>`` (``tests/`` is on ``sys.path`` under pytest). Servers
and studies the benchmarks need too live in the shipped package ``autotune.testing``.

- ``ci``: ``in_ci()`` and the slow tier's markers (conftest.py adds ``slow_tier`` to them).
- ``leak_guard``: the plugin that fails a test leaving a process, port, Ray instance, signal
  handler, environment variable or working directory behind (``SHARED_ON_PURPOSE``, ``held_by``).
- ``postgres``: the ``pg`` fixture (a throwaway PostgreSQL per module).
- ``real_sglang``: the real-SGLang CPU venv (``need_real_sglang``), the session's shared real
  server (``real_server``), its argv and environment.
- ``finished_study``: ``finished_spec`` / ``make_finished_study``, one finished study for the
  results tests, and ``replay_progress``.
- ``demo``: ``studies/demo.yaml`` as data with absolute model paths (``demo_data``,
  ``write_study``, ``demo_spec``).
- ``launch_fakes``: a fake server tree for the launcher's tests (``fake_argv``, pid helpers).
- ``sim_server``: the simulated SGLang server as a real process (``sim_server``).
- ``sim_engine``: a recording speed model and an engine to step (``RecordingPerf``,
  ``make_engine``, ``run_to_idle``).
- ``fake_nvml``: a stand-in for pynvml (``FakeNvml``, ``node_of``).
- ``browser``: headless Chromium for the dashboard and report tests.
- ``tiny_llama``: ``write_tiny_llama``, a tiny Llama with a WordLevel tokenizer on disk.
- ``benchmarks``: ``load_script``, a benchmark script imported as ``python benchmarks/x.py`` runs it.
- ``hostile``: the hostile-input suite's small study to break and its bounded CLI runs (``study``,
  ``setting``, ``cli``, ``cli_bounded``, ``one_line``, ``nothing_stored``).
"""
