"""`python -m braidinfer.compare moe-fp8`: its pure-python helpers (configs, FLOPs, the match
rule, the report) without torch or a GPU, its registration in braidinfer.compare, and on a GPU
with torch a small run of both layers whose braidinfer rows must pass their checks."""

import math
import sys

import pytest

from braidinfer import compare, compare_moe_fp8 as cf


def test_registered_and_help_needs_no_torch(capsys):
    assert compare.SUBCOMMANDS["moe-fp8"] == "compare_moe_fp8"
    had_torch = "torch" in sys.modules
    with pytest.raises(SystemExit) as e:
        compare.main(["moe-fp8", "--help"])
    assert e.value.code == 0
    assert "--shape" in capsys.readouterr().out
    assert ("torch" in sys.modules) == had_torch


def test_preset_configs():
    configs = cf.select_configs()
    assert configs == [("seed003", 1, "T=1"), ("seed003", 16, "T=16"), ("seed003", 256, "T=256"),
                       ("seed003", 4096, "T=4096"), ("seed001", 2048, "4x512"),
                       ("seed001", 32768, "16x2048"), ("seed001", 65536, "32x2048")]
    assert cf.select_configs("seed003", [7]) == [("seed003", 7, "T=7")]
    with pytest.raises(ValueError, match="--shape"):
        cf.select_configs("mixtral")
    with pytest.raises(ValueError, match="--tokens"):
        cf.select_configs("seed003", [0])
    with pytest.raises(ValueError, match="seed001 needs counts > 16"):
        cf.select_configs("seed001", [16])


def test_flops_count_the_second_gemm_once_per_term():
    p, h, i = 32768, 7168, 2048
    executed, definition = cf.ds_flops(p, 3)
    assert definition == 2 * p * (2 * i * h + h * i)
    assert executed == 2 * p * 2 * i * h + 3 * 2 * p * i * h
    assert cf.ds_flops(p, 1) == (definition, definition)
    assert abs(definition / 1e12 - 2.886) < 1e-3


def test_match_rule_fails_only_when_both_tolerances_are_exceeded():
    assert cf.element_matches(1.005, 1.0)
    assert cf.element_matches(1000.5, 1000.0)  # 0.5 absolute, 5e-4 relative
    assert not cf.element_matches(1.05, 1.0)
    assert not cf.element_matches(0.02, 0.0)
    assert cf.element_matches(0.005, 0.0)
    assert not cf.element_matches(math.nan, 1.0)
    assert not cf.element_matches(math.inf, 1.0)
    assert not cf.element_matches(1.0, math.nan)


def _timing(ms):
    return {"median_ms": ms, "min_ms": ms, "max_ms": ms, "samples": 10}


def test_report_shows_every_impl_and_the_ratios():
    impls = {
        "braidinfer_terms3": {"flops": 1e12, "eager": _timing(3.2), "graph": _timing(3.0),
                              "check": {"matched_ratio": 0.999, "rel_l2": 1e-4, "ok": True,
                                        "judged": True}, "error": None},
        "braidinfer_terms1": {"flops": 1e12, "eager": _timing(2.2), "graph": _timing(2.0),
                              "check": {"matched_ratio": 0.25, "rel_l2": 2e-2, "ok": False,
                                        "judged": False}, "error": None},
        "torch_reference": {"flops": 1e12, "eager": _timing(60.0), "graph": None, "check": None,
                            "error": None},
    }
    text = cf.format_result({"layer": "seed003", "label": "T=4096", "tokens": 4096,
                             "pairs": 32768, "impls": impls})
    for frag in ("braidinfer_terms3", "torch_reference", "99.90%", "(not judged)",
                 "vs the torch reference: 20.0x", "vs the torch reference: 30.0x"):
        assert frag in text, text
    impls = {
        "braidinfer_fp8": {"flops": 1e12, "eager": _timing(21.0), "graph": _timing(20.0),
                           "check": {"rel_l2": 0.06, "ok": True}, "error": None},
        "torch_scaled_grouped_mm": {"flops": 1e12, "eager": None, "graph": None, "check": None,
                                    "error": "NotImplementedError: not available"},
        "torch_grouped_mm_bf16": {"flops": 1e12, "eager": _timing(34.0), "graph": _timing(34.0),
                                  "check": None, "error": None},
    }
    text = cf.format_result({"layer": "seed001", "label": "16x2048", "tokens": 32768,
                             "pairs": 65536, "impls": impls})
    assert "not available" in text
    assert "vs torch_grouped_mm_bf16: 1.70x" in text
    assert "target 22.0 ms: met" in text


TINY_DS = {"name": "tiny", "hidden": 256, "inter": 128, "global_experts": 16, "local_experts": 4,
           "local_offset": 0, "n_group": 4, "topk_group": 2, "k": 2, "routed_scaling_factor": 2.5}


@pytest.mark.usefixtures("library")
def test_small_runs_on_the_gpu_pass_their_checks(cuda):
    import torch

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the references are fp32, as main() runs them
    try:
        w = cf.make_ds_weights(3, TINY_DS)
        ds = cf.run_seed003(40, "T=40", w, 5.0, TINY_DS)
        tiny = {"name": "tiny", "hidden": 256, "inter": 128, "experts": 8, "k": 2}
        layer = cf.run_seed001(200, "T=200", 32, 5.0, tiny)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    assert ds["pairs"] == 80  # flashinfer's inputs: every choice local
    b3 = ds["impls"]["braidinfer_terms3"]
    assert b3["error"] is None and b3["check"]["ok"], b3
    assert b3["graph"]["median_ms"] > 0
    assert ds["impls"]["torch_reference"]["error"] is None
    assert ds["impls"]["braidinfer_terms1"]["check"]["rel_l2"] < 0.1
    fp8 = layer["impls"]["braidinfer_fp8"]
    assert fp8["error"] is None and fp8["check"]["ok"], fp8
    assert layer["impls"]["torch_grouped_mm_bf16"]["eager"] is not None
