from types import SimpleNamespace

from autotune.results.pareto import front, trial_front


def test_front_keeps_only_undominated_points():
    items = [(10.0, 100.0, "a"), (20.0, 90.0, "dominated"), (15.0, 150.0, "b"), (30.0, 150.0, "tie-worse"),
             (40.0, 300.0, "c")]
    assert [p[2] for p in front(items)] == ["a", "b", "c"]
    assert front([]) == []


def test_trial_front_spans_every_load_point():
    t1 = SimpleNamespace(number=1, user_attrs={"metrics": {"c8": {"p99_ttft_ms": 50, "output_throughput": 400},
                                                           "c64": {"p99_ttft_ms": 900, "output_throughput": 2000}}})
    t2 = SimpleNamespace(number=2, user_attrs={"metrics": {"c64": {"p99_ttft_ms": 950, "output_throughput": 1500}}})
    rows = trial_front([t1, t2], "p99_ttft_ms")
    assert [(r["number"], r["point"]) for r in rows] == [(1, "c8"), (1, "c64")]
