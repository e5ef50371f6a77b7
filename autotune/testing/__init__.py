"""Servers and studies to test and measure autotune against, shipped with it (as guidellm ships its
mock server) so the test suite and the benchmarks share one copy.

The top floor of docs/ARCHITECTURE.md: it may import anything in autotune; nothing in autotune
imports it. Plain Python, no pytest: the suite's fixtures around these live in tests/support/.

- ``loadgen_fake_server``: an independent streaming LLM server with known timing (SGLang native
  and OpenAI endpoints, faults on request), the truth the load generator is checked against;
  ``running(*options)`` starts one on a free port.
- ``pg_server``: a throwaway PostgreSQL server (``PgServer``, ``find_bindir``).
- ``real_cpu_study``: ``small_study``, studies/real-cpu-tiny.yaml made small for fault checks, and
  the tiny models' paths (from a checkout).
"""
