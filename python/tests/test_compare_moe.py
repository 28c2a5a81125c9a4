"""`python -m braidinfer.compare moe`: its pure-python helpers (configs, FLOPs, token sample,
repetition plan, ratios and targets, the report) without torch or a GPU, its registration in
braidinfer.compare, and on a GPU with torch a whole small run whose outputs must pass the fp32
check."""

import sys

import pytest

from braidinfer import compare, compare_moe as cm


def test_registered_and_help_needs_no_torch(capsys):
    assert compare.SUBCOMMANDS["moe"] == "compare_moe"
    had_torch = "torch" in sys.modules
    with pytest.raises(SystemExit) as e:
        compare.main(["moe", "--help"])
    assert e.value.code == 0
    assert "--shape" in capsys.readouterr().out
    assert ("torch" in sys.modules) == had_torch


def test_preset_configs_are_seed001_and_qwen3():
    configs = cm.select_configs()
    assert [(m["name"], t, label) for m, t, label in configs] == [
        ("seed001", 2048, "4x512"), ("seed001", 32768, "16x2048"), ("seed001", 65536, "32x2048"),
        ("qwen3", 512, "T=512"), ("qwen3", 4096, "T=4096")]
    assert [t for _, t, _ in cm.select_configs("qwen3", [7, 300])] == [7, 300]
    assert cm.select_configs("seed001", [100])[0][2] == "T=100"
    with pytest.raises(ValueError, match="--shape"):
        cm.select_configs("mixtral")
    with pytest.raises(ValueError, match="--tokens"):
        cm.select_configs("all", [4, 0])


def test_flops_match_the_floors_page():
    # docs/perf/moe.md: 4x512 tokens, top-2 -> 4096 pairs, 1.11 TFLOP of expert work.
    assert cm.expert_flops(cm.SEED001, 4096) == 6 * 4096 * 4096 * 11008
    assert abs(cm.expert_flops(cm.SEED001, 4096) / 1e12 - 1.11) < 0.01
    assert cm.layer_flops(cm.SEED001, 2048) == 2 * 2048 * 32 * 4096 + cm.expert_flops(cm.SEED001, 4096)


def test_sample_tokens_keep_both_ends():
    assert cm.sample_tokens(3, 64, 1) == [0, 1, 2]
    s = cm.sample_tokens(65536, 64, 7)
    assert len(s) == 64 and len(set(s)) == 64 and s == sorted(s)
    assert s[0] == 0 and s[-1] == 65535
    assert cm.sample_tokens(65536, 64, 7) == s


def test_repetitions_fill_the_budget():
    assert cm.plan_reps(70.0, 1500) == (2, 21)
    assert cm.plan_reps(0.5, 1500) == (20, 200)
    assert cm.plan_reps(1000.0, 300)[1] == 5
    assert cm.graph_calls(70.0) == 1
    assert cm.graph_calls(0.5) == 20


def _timing(ms):
    return {"median_ms": ms, "min_ms": ms, "max_ms": ms, "samples": 10}


def _result(braid, grouped_mm, loop, experts, dense):
    impls = {
        "braidinfer": {"flops": 1e12, "eager": _timing(braid), "graph": _timing(braid * 0.9),
                       "check": {"rows": 64, "routing_mismatches": 1, "nonfinite": 0,
                                 "max_abs": 1e-2, "mean_abs": 1e-3, "max_rel": 2e-2,
                                 "rel_l2": 4e-3, "ok": True}, "error": None},
        "torch_grouped_mm": {"flops": 1e12, "eager": _timing(grouped_mm), "graph": None,
                             "check": None, "error": "RuntimeError: capture failed"},
        "torch_loop": {"flops": 1e12, "eager": _timing(loop), "graph": None, "check": None,
                       "error": None},
        "braidinfer_experts": {"flops": 9e11, "eager": _timing(experts), "graph": _timing(experts),
                               "check": None, "error": None},
        "torch_grouped_mm_experts": {"flops": 9e11, "eager": None, "graph": None, "check": None,
                                     "error": "AttributeError: no _grouped_mm"},
        "dense_cublas": {"flops": 9e11, "eager": _timing(dense), "graph": _timing(dense),
                         "check": None, "error": None},
    }
    return {"model": "seed001", "label": "4x512", "tokens": 2048, "pairs": 4096, "hidden": 4096,
            "inter": 11008, "experts": 32, "k": 2, "impls": impls}


def test_ratios_and_targets():
    res = _result(braid=2.0, grouped_mm=5.0, loop=7.0, experts=1.8, dense=1.6)
    r = cm.ratios(res)
    assert r["vs_torch_grouped_mm_eager"] == pytest.approx(2.5)
    assert r["vs_torch_grouped_mm_graph"] is None  # torch's graph failed
    assert r["vs_torch_loop_eager"] == pytest.approx(3.5)
    assert r["braidinfer_experts_percent_of_dense_graph"] == pytest.approx(100 * 1.6 / 1.8)
    assert r["torch_grouped_mm_experts_percent_of_dense_graph"] is None
    v = cm.verdicts(r)
    assert v["vs_torch_grouped_mm"] == pytest.approx(2.5) and v["vs_torch_grouped_mm_met"]
    assert v["percent_of_dense"] == pytest.approx(88.9, abs=0.1) and v["percent_of_dense_met"]
    slow = cm.verdicts(cm.ratios(_result(4.0, 5.0, 7.0, 2.5, 1.6)))
    assert not slow["vs_torch_grouped_mm_met"] and not slow["percent_of_dense_met"]


def test_report_shows_every_impl_and_the_targets():
    res = _result(2.0, 5.0, 7.0, 1.8, 1.6)
    res["ratios"] = cm.ratios(res)
    res["verdicts"] = cm.verdicts(res["ratios"])
    text = cm.format_result(res)
    for name in cm.LAYER_IMPLS + cm.EXPERT_IMPLS:
        assert name in text
    assert "capture failed" in text
    assert "2.50x met" in text
    assert "ANCHORS.md" in text and "5.2 ms" in text


@pytest.mark.usefixtures("library")
def test_small_run_on_the_gpu_passes_the_fp32_check(cuda):
    import torch

    tiny = {"name": "tiny", "hidden": 256, "inter": 128, "experts": 8, "k": 2}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is fp32, as main() runs it
    try:
        result = cm.run_config(tiny, 200, "T=200", samples=32, budget_ms=5.0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    braid = result["impls"]["braidinfer"]
    assert braid["error"] is None, braid["error"]
    assert braid["check"]["ok"], braid["check"]
    assert braid["check"]["routing_mismatches"] <= 2
    assert braid["eager"]["median_ms"] > 0 and braid["graph"]["median_ms"] > 0
    loop = result["impls"]["torch_loop"]
    assert loop["error"] is None and loop["check"]["ok"], loop
    if hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability() >= (9, 0):
        gmm = result["impls"]["torch_grouped_mm"]
        assert gmm["check"] is not None and gmm["check"]["ok"], gmm
    assert result["impls"]["dense_cublas"]["eager"]["median_ms"] > 0
