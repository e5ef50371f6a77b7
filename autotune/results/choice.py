"""Why ``best`` picked its winner: what its value rests on, which configurations are ties
within the measured noise, and which of the ties it recommends.

The winner's value is the median of its confirmation runs when it was confirmed; every
other value may be a single run, and a single run can land above a confirmed median by
noise alone. The measured noise is the median spread ((max - min) / median) of the
confirmed configurations' runs. Configurations within that noise of the winner are ties;
among ties the recommendation is the one that leaves the most GPU memory outside
SGLang's static pool (1 - mem_fraction_static, which protects against runtime OOM), then
the one with the fewest non-default flags. Without confirmation runs no noise is known
and no tie is called (the output says so).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from optuna.trial import FrozenTrial


def _headroom_gib(t: FrozenTrial, gpu_gib: float) -> float | None:
    pred = t.user_attrs.get("prediction") or {}
    f = t.params.get("mem_fraction_static", pred.get("f"))
    return None if f is None else round(gpu_gib * (1.0 - float(f)), 2)


def explain(top: FrozenTrial, candidates: list[FrozenTrial], value_of: Callable[[FrozenTrial], float],
            confirmation: dict[str, Any], *, maximize: bool, gpu_gib: float,
            flags_of: Callable[[FrozenTrial], int]) -> dict[str, Any]:
    """The choice among ``top`` and ``candidates`` (ranked search trials, ``top`` excluded)."""
    conf = confirmation.get(str(top.number))
    spreads = [c["spread_pct"] for c in confirmation.values() if c.get("spread_pct") is not None]
    noise = round(statistics.median(spreads), 2) if spreads else None
    top_value = value_of(top)
    basis = (f"median of {len(conf['values'])} runs (spread {conf['spread_pct']:.2f} %)" if conf
             else "a single run")
    out: dict[str, Any] = {"basis": basis, "noise_pct": noise, "noise_from": len(spreads), "ties": [],
                           "tie_group": [], "recommended": top.number, "recommended_basis": basis, "reason": ""}
    single_above = [t.number for t in candidates if str(t.number) not in confirmation
                    and (value_of(t) > top_value if maximize else value_of(t) < top_value)]
    notes = []
    if single_above:
        notes.append(f"trial(s) {', '.join(map(str, single_above))} show a better single run, but the winner's "
                     f"value is the {basis}")
    if noise is None:
        notes.append("no confirmation runs: the noise is unknown, so no tie is called")
        out["reason"] = "; ".join(notes)
        return out
    ties = [t for t in candidates if top_value and abs(value_of(t) - top_value) / abs(top_value) * 100 <= noise]
    out["ties"] = [t.number for t in ties]
    if not ties:
        notes.append(f"no other configuration within the measured noise ({noise:.2f} %)")
        out["reason"] = "; ".join(notes)
        return out
    group = [top, *ties]

    def key(t: FrozenTrial) -> tuple[float, int]:
        room = _headroom_gib(t, gpu_gib)
        return (-(room if room is not None else -1.0), flags_of(t))

    pick = min(group, key=key)
    out["recommended"] = pick.number
    out["tie_group"] = [t.number for t in group]
    pconf = confirmation.get(str(pick.number))
    out["recommended_basis"] = (f"median of {len(pconf['values'])} runs (spread {pconf['spread_pct']:.2f} %)"
                                if pconf else "a single run")
    room = {t.number: _headroom_gib(t, gpu_gib) for t in group}
    flags = {t.number: flags_of(t) for t in group}
    if pick.number == top.number:
        why = "it also leaves the most memory headroom / needs the fewest flags among them"
    else:
        why = (f"trial {pick.number} is recommended instead: it leaves {room[pick.number]} GiB per GPU outside "
               f"the static pool (trial {top.number}: {room[top.number]}) with {flags[pick.number]} flags "
               f"(vs {flags[top.number]})")
    notes.append(f"trial(s) {', '.join(map(str, out['ties']))} are within the measured noise "
                 f"({noise:.2f} %, median spread of {len(spreads)} confirmed configurations) of trial "
                 f"{top.number}: ties; {why}")
    if any(t.user_attrs.get("baseline") for t in group):
        notes.append("SGLang's defaults (the baseline) are among the ties: the gain is within the noise")
    out["reason"] = "; ".join(notes)
    out["headroom_gib"] = room
    out["flags"] = flags
    return out
