"""First-fit packing of trial needs onto Ray nodes (no Ray needed)."""

from __future__ import annotations

from autotune.study.execution.ray.capacity import describe, fits_anywhere, how_many_more, place, trial_need

EIGHT = [{"GPU": 8.0, "CPU": 2.0}]


def test_trial_need_adds_extra_resources_and_drops_zero() -> None:
    assert trial_need(2, {"gpu_arch_blackwell": 0.01, "unused": 0}) == {"GPU": 2.0, "gpu_arch_blackwell": 0.01}


def test_four_tp2_fit_on_eight_gpus_then_none() -> None:
    need = trial_need(2)
    assert how_many_more(EIGHT, [], need) == 4
    assert how_many_more(EIGHT, [need] * 3, need) == 1
    assert how_many_more(EIGHT, [need] * 4, need) == 0


def test_mixed_tp_share_a_node_without_oversubscription() -> None:
    held = [trial_need(4), trial_need(2)]
    assert how_many_more(EIGHT, held, trial_need(2)) == 1
    assert how_many_more(EIGHT, held, trial_need(4)) == 0
    assert how_many_more(EIGHT, held, trial_need(1)) == 2


def test_a_trial_needs_its_gpus_on_one_node() -> None:
    two_nodes = [{"GPU": 4.0}, {"GPU": 4.0}]
    assert not fits_anywhere(two_nodes, trial_need(8))
    assert fits_anywhere(two_nodes, trial_need(4))
    assert how_many_more(two_nodes, [trial_need(2)], trial_need(4)) == 1
    assert "largest 4" in describe(two_nodes)


def test_custom_resources_limit_placement() -> None:
    nodes = [{"GPU": 8.0}, {"GPU": 8.0, "gpu_arch_blackwell": 8.0}]
    need = trial_need(2, {"gpu_arch_blackwell": 1})
    assert how_many_more(nodes, [], need) == 4
    assert not fits_anywhere([{"GPU": 8.0}], need)


def test_held_that_no_longer_fits_leaves_no_room() -> None:
    assert place([{"GPU": 2.0}], [trial_need(4)]) is None
    assert how_many_more([{"GPU": 2.0}], [trial_need(4)], trial_need(1)) == 0
