"""The ORM-free trial reader returns exactly what optuna's RDBStorage._get_trials returns."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from autotune.study.storage.read import read_trials


def test_same_trials_as_optunas_reader(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = RDBStorage(url)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    for i in range(12):
        t = study.ask()
        t.suggest_float("f", 0.5, 0.95, step=0.01)
        t.suggest_categorical("algo", ["none", "EAGLE3"])
        t.suggest_int("bs", 64, 512, log=True)
        t.set_user_attr("metrics", {"p99": i * 1.5, "nested": [1, None, "x"]})
        t.storage.set_trial_system_attr(t._trial_id, "constraints:0", float(i % 2))
        t.report(float(i), 1)
        t.report(math.nan if i == 3 else -math.inf, 2)
        if i % 4 == 0:
            study.tell(t, math.inf if i == 8 else float(i))
        elif i % 4 == 1:
            study.tell(t, state=TrialState.PRUNED)
        elif i % 4 == 2:
            study.tell(t, state=TrialState.FAIL)
        # i % 4 == 3: left RUNNING
    study.enqueue_trial({"f": 0.6, "algo": "none", "bs": 128})  # WAITING
    sid = study._study_id
    ids = [t._trial_id for t in study.get_trials(deepcopy=False)]
    for states, included, greater in [(None, set(), -1), ((TrialState.COMPLETE,), set(), -1),
                                      (None, {ids[3], ids[7]}, ids[5]), (None, set(), ids[9])]:
        ours = read_trials(storage.engine, sid, states, included, greater)
        theirs = storage._get_trials(sid, states, included, greater)
        assert [t._trial_id for t in ours] == [t._trial_id for t in theirs] and ours
        for a, b in zip(ours, theirs, strict=True):
            assert repr(a) == repr(b)  # every field; NaN intermediate values compare by repr
            assert (a.user_attrs, a.system_attrs, a.params, a.distributions, a.state) == \
                (b.user_attrs, b.system_attrs, b.params, b.distributions, b.state)
            assert repr(a.intermediate_values) == repr(b.intermediate_values)  # nan == nan by repr
            assert a.values == b.values
