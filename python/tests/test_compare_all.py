"""`python -m braidinfer.compare all` without torch or a GPU: the normalised rows of every
module's report (samples trimmed from what each module writes: bench/results/*compare*.json and
the modules' report-building code), the detection of a single module's JSON, the run loop's
saving and failure handling with a stand-in runner, and the prefill peer's matching of
`braidinfer bench prefill` rows."""

import glob
import json
import os
import sys

import pytest

from braidinfer import compare, compare_all, compare_prefill, compare_rows
from braidinfer.compare_rows import normalise

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "results")
ROW_KEYS = {"comparison", "case", "implementation", "median_ms", "peer_of", "tflops", "gbps",
            "error", "note"}


def _t(ms, samples=10):
    return {"median_ms": ms, "min_ms": ms * 0.9, "max_ms": ms * 1.2, "samples": samples}


def _us(us):
    return {"median_us": us, "min_us": us * 0.9, "max_us": us * 1.5, "samples": 1000}


# ---- samples in each module's layout ---------------------------------------------------------

ATTENTION = {  # compare_attention: run_config() per configuration, run_memory_table()
    "info": {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},
    "anchors": [
        {"batch": 16, "seq": 2048, "heads": 16, "head_dim": 64, "mask": "full",
         "flops": 274877906944,
         "results": {
             "braidinfer": {"peak_bytes": 67108864, "rel_error": 0.00225, "max_abs_error": 0.00137,
                            "nan": False, "ms": 0.5539, "tflops": 496.3, "braidinfer_speedup": 1.0},
             "naive": {"peak_bytes": 10737418240, "rel_error": 0.00446, "max_abs_error": 0.0081,
                       "nan": False, "ms": 11.34, "tflops": 24.2, "braidinfer_speedup": 20.5},
             "sdpa_flash": {"peak_bytes": 69207040, "rel_error": 0.00225,
                            "max_abs_error": 0.00137, "nan": False, "ms": 0.9164, "tflops": 299.9,
                            "braidinfer_speedup": 1.65},
             "sdpa_cudnn": {"peak_bytes": 67110400, "rel_error": 0.00225,
                            "max_abs_error": 0.00137, "nan": False, "ms": 0.6129, "tflops": 448.5,
                            "braidinfer_speedup": 1.11}},
         "input_bytes": 201326592, "reference": {"batches": [0], "heads": [0, 1, 2, 3],
                                                 "what": "fp32 on the bf16 inputs"}},
        {"batch": 1, "seq": 16384, "heads": 32, "head_dim": 128, "mask": "causal",
         "flops": 2199023255552,
         "results": {
             "braidinfer": {"peak_bytes": 134217728, "rel_error": 0.00211,
                            "max_abs_error": 0.00789, "nan": False, "ms": 3.68, "tflops": 597.3,
                            "braidinfer_speedup": 1.0},
             "naive": {"error": "out of memory",
                       "note": "OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 GiB"},
             "sdpa_flash": {"peak_bytes": 136315904, "rel_error": 0.0021, "max_abs_error": 0.0079,
                            "nan": False, "ms": 6.90, "tflops": 318.5,
                            "braidinfer_speedup": 1.875},
             "sdpa_cudnn": {"peak_bytes": 134219264, "rel_error": 0.0021, "max_abs_error": 0.0079,
                            "nan": False, "ms": 3.77, "tflops": 583.0,
                            "braidinfer_speedup": 1.024}},
         "input_bytes": 402653184, "reference": {"batches": [0], "heads": [0, 1, 2, 3],
                                                 "what": "fp32 on the bf16 inputs"}}],
    "sweep": [],
    "memory": [{"seq": 2048, "input_bytes": 50331648, "seed_standard_gb": 2.1,
                "seed_flash_gb": 0.6, "naive_peak_bytes": 1342177280, "naive_error": None,
                "braidinfer_peak_bytes": 16777216, "braidinfer_error": None, "reduction": 80.0,
                "reduction_with_inputs": 20.75}],
}

DECODE = {  # compare_decode: run_shape()'s rows
    "info": {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": 91900},
    "rows": [
        {"name": "torch_sdpa_cudnn", "batch": 1, "kv_len": 4096, "median_us": 19.008,
         "gbps": 883.5, "bytes": 16793600, "note": ""},
        {"name": "torch_sdpa_cudnn_graph", "batch": 1, "kv_len": 4096, "median_us": 12.5,
         "gbps": 1343.5, "bytes": 16793600, "note": "10 calls per graph, L2 warm between them"},
        {"name": "torch_sdpa_flash", "batch": 1, "kv_len": 4096, "median_us": None, "gbps": None,
         "bytes": 16793600, "note": "unavailable: RuntimeError: no kernel"},
        {"name": "braidinfer_attention_decode", "batch": 1, "kv_len": 4096, "median_us": 118.72,
         "gbps": 141.5, "bytes": 16793600, "note": "rel. error vs SDPA 2.47e-03"},
        {"name": "braidinfer_attention_decode_graph", "batch": 1, "kv_len": 4096,
         "median_us": 14.34, "gbps": 1170.9, "bytes": 16793600,
         "note": "10 calls per graph, L2 warm between them"}],
}

ROUTER = {  # compare_router: run_tokens() per token count
    "info": {"device": "NVIDIA H100 80GB HBM3"},
    "config": {"experts": 128, "k": 8, "dtype": "bf16", "renormalize": True, "logits": "randn",
               "tokens": [1], "targets": {"alone_us": 4.0, "speedup_vs_torch": 5.0}},
    "results": [
        {"tokens": 1, "experts": 128, "k": 8,
         "impls": {"braidinfer": {"alone": _us(80.75), "graph": _us(3.116), "error": None},
                   "torch": {"alone": _us(62.0), "graph": _us(15.26), "error": None},
                   "torch_float": {"alone": None, "graph": None,
                                   "error": "RuntimeError: capture failed"}},
         "check_vs_torch": {"rows": 1, "ids_equal_rows": 0, "ids_tie_rows": 1,
                            "ids_different_rows": 0, "max_abs_weight_error": 0.0, "nan": False},
         "speedup": {"torch_alone": 0.768, "torch_graph": 4.896, "torch_float_alone": None,
                     "torch_float_graph": None}}],
}

_MOE_CHECK = {"rows": 64, "routing_mismatches": 0, "nonfinite": 0, "max_abs": 0.0066,
              "mean_abs": 0.00071, "max_rel": 0.14, "rel_l2": 0.0039, "ok": True}

MOE = {  # compare_moe: run_config() per config
    "info": {"device": "NVIDIA H100 80GB HBM3"},
    "config": {"dtype": "bf16", "renormalize": True, "samples": 64,
               "targets": {"vs_torch_grouped_mm": 1.5, "percent_of_dense_cublas": 85.0,
                           "rel_l2_vs_fp32": 0.02}},
    "results": [
        {"model": "seed001", "label": "4x512", "tokens": 2048, "pairs": 4096, "hidden": 4096,
         "inter": 11008, "experts": 32, "k": 2,
         "impls": {
             "braidinfer": {"flops": 1108638433280, "eager": _t(3.662), "graph": _t(3.617),
                            "check": _MOE_CHECK, "error": None},
             "torch_grouped_mm": {"flops": 1108638433280, "eager": _t(5.248),
                                  "graph": _t(4.980), "check": _MOE_CHECK, "error": None},
             "torch_loop": {"flops": 1108638433280, "eager": _t(8.964), "graph": None,
                            "check": _MOE_CHECK, "error": None},
             "braidinfer_experts": {"flops": 1107564691456, "eager": _t(3.3), "graph": _t(3.2),
                                    "check": None, "error": None},
             "torch_grouped_mm_experts": {"flops": 1107564691456, "eager": None, "graph": None,
                                          "check": None,
                                          "error": "AttributeError: no _grouped_mm"},
             "dense_cublas": {"flops": 1107564691456, "eager": _t(1.6), "graph": _t(1.55),
                              "check": None, "error": None}},
         "ratios": {}, "verdicts": {}},
        {"model": "qwen3", "label": "T=512", "tokens": 512, "pairs": 4096, "hidden": 2048,
         "inter": 768, "experts": 128, "k": 8,
         "impls": {"braidinfer": {"flops": 4e10, "eager": _t(0.30), "graph": _t(0.25),
                                  "check": _MOE_CHECK, "error": None},
                   "torch_grouped_mm": {"flops": 4e10, "eager": _t(0.70), "graph": _t(0.69),
                                        "check": _MOE_CHECK, "error": None}},
         "ratios": {}, "verdicts": {}}],
}

MOE_FP8 = {  # compare_moe_fp8: run_seed003() / run_seed001() per config
    "info": {"device": "NVIDIA H100 80GB HBM3", "torch_scaled_grouped_mm": True},
    "config": {"rule": {"atol": 0.01, "rtol": 0.01, "required_ratio": 0.95},
               "seed001_fp8_rel_l2_sanity": 0.1, "samples": 64, "seed003": {}, "terms": [3, 1]},
    "results": [
        {"layer": "seed003", "label": "T=1", "tokens": 1, "pairs": 8, "impls": {
            "braidinfer_terms3": {"flops": 704643072, "eager": _t(0.519), "graph": _t(0.295),
                                  "check": {"elements": 7168, "matched_ratio": 0.989,
                                            "rel_l2": 0.00166, "max_abs": 8376.75,
                                            "nonfinite": 0, "ok": True, "judged": True},
                                  "error": None, "executed_flops": 1174405120},
            "braidinfer_terms1": {"flops": 704643072, "eager": _t(0.405), "graph": _t(0.191),
                                  "check": {"elements": 7168, "matched_ratio": 0.26,
                                            "rel_l2": 0.023, "max_abs": 72014.1, "nonfinite": 0,
                                            "ok": False, "judged": False},
                                  "error": None, "executed_flops": 704643072},
            "torch_reference": {"flops": 704643072, "eager": _t(6.975), "graph": None,
                                "check": None, "error": None}}},
        {"layer": "seed001", "label": "4x512", "tokens": 2048, "pairs": 4096, "impls": {
            "braidinfer_fp8": {"flops": 1108638433280, "eager": _t(2.757), "graph": _t(2.528),
                               "check": dict(_MOE_CHECK, max_abs=0.13, rel_l2=0.063),
                               "error": None},
            "torch_scaled_grouped_mm": {"flops": 1108638433280, "eager": _t(4.529),
                                        "graph": _t(4.105), "check": None, "error": None},
            "torch_grouped_mm_bf16": {"flops": 1108638433280, "eager": _t(5.894),
                                      "graph": _t(5.382), "check": _MOE_CHECK, "error": None}}}],
}

GEMM = {  # compare_gemm: run_case() per case
    "info": {"device": "NVIDIA H100 80GB HBM3"},
    "config": {"model": "llama-3-8b", "dtype": "bf16", "tokens": [1],
               "projections": [{"name": "qkv", "n": 6144, "k": 4096}]},
    "results": [
        {"projection": "qkv", "m": 1, "n": 6144, "k": 4096, "flops": 50331648,
         "bytes": 50352128, "speedup": 1.25,
         "impls": {"braidinfer": {"check": {"max_abs": 0.0039, "mean_abs": 0.0004,
                                            "max_rel": 0.0039, "rel_l2": 0.0021, "nonfinite": 0},
                                  "median_us": 20.0, "tflops": 2.5, "gbps": 2517.6},
                   "torch_matmul": {"check": {"max_abs": 0.0039, "mean_abs": 0.0004,
                                              "max_rel": 0.0039, "rel_l2": 0.0021,
                                              "nonfinite": 0},
                                    "median_us": 25.0, "tflops": 2.0, "gbps": 2014.1}}}],
}

PREFILL = {  # compare_prefill: run_model() per model, attach_braidinfer()
    "info": {"device": "NVIDIA H100 80GB HBM3", "transformers": "5.17.0"},
    "config": {"implementation": "transformers_sdpa", "dtype": "bf16"},
    "results": [
        {"model": "small", "batch": 1, "seq": 128, "seed_h100_ms": 0.8,
         "transformers": {"median_ms": 8.0, "min_ms": 7.9, "max_ms": 8.3, "samples": 10,
                          "tokens_per_s": 16000.0, "tflops": 3.3},
         "braidinfer": {"median_ms": 0.5, "min_ms": 0.49, "max_ms": 0.6, "tokens_per_s": 256000.0,
                        "flops": 2.64e10, "tflops": 52.8, "timing": "back_to_back x20",
                        "source": "prefill.json"},
         "speedup": 16.0},
        {"model": "large", "batch": 8, "seq": 2048, "seed_h100_ms": 185.0,
         "transformers": {"error": "OutOfMemoryError: CUDA out of memory"}, "braidinfer": None,
         "speedup": None}],
}

SAMPLES = {"attention": ATTENTION, "decode": DECODE, "router": ROUTER, "moe": MOE,
           "moe-fp8": MOE_FP8, "gemm": GEMM, "prefill": PREFILL}


def _find(rows, case, impl):
    found = [r for r in rows if r["case"] == case and r["implementation"] == impl]
    assert len(found) == 1, (case, impl, [(r["case"], r["implementation"]) for r in rows])
    return found[0]


def _check_peers_resolve(rows):
    """Every peer names a braidinfer row of its own case."""
    braid = {(r["comparison"], r["case"], r["implementation"]) for r in rows if r["peer_of"] is None}
    for r in rows:
        assert set(r) == ROW_KEYS
        if r["peer_of"] is not None:
            assert not r["implementation"].startswith("braidinfer")
            assert (r["comparison"], r["case"], r["peer_of"]) in braid, r


# ---- the normalisers -------------------------------------------------------------------------


def test_attention_rows():
    rows = normalise("attention", ATTENTION)
    assert len(rows) == 8
    _check_peers_resolve(rows)
    b = _find(rows, "B=16 S=2048 H=16 D=64 full", "braidinfer")
    assert b["median_ms"] == 0.5539 and b["tflops"] == 496.3 and b["peer_of"] is None
    assert b["error"] == {"max_abs": 0.00137, "mean_abs": None, "max_rel": None,
                          "rel_l2": 0.00225, "reference": "fp32"}
    f = _find(rows, "B=16 S=2048 H=16 D=64 full", "torch_sdpa_flash")
    assert f["peer_of"] == "braidinfer" and f["gbps"] is None
    oom = _find(rows, "B=1 S=16384 H=32 D=128 causal", "torch_naive")
    assert oom["median_ms"] is None and oom["error"] is None
    assert oom["note"].startswith("out of memory; OutOfMemoryError")
    assert {r["implementation"] for r in rows} == {"braidinfer", "torch_naive",
                                                    "torch_sdpa_flash", "torch_sdpa_cudnn"}


def test_decode_rows():
    rows = normalise("decode", DECODE)
    _check_peers_resolve(rows)
    assert [r["implementation"] for r in rows] == ["torch_sdpa_cudnn", "torch_sdpa_cudnn_graph",
                                                   "torch_sdpa_flash", "braidinfer",
                                                   "braidinfer_graph"]
    cudnn = rows[0]
    assert cudnn["case"] == "batch=1 kv_len=4096" and cudnn["peer_of"] == "braidinfer"
    assert cudnn["median_ms"] == pytest.approx(0.019008) and cudnn["gbps"] == 883.5
    assert cudnn["note"] is None  # "" in the module's row
    assert rows[1]["peer_of"] == "braidinfer_graph"  # graph timings against graph timings
    assert rows[2]["median_ms"] is None and rows[2]["note"].startswith("unavailable")
    assert rows[4]["peer_of"] is None and rows[4]["median_ms"] == pytest.approx(0.01434)


def test_router_rows_one_case_per_timing():
    rows = normalise("router", ROUTER)
    _check_peers_resolve(rows)
    assert {r["case"] for r in rows} == {"T=1 [alone]", "T=1 [graph]"}
    b = _find(rows, "T=1 [graph]", "braidinfer")
    assert b["median_ms"] == pytest.approx(0.003116)
    assert b["error"]["max_abs"] == 0.0 and b["error"]["reference"] == "torch"
    assert "1 ties" in b["note"]
    t = _find(rows, "T=1 [graph]", "torch")
    assert t["peer_of"] == "braidinfer" and t["error"] is None
    failed = _find(rows, "T=1 [alone]", "torch_float")
    assert failed["median_ms"] is None and "capture failed" in failed["note"]


def test_moe_rows_layers_and_experts():
    rows = normalise("moe", MOE)
    _check_peers_resolve(rows)
    case = "seed001 4x512 T=2048"
    b = _find(rows, case + " [graph]", "braidinfer")
    assert b["median_ms"] == 3.617
    assert b["tflops"] == pytest.approx(1108638433280 / 3.617e-3 / 1e12)
    assert b["error"] == {"max_abs": 0.0066, "mean_abs": 0.00071, "max_rel": 0.14,
                          "rel_l2": 0.0039, "reference": "fp32"}
    assert _find(rows, case + " [eager]", "torch_loop")["peer_of"] == "braidinfer"
    assert not [r for r in rows if r["case"] == case + " [graph]"
                and r["implementation"] == "torch_loop"]  # never captured: no graph row
    assert _find(rows, case + " [graph]", "dense_cublas")["peer_of"] == "braidinfer_experts"
    failed = _find(rows, case + " [eager]", "torch_grouped_mm_experts")
    assert failed["median_ms"] is None and "no _grouped_mm" in failed["note"]
    assert _find(rows, "qwen3 T=512 [eager]", "torch_grouped_mm")["median_ms"] == 0.70


def test_moe_fp8_rows():
    rows = normalise("moe-fp8", MOE_FP8)
    _check_peers_resolve(rows)
    ref = _find(rows, "seed003 T=1 [eager]", "torch_reference")
    assert ref["peer_of"] == "braidinfer_terms3"
    t3 = _find(rows, "seed003 T=1 [graph]", "braidinfer_terms3")
    assert t3["error"]["max_abs"] == 8376.75 and t3["error"]["mean_abs"] is None
    assert t3["tflops"] == pytest.approx(704643072 / 0.295e-3 / 1e12)
    scaled = _find(rows, "seed001 4x512 T=2048 [graph]", "torch_scaled_grouped_mm")
    assert scaled["peer_of"] == "braidinfer_fp8" and scaled["median_ms"] == 4.105


def test_gemm_rows():
    rows = normalise("gemm", GEMM)
    _check_peers_resolve(rows)
    b = _find(rows, "qkv M=1 N=6144 K=4096", "braidinfer")
    assert b["median_ms"] == pytest.approx(0.020) and b["gbps"] == 2517.6
    assert b["error"]["max_rel"] == 0.0039
    assert _find(rows, "qkv M=1 N=6144 K=4096", "torch_matmul")["peer_of"] == "braidinfer"


def test_prefill_rows():
    rows = normalise("prefill", PREFILL)
    assert [(r["case"], r["implementation"]) for r in rows] == [
        ("small batch 1 seq 128", "braidinfer"), ("small batch 1 seq 128", "transformers_sdpa"),
        ("large batch 8 seq 2048", "transformers_sdpa")]
    assert rows[0]["median_ms"] == 0.5 and rows[0]["peer_of"] is None
    assert rows[1]["peer_of"] == "braidinfer" and rows[1]["tflops"] == 3.3
    assert rows[2]["median_ms"] is None and "out of memory" in rows[2]["note"]


def test_failed_comparison_gives_no_rows():
    assert normalise("moe", {"error": "OutOfMemoryError: CUDA out of memory"}) == []
    assert compare_rows.is_failure({"error": "x"})
    assert not compare_rows.is_failure(MOE)


def test_detect_each_layout():
    for name, sample in SAMPLES.items():
        assert compare_rows.detect(sample) == name
    assert compare_rows.detect({"schema": compare_rows.SCHEMA_ALL}) == "all"
    assert compare_rows.detect({"schema": "braidinfer.bench.run/1", "rows": []}) is None
    assert compare_rows.detect([1, 2]) is None


def test_committed_compare_results_normalise():
    """The module JSONs in bench/results, as they were written on the H100."""
    files = sorted(glob.glob(os.path.join(RESULTS, "*compare*.json")) +
                   glob.glob(os.path.join(RESULTS, "*decode_peer*.json")))
    if not files:
        pytest.skip("no committed compare results")
    seen = set()
    for path in files:
        with open(path) as f:
            report = json.load(f)
        name = compare_rows.detect(report)
        assert name is not None, path
        rows = normalise(name, report)
        assert rows, path
        _check_peers_resolve(rows)
        assert any(r["median_ms"] for r in rows if r["peer_of"] is None), path
        seen.add(name)
    assert {"attention", "moe", "moe-fp8", "router", "decode"} <= seen


# ---- the run loop ----------------------------------------------------------------------------


def test_run_all_records_failures_and_saves_after_each(tmp_path, capsys):
    path = str(tmp_path / "all.json")
    saved = []

    def runner(name, quick, prefill_json):
        if saved:  # the previous comparison is on disk before the next starts
            with open(path) as f:
                saved.append(list(json.load(f)["comparisons"]))
        else:
            saved.append([])
        if name == "decode":
            raise RuntimeError("CUDA out of memory\nmore lines")
        assert quick and prefill_json == "p.json"
        return SAMPLES[name]

    doc = compare_all.run_all(["attention", "decode", "gemm"], path, quick=True,
                              prefill_json="p.json", runner=runner, env={"gpu": "test"})
    assert saved == [[], ["attention"], ["attention", "decode"]]
    with open(path) as f:
        on_disk = json.load(f)
    assert on_disk == doc
    assert doc["schema"] == "braidinfer.compare.all/1" and doc["environment"] == {"gpu": "test"}
    assert doc["comparisons"]["decode"] == {"error": "RuntimeError: CUDA out of memory"}
    assert doc["comparisons"]["gemm"] == GEMM
    assert [r["comparison"] for r in doc["rows"]] == ["attention"] * 8 + ["gemm"] * 2
    assert set(doc["seconds"]) == {"attention", "decode", "gemm"}
    err = capsys.readouterr().err
    assert "[compare all] decode (2/3) starting" in err and "decode: FAILED" in err


def test_select_and_registration_need_no_torch(capsys):
    assert compare_all.select() == compare_rows.COMPARISONS
    assert compare_all.select(only=["gemm", "attention"]) == ["attention", "gemm"]
    assert "prefill" not in compare_all.select(skip=["prefill"])
    with pytest.raises(ValueError, match="--only: unknown nope"):
        compare_all.select(only=["nope"])
    assert compare.SUBCOMMANDS["all"] == "compare_all"
    assert compare.SUBCOMMANDS["prefill"] == "compare_prefill"
    assert compare.SUBCOMMANDS["gemm"] == "compare_gemm"
    had_torch = "torch" in sys.modules
    for sub in ("all", "prefill", "gemm"):
        with pytest.raises(SystemExit) as e:
            compare.main([sub, "--help"])
        assert e.value.code == 0
    assert "--quick" in capsys.readouterr().out
    assert ("torch" in sys.modules) == had_torch


# ---- the prefill peer's pure parts -----------------------------------------------------------


def _bench_prefill():
    def row(params, us, flops):
        return {"name": "prefill_forward", "params": params, "timing": "back_to_back x20",
                "samples": 20, "median_us": us, "min_us": us, "max_us": us, "mean_us": us,
                "bytes": 1e9, "flops": flops, "bound": "compute", "gbps": 1.0,
                "tflops": flops / us / 1e6, "percent_of_ceiling": 50.0,
                "arithmetic_intensity": 10.0, "roofline": "compute", "note": "", "accuracy": None}

    return {"schema": "braidinfer.bench.run/1", "suite": "prefill", "git_commit": "abc",
            "date_utc": "2026-11-23T00:00:00Z", "device": None,
            "ceilings": {"copy_gbps": 3000.0, "gemm_tflops": 700.0, "fp8_gemm_tflops": None},
            "rows": [{"name": "copy_memcpy", "params": "1.00 GiB", "median_us": 700.0},
                     row("small batch 1 seq 128", 500.0, 2.6e10),
                     row("medium batch 4 seq 512", 9000.0, 1.1e13)]}


def test_prefill_cases_follow_seed001():
    cases = compare_prefill.select_cases()
    assert [(m, b, s) for m, b, s, _ in cases] == [
        ("small", 1, 128), ("small", 4, 512), ("small", 16, 2048),
        ("medium", 1, 128), ("medium", 4, 512), ("medium", 8, 1024),
        ("large", 1, 128), ("large", 4, 512), ("large", 8, 2048)]
    assert compare_prefill.MODELS["large"] == (32, 4096, 32, 11008)
    assert len(compare_prefill.select_cases(["medium"], quick=True)) == 2
    with pytest.raises(ValueError, match="unknown tiny"):
        compare_prefill.select_cases(["tiny"])
    assert compare_prefill.tokens_per_s(8, 2048, 185.0) == pytest.approx(88562.2, rel=1e-4)


def test_prefill_matches_braidinfer_rows():
    rows = compare_prefill.braidinfer_rows(_bench_prefill(), "prefill.json")
    assert set(rows) == {("small", 1, 128), ("medium", 4, 512)}
    assert rows[("small", 1, 128)]["median_ms"] == 0.5
    assert rows[("small", 1, 128)]["tokens_per_s"] == pytest.approx(256000.0)
    results = [{"model": "small", "batch": 1, "seq": 128, "seed_h100_ms": 0.8,
                "transformers": {"median_ms": 8.0, "tokens_per_s": 16000.0}},
               {"model": "large", "batch": 1, "seq": 128, "seed_h100_ms": 6.2,
                "transformers": {"median_ms": 20.0}}]
    compare_prefill.attach_braidinfer(results, rows)
    assert results[0]["speedup"] == 16.0
    assert results[0]["transformers"]["tflops"] == pytest.approx(2.6e10 / 8e-3 / 1e12)
    assert results[1]["braidinfer"] is None and results[1]["speedup"] is None
    assert "16.00x" in compare_prefill.format_results(results)


def test_prefill_rejects_other_files():
    with pytest.raises(ValueError, match="expected a braidinfer bench JSON"):
        compare_prefill.braidinfer_rows({"info": {}}, "x.json")
    bad = _bench_prefill()
    bad["rows"][1]["params"] = "small b1 s128"
    with pytest.raises(ValueError, match="expected '<model> batch B seq L'"):
        compare_prefill.braidinfer_rows(bad, "x.json")
