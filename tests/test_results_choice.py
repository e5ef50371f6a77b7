"""`best` explains its choice: confirmed median vs single runs, ties within the measured
noise, and among ties the most memory headroom, then the fewest flags."""

from __future__ import annotations

from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, create_trial

from autotune.results.choice import explain

DIST = {"mem_fraction_static": FloatDistribution(0.5, 0.95)}


def _t(number: int, value: float, f: float, flags: int = 3) -> FrozenTrial:
    t = create_trial(value=value, params={"mem_fraction_static": f}, distributions=DIST,
                     user_attrs={"flags": flags})
    t.number = number
    return t


def _explain(top: FrozenTrial, others: list[FrozenTrial], conf: dict) -> dict:
    values = {str(n): c["median"] for n, c in conf.items()}
    return explain(top, others, lambda t: values.get(str(t.number), t.value), conf, maximize=True,
                   gpu_gib=96.0, flags_of=lambda t: t.user_attrs["flags"])


CONF = {"1": {"values": [1000, 1010, 990], "median": 1000.0, "spread_pct": 2.0},
        "2": {"values": [900, 910, 890], "median": 900.0, "spread_pct": 2.22}}


def test_single_run_above_the_confirmed_median_is_explained_not_a_winner() -> None:
    top, lucky = _t(1, 1030.0, 0.90), _t(7, 1060.0, 0.90)
    out = _explain(top, [lucky, _t(2, 950.0, 0.9)], CONF)
    assert out["basis"] == "median of 3 runs (spread 2.00 %)"
    assert "trial(s) 7 show a better single run" in out["reason"]
    assert out["noise_pct"] == 2.11 and out["ties"] == []  # 6 % above: not within the noise
    assert out["recommended"] == 1


def test_ties_within_noise_prefer_headroom_then_fewer_flags() -> None:
    top = _t(1, 1000.0, 0.93, flags=5)
    roomy = _t(4, 999.7, 0.85, flags=5)   # 0.03 % below: a tie, 7.7 GiB more outside the pool
    lean = _t(5, 999.9, 0.85, flags=3)    # a tie with the same headroom and fewer flags
    far = _t(6, 950.0, 0.50, flags=1)     # 5 % below: not a tie, however roomy
    out = _explain(top, [lean, roomy, far], CONF)
    assert out["ties"] == [5, 4]
    assert out["recommended"] == 5
    assert "within the measured noise (2.11 %" in out["reason"] and "trial 5 is recommended instead" in out["reason"]
    assert out["headroom_gib"][5] == 14.4 and out["headroom_gib"][1] == 6.72


def test_without_confirmation_no_tie_is_called() -> None:
    out = _explain(_t(1, 1000.0, 0.9), [_t(2, 999.9, 0.5)], {})
    assert out["basis"] == "a single run" and out["ties"] == [] and out["noise_pct"] is None
    assert "noise is unknown" in out["reason"]


def test_another_trial_of_the_winners_own_parameters_is_neither_a_tie_nor_a_runner_up() -> None:
    """A retry or repeat of the winner's configuration (trial 38 of the scale study had the
    winner's parameters) is the same configuration: `best` lists each other configuration
    once, at its best-ranked trial."""
    from autotune.results.summary import _other_configurations

    top = _t(1, 1000.0, 0.85)
    same = _t(38, 999.9, 0.8500000000000001)  # optuna's stepped float noise: the same configuration
    other, other_again = _t(4, 990.0, 0.80), _t(9, 980.0, 0.80)
    ranked = [top, same, other, other_again]
    assert [t.number for t in _other_configurations(ranked, top)] == [4]
    out = _explain(top, _other_configurations(ranked, top), CONF)
    assert 38 not in out["ties"]
