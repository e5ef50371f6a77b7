from autotune.study.infeasible import Failure, implied_by, inert_knobs

GRAPH = Failure(number=3, kind="graph_capture_oom",
                params={"mem_fraction_static": 0.9, "cuda_graph_max_bs": 256, "custom_allreduce": True})
RUNTIME = Failure(number=5, kind="runtime_oom",
                  params={"mem_fraction_static": 0.95, "cuda_graph_max_bs": 64, "custom_allreduce": False})
KV = Failure(
    number=7, kind="kv_oom", params={"mem_fraction_static": 0.6, "cuda_graph_max_bs": 64, "custom_allreduce": True}
)


def test_less_slack_with_the_other_knobs_equal_is_implied():
    hit = implied_by({"mem_fraction_static": 0.92, "cuda_graph_max_bs": 512, "custom_allreduce": True}, [GRAPH])
    assert hit is not None and hit[0] is GRAPH and "trial 3 failed CUDA graph capture" in hit[1]
    # More slack (smaller f, or fewer graphs) is not implied.
    assert (
        implied_by({"mem_fraction_static": 0.88, "cuda_graph_max_bs": 512, "custom_allreduce": True}, [GRAPH]) is None
    )
    assert (
        implied_by({"mem_fraction_static": 0.92, "cuda_graph_max_bs": 128, "custom_allreduce": True}, [GRAPH]) is None
    )
    # Another knob differs: nothing is proved.
    assert (
        implied_by({"mem_fraction_static": 0.92, "cuda_graph_max_bs": 512, "custom_allreduce": False}, [GRAPH]) is None
    )


def test_runtime_oom_and_kv_oom_regions():
    assert implied_by({"mem_fraction_static": 0.95, "cuda_graph_max_bs": 128, "custom_allreduce": False}, [RUNTIME])
    assert implied_by({"mem_fraction_static": 0.55, "cuda_graph_max_bs": 64, "custom_allreduce": True}, [KV])
    assert implied_by({"mem_fraction_static": 0.65, "cuda_graph_max_bs": 64, "custom_allreduce": True}, [KV]) is None


def test_knobs_sglang_ignores_on_the_hardware_do_not_separate_candidates():
    cand = {"mem_fraction_static": 0.95, "cuda_graph_max_bs": 64, "custom_allreduce": True}
    assert implied_by(cand, [RUNTIME]) is None
    assert implied_by(cand, [RUNTIME], inert_knobs(8, "pcie")) is not None  # disabled on 8 PCIe GPUs
    assert inert_knobs(2, "pcie") == frozenset() and inert_knobs(8, "nvlink") == frozenset()
