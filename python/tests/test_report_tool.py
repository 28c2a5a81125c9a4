"""tools/report.py: a report rendered from small synthetic inputs (a bench run, a compare-all
document, a profile) must link only PNGs it wrote and name the device; sections without data say
so; the derived roofline figures and seed 001's grades follow their rules. CPU only; the
rendering tests skip without matplotlib."""

import json
import os
import re
import sys

import pytest

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)

import report_data as data  # noqa: E402

DEVICE = {"index": 0, "name": "NVIDIA Test GPU 99GB", "compute_capability": "9.0",
          "sm_count": 132, "memory_bytes": 85017493504, "l2_bytes": 52428800,
          "sm_clock_mhz": 1980, "memory_clock_mhz": 2619, "memory_bus_bits": 5120,
          "reported_peak_gbps": 3352.32, "driver_version": "13.0", "driver_version_code": 13000,
          "kernel_driver": "580.00.01", "runtime_version": "13.0", "runtime_version_code": 13000,
          "cublas_version": "13.1.0", "cublas_version_code": 130100}
CEILINGS = {"copy_gbps": 3000.0, "gemm_tflops": 700.0, "fp8_gemm_tflops": 1300.0}


def bench_row(name, params, us, bytes_, flops, bound, accuracy=None):
    """A row as report.cpp's to_json writes it (rates derived from the median)."""
    gbps = bytes_ / us / 1e3 if bytes_ else None
    tflops = flops / us / 1e6 if flops else None
    ceiling = {"memory": (gbps, "copy_gbps"), "compute": (tflops, "gemm_tflops"),
               "compute_fp8": (tflops, "fp8_gemm_tflops")}.get(bound)
    pct = 100 * ceiling[0] / CEILINGS[ceiling[1]] if ceiling and ceiling[0] else None
    return {"name": name, "params": params, "timing": "graph x100", "samples": 20,
            "median_us": us, "min_us": us * 0.98, "max_us": us * 1.1, "mean_us": us,
            "bytes": bytes_, "flops": flops, "bound": bound, "gbps": gbps, "tflops": tflops,
            "percent_of_ceiling": pct,
            "arithmetic_intensity": flops / bytes_ if flops and bytes_ else None,
            "roofline": data.roofline_class(flops, bytes_, CEILINGS, bound == "compute_fp8"),
            "note": "a | note", "accuracy": accuracy}


def accuracy(max_abs, mean_abs, max_rel, passed=True):
    return {"reference": "cpu fp64", "elements": 4096, "max_abs": max_abs, "mean_abs": mean_abs,
            "max_rel": max_rel, "rel_l2": 1e-3, "rounding_max_abs": 3.9e-3,
            "rel_l2_tolerance": 1e-2, "passed": passed}


def bench_run():
    return {"schema": "braidinfer.bench.run/1", "suite": "synthetic", "git_commit": "abc123",
            "date_utc": "2026-11-23T10:00:00Z", "device": DEVICE, "ceilings": CEILINGS,
            "extra_section": {"ignored": True},
            "rows": [bench_row("copy_memcpy", "1 GiB", 700.0, 2.1e9, 0, "memory"),
                     bench_row("rms_norm", "4096x4096", 25.0, 6.7e7, 5e7, "memory",
                               accuracy(5e-5, 5e-6, 5e-4)),
                     bench_row("gemm_bf16", "m=n=k=8192", 1600.0, 4e8, 1.1e12, "compute",
                               accuracy(2e-3, 3e-5, 2e-2, passed=True)),
                     bench_row("gemm_fp8", "m=n=k=8192", 850.0, 2.7e8, 1.1e12, "compute_fp8"),
                     bench_row("empty_kernel", "<<<1, 1>>>", 4.2, 0, 0, "none")]}


def compare_all_doc():
    def row(case, impl, ms, peer_of, error=None, note=None):
        return {"comparison": "attention", "case": case, "implementation": impl,
                "median_ms": ms, "peer_of": peer_of, "tflops": None, "gbps": None,
                "error": error, "note": note}

    err = {"max_abs": 1.4e-3, "mean_abs": None, "max_rel": None, "rel_l2": 2.2e-3,
           "reference": "fp32"}
    return {"schema": "braidinfer.compare.all/1",
            "environment": {"gpu": "NVIDIA Test GPU 99GB", "driver": "580.00.01",
                            "cuda_driver": "13.0", "cuda": "13.0", "torch": "2.11.0",
                            "transformers": "5.17.0", "git_commit": "abc123",
                            "date": "2026-11-23T10:05:00+00:00"},
            "comparisons": {"attention": {"info": {}}, "moe": {"error": "OutOfMemoryError: x"}},
            "rows": [row("B=16 S=2048", "braidinfer", 0.55, None, err),
                     row("B=16 S=2048", "torch_sdpa_flash", 0.92, "braidinfer", err),
                     row("B=16 S=2048", "torch_naive", 11.3, "braidinfer"),
                     row("B=1 S=16384", "braidinfer", 3.7, None, err),
                     row("B=1 S=16384", "torch_naive", None, "braidinfer",
                         note="out of memory")]}


def profile_doc():
    return {"schema": "braidinfer.profile/1", "device": "NVIDIA Test GPU 99GB",
            "model": "small", "kernels": [
                {"name": "gemm_kernel", "phase": "prefill", "calls": 96, "total_us": 600.0,
                 "avg_us": 6.25, "share": 0.6},
                {"name": "attention_kernel", "phase": "prefill", "calls": 12, "total_us": 300.0,
                 "avg_us": 25.0, "share": 0.3},
                {"name": "rms_norm_kernel", "phase": "prefill", "calls": 25, "total_us": 100.0,
                 "avg_us": 4.0}],
            "ncu": [{"kernel": "gemm_kernel", "sm_throughput_pct": 85.0,
                     "dram_throughput_pct": 20.0, "achieved_occupancy_pct": 12.0,
                     "l2_hit_rate_pct": 70.0, "duration_us": 6.1, "roofline": "compute"},
                    {"kernel": "attention_kernel", "sm_throughput_pct": 60.0,
                     "dram_throughput_pct": 40.0, "achieved_occupancy_pct": 25.0,
                     "l2_hit_rate_pct": 55.0, "duration_us": 24.8}]}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def linked_pngs(markdown):
    return re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", markdown)


# ---- rendering (matplotlib) ------------------------------------------------------------------


def test_full_report_links_existing_pngs_and_names_the_device(tmp_path):
    pytest.importorskip("matplotlib")
    import report

    inputs = [write(tmp_path, "bench.json", bench_run()),
              write(tmp_path, "all.json", compare_all_doc()),
              write(tmp_path, "profile.json", profile_doc()),
              write(tmp_path, "other.json", {"suite": "decode", "runs": []})]
    out = tmp_path / "out"
    assert report.main(inputs + ["-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    pngs = linked_pngs(md)
    names = {os.path.basename(p) for p in pngs}
    assert any(n.startswith("speedup_attention") for n in names)
    assert any(n.startswith("roofline_normalised") for n in names)
    assert any(n.startswith("roofline_physical") for n in names)
    assert {"hist_duration.png", "hist_percent_of_ceiling.png"} <= names
    assert any(n.startswith("hist_ncu") for n in names)
    assert any(n.startswith("profile_share") for n in names)
    for p in pngs:
        f = out / p
        assert f.is_file() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p
    assert sorted(os.listdir(out / "figures")) == sorted(names)  # nothing unlinked
    assert len(re.findall(r"^\*Figure \d+\. .+ Sources?: ", md, re.M)) == len(pngs)

    header = md.split("## Inputs")[0]
    assert "NVIDIA Test GPU 99GB" in header
    assert "| NVIDIA driver | 580.00.01 |" in header
    assert "| cuBLASLt | 13.1.0 |" in header
    assert "| transformers | 5.17.0 |" in header
    assert "other.json | skipped" in md
    assert "moe (all.json): the comparison failed: `OutOfMemoryError: x`" in md
    assert "a \\| note" in md  # pipes escaped inside table cells
    # the speed-up table: naive 11.3 / 0.55, the OOM row without a ratio
    assert "| B=16 S=2048 | torch_naive | 11300.0 | braidinfer | 550.00 | 20.55x |" in md
    assert "| B=1 S=16384 | torch_naive | - | braidinfer | 3700.0 | - | out of memory |" in md
    # graded: rms_norm excellent on every metric, gemm not met on max abs and max rel
    assert "5.00e-05 (excellent) | 5.00e-06 (excellent) | 5.00e-04 (excellent)" in md
    assert "2.00e-03 (not met) | 3.00e-05 (acceptable) | 2.00e-02 (not met)" in md
    assert "| gemm_kernel | prefill | 96 | 600.00 | 6.250 | 60.0% |" in md
    assert "| rms_norm_kernel | prefill | 25 | 100.00 | 4.000 | 10.0% |" in md  # share derived


def test_sections_without_data_say_so(tmp_path):
    pytest.importorskip("matplotlib")
    import report

    run = bench_run()
    for r in run["rows"]:
        r["accuracy"] = None
    out = tmp_path / "out"
    assert report.main([write(tmp_path, "bench.json", run), "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "Comparisons with peers: not in these results" in md
    assert "Error figures: not in these results" in md
    assert "Profile (top kernels by time): not in these results" in md
    assert "Nsight Compute metrics (SM / DRAM throughput, occupancy, L1 / L2 hit rates): " \
           "not in these results" in md
    assert "| transformers | not in these results |" in md
    assert not [n for n in os.listdir(out / "figures") if n.startswith(("speedup", "profile"))]


def test_bad_inputs_fail_with_the_file_named(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import report

    assert report.main([write(tmp_path, "broken.json", "{not json"), "-o",
                        str(tmp_path / "o")]) == 2
    assert "broken.json: not JSON" in capsys.readouterr().err
    assert report.main([str(tmp_path / "missing.json"), "-o", str(tmp_path / "o")]) == 2
    assert "missing.json: cannot read" in capsys.readouterr().err


# ---- the data rules (no matplotlib) ----------------------------------------------------------


def test_roofline_class_follows_report_cpp():
    c = {"copy_gbps": 3000.0, "gemm_tflops": 600.0, "fp8_gemm_tflops": 1200.0}
    assert data.ridge(c) == 200.0 and data.ridge(c, fp8=True) == 400.0
    assert data.roofline_class(99, 1, c) == "memory"
    assert data.roofline_class(100, 1, c) == "balanced"
    assert data.roofline_class(400, 1, c) == "balanced"
    assert data.roofline_class(401, 1, c) == "compute"
    assert data.roofline_class(401, 1, c, fp8=True) == "balanced"  # the fp8 ridge is higher
    assert data.roofline_class(0, 1, c) == "memory"
    assert data.roofline_class(5, 0, c) == "compute"
    assert data.roofline_class(0, 0, c) is None
    assert data.roofline_class(5, 1, {"copy_gbps": 3000.0}) is None  # no ridge: not guessed
    assert data.attainable_tflops(10, c) == 30.0 and data.attainable_tflops(1e4, c) == 600.0


def test_older_rows_get_derived_figures_marked():
    row = {"name": "gemm", "params": "p", "timing": "t", "median_us": 1000.0, "bytes": 4e8,
           "flops": 7e11, "bound": "compute", "note": ""}
    r = data.bench_row(row, CEILINGS)
    assert r["tflops"] == pytest.approx(700.0) and r["gbps"] == pytest.approx(400.0)
    assert r["percent_of_ceiling"] == pytest.approx(100.0)
    assert r["roofline"] == "compute"
    assert set(r["derived"]) == {"gbps", "tflops", "arithmetic_intensity", "percent_of_ceiling",
                                 "roofline"}
    legacy = data._legacy_accuracy([{"params": "p", "max_abs_error": 1e-4,
                                     "mean_abs_error": 1e-6, "max_rel_error": 0.05,
                                     "rel_l2_error": 2e-3, "bf16_rounding_max_abs": 1e-4,
                                     "ok": True}])
    r = data.bench_row(dict(row, gbps=1.0, tflops=2.0, percent_of_ceiling=3.0, roofline="memory",
                            arithmetic_intensity=4.0), CEILINGS, legacy)
    assert (r["gbps"], r["tflops"], r["percent_of_ceiling"], r["roofline"]) == \
        (1.0, 2.0, 3.0, "memory")  # the file's own figures are kept
    assert r["derived"] == ["accuracy"] and r["accuracy"]["max_rel"] == 0.05


def test_seed001_grades():
    assert data.grade("max_abs", 9e-5) == "excellent"
    assert data.grade("max_abs", 1e-4) == "acceptable"  # strictly below the bound
    assert data.grade("max_abs", 1e-3) == "not met"
    assert data.grade("mean_abs", 5e-6) == "excellent"
    assert data.grade("max_rel", 5e-3) == "acceptable"
    assert data.grade("max_rel", None) is None


def test_profile_reader_is_defensive(tmp_path):
    doc = {"schema": "braidinfer.profile/1",
           "kernels": [{"name": "a", "total_us": 30.0, "share": 75.0},
                       {"name": "b", "total_us": 10.0, "share": 25.0}, "junk"]}
    p = data.read_input(write(tmp_path, "p.json", doc))
    assert p["share_was_percent"] and [k["share"] for k in p["kernels"]] == [0.75, 0.25]
    assert p["ncu"] == [] and p["gpu"] is None


def profile_command_doc():
    """The layout src/bench/profile/output.cpp's profile_to_json writes."""
    def kernel(name, calls, total, share, ncu=None):
        k = {"name": f"void braid::{name}<128>(Params)", "symbol": f"_Z{name}",
             "short_name": name, "kind": "kernel", "calls": calls, "total_us": total,
             "avg_us": total / calls, "share": share}
        if ncu:
            k["ncu"] = ncu
        return k

    ncu = {"kernel": "gemm_kernel", "launches": 1, "sm_throughput_pct": 88.0,
           "dram_throughput_pct": 30.0, "memory_throughput_pct": 45.0,
           "achieved_occupancy_pct": 12.5, "l1_hit_rate_pct": None, "l2_hit_rate_pct": "inf",
           "duration_us": 410.0, "roofline": "compute"}
    return {"suite": "profile", "git_commit": "def456", "date_utc": "2026-11-23T11:00:00Z",
            "setup": {"model": "llama-3.2-1b", "random_weights": True, "layers": 16,
                      "prompt_tokens": 512, "decode_steps": 8, "graph": False},
            "device": {"index": 0, "name": "NVIDIA Test GPU 99GB", "compute_capability": "9.0",
                       "sm_count": 132, "memory_bytes": 85017493504, "driver": "13.0",
                       "runtime": "13.0"},
            "records": {"activities": 900, "unattributed": 0, "dropped": 0},
            "phases": [{"phase": "prefill", "steps": 1, "kernels": 200, "gpu_us": 1000.0,
                        "kernels_table": [kernel("gemm_kernel", 100, 700.0, 0.7, ncu),
                                          kernel("attention_kernel", 16, 300.0, 0.3)]},
                       {"phase": "decode", "steps": 8, "kernels": 700, "gpu_us": 800.0,
                        "kernels_table": [kernel("gemv_kernel", 600, 640.0, 0.8)]}],
            "ncu": {"phase": "prefill", "command": "ncu ...", "missing_metrics": []}}


def test_profile_command_layout_is_read(tmp_path):
    p = data.read_input(write(tmp_path, "prof.json", profile_command_doc()))
    assert p["kind"] == "profile" and p["model"] == "llama-3.2-1b"
    assert list(p["phases"]) == ["prefill", "decode"]
    assert [k["name"] for k in p["phases"]["prefill"]] == ["gemm_kernel", "attention_kernel"]
    assert p["phases"]["decode"][0]["share"] == 0.8
    assert len(p["ncu"]) == 1 and p["ncu"][0]["mem_throughput_pct"] == 45.0
    assert data.number(p["ncu"][0]["l2_hit_rate_pct"]) is None  # "inf" is not a figure


def test_profile_command_layout_renders(tmp_path):
    pytest.importorskip("matplotlib")
    import report

    out = tmp_path / "out"
    assert report.main([write(tmp_path, "prof.json", profile_command_doc()), "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "| gemm_kernel | prefill | 100 | 700.00 | 7.000 | 70.0% |" in md
    assert "| gemv_kernel | decode | 600 | 640.00 | 1.067 | 80.0% |" in md
    assert "| CUDA driver API | 13.0 |" in md and "NVIDIA Test GPU 99GB" in md
    names = {os.path.basename(p) for p in linked_pngs(md)}
    assert {"profile_share_prefill_prof_json.png", "profile_share_decode_prof_json.png"} <= names
    assert any(n.startswith("hist_ncu") for n in names)
    for p in linked_pngs(md):
        assert (out / p).is_file()


def test_profile_is_set_beside_the_decode_breakdown_of_the_same_model(tmp_path):
    pytest.importorskip("matplotlib")
    import report

    prof = profile_command_doc()
    prof["phases"][1].update({
        "kernels_per_step": 116.0, "busy_us_per_step": 1250.0, "wall_us_per_step": 1400.0,
        "components": [{"component": "qkv_proj", "us_per_step": 120.0, "span_us_per_step": 120.0,
                        "elapsed_us_per_step": 150.0, "kernels_per_step": 16.0, "share": 0.1},
                       {"component": "attention", "us_per_step": 260.0,
                        "span_us_per_step": 165.0, "elapsed_us_per_step": 196.0,
                        "kernels_per_step": 32.0, "share": 0.2}]})
    decode = {"schema": "braidinfer.bench.run/1", "suite": "decode", "git_commit": "abc123",
              "date_utc": "2026-11-23T10:00:00Z", "device": DEVICE, "ceilings": CEILINGS,
              "rows": [bench_row("decode_step", "llama-3.2-1b batch 1 context 1024", 1260.0,
                                 2.5e9, 0, "memory"),
                       bench_row("decode_component", "qkv_proj", 175.0, 2e8, 0, "memory"),
                       bench_row("decode_component", "attention", 200.0, 3e7, 0, "memory")]}
    other = dict(decode, rows=[bench_row("decode_step", "qwen3-0.6b batch 1 context 1024", 900.0,
                                         1.2e9, 0, "memory")])
    out = tmp_path / "out"
    assert report.main([write(tmp_path, "prof.json", prof), write(tmp_path, "dec.json", decode),
                        write(tmp_path, "other.json", other), "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "### prof.json and dec.json" in md
    assert "other.json" not in md.split("## Profile against the decode breakdown")[1]
    assert "| attention | 260.00 | 165.00 | 196.00 | 200.00 | 0.98 |" in md
    assert "| qkv_proj | 120.00 | 120.00 | 150.00 | 175.00 | 0.86 |" in md


# ---- serving benchmarks (braidinfer bench serve) -----------------------------------------------


def serve_doc():
    """A run as src/bench/suites/serve/serve_report.cpp's serve_json writes it."""
    def dist(m, count=4):
        return {"count": count, "mean": m, "median": m, "std": 0.5, "min": m - 1, "max": m + 1,
                "p90": m + 0.5, "p99": m + 0.9}

    return {"schema": "braidinfer.bench.serve/1", "suite": "serve", "git_commit": "abc123",
            "date_utc": "2026-11-23T10:00:00Z", "device": None,
            "parameters": {"base_url": "http://127.0.0.1:8000", "endpoint": "/v1/completions",
                           "model": "tiny", "dataset": "random", "num_prompts": 5,
                           "input_len": 128, "output_len": 16, "request_rate": None,
                           "max_concurrency": 2, "seed": 0},
            "results": {"completed": 4, "failed": 1, "duration_s": 2.0,
                        "request_throughput": 2.0, "output_throughput": 32.0,
                        "total_token_throughput": 288.0, "peak_in_flight": 2},
            "metrics": {"ttft_ms": dist(50.0), "tpot_ms": dist(10.0), "itl_ms": dist(10.0, 60),
                        "e2e_ms": dist(200.0)},
            "errors": [{"message": "HTTP 500: overload", "count": 1}], "other_errors": 0}


def test_serve_run_is_read_with_its_percentiles_in_order(tmp_path):
    doc = serve_doc()
    doc["metrics"]["ttft_ms"]["p99.9"] = 60.0
    doc["metrics"]["tpot_ms"]["mean"] = None  # no samples: serve_json writes null
    src = data.read_input(write(tmp_path, "serve.json", doc))
    assert src["kind"] == "serve"
    assert [p for p, _ in src["metrics"]["ttft_ms"]["percentiles"]] == [90.0, 99.0, 99.9]
    assert src["metrics"]["tpot_ms"]["mean"] is None
    assert src["results"]["completed"] == 4


def test_serve_run_renders_its_tables(tmp_path):
    pytest.importorskip("matplotlib")
    import report

    out = tmp_path / "out"
    assert report.main([write(tmp_path, "serve.json", serve_doc()), "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "| serve.json | bench serve, model 'tiny' | 4 |" in md
    assert "| serve.json | tiny | http://127.0.0.1:8000/v1/completions | 128 / 16 | 5 | inf | 2 " \
           "| 4 | 1 | 2.000 | 2.00 | 32.00 | 288.00 |" in md
    assert "| serve.json | TTFT | 4 | 50.00 | 50.00 | 0.50 | 49.00 | 50.50 | 50.90 | 51.00 |" in md
    assert "- serve.json: 1 failed: `HTTP 500: overload`" in md
    assert "| git commit | abc123 |" in md
    assert f"Bench results: {report.NOT_HERE}." in md  # the other sections still say so
