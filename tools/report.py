#!/usr/bin/env python3
"""A Markdown report with PNG figures from braidinfer's measurements.

    python3 tools/report.py RESULTS... -o DIR [--title TEXT]

writes DIR/report.md and DIR/figures/*.png (linked relatively). RESULTS may mix:

  * braidinfer bench runs: {"schema": "braidinfer.bench.run/1", ...} as
    src/bench/harness/report.cpp's to_json writes them (rows, device, ceilings; older files without accuracy / roofline / derived
    rates are read too: what is missing is computed the way report.cpp computes it and marked).
    Extra top-level sections are ignored, except an older attention run's "validation" list, whose
    error figures are attached to the rows with the same params.
  * serving benchmarks: `braidinfer bench serve --json`'s ({"schema": "braidinfer.bench.serve/1",
    "parameters", "results", "metrics": {"ttft_ms" | "tpot_ms" | "itl_ms" | "e2e_ms": {count,
    mean, median, std, min, max, "p90", ...}}, "errors"}), shown as tables (no figures).
  * compare JSONs: `python -m braidinfer.compare all`'s ({"schema": "braidinfer.compare.all/1"})
    and any single module's (attention, decode, router, moe, moe-fp8, gemm, prefill), read through
    braidinfer/compare_rows.py.
  * profiles: `braidinfer profile --json`'s output ({"suite": "profile", "setup": {"model"},
    "device", "phases": [{"phase", "kernels_table": [{"name", "short_name", "calls", "total_us",
    "avg_us", "share" (of the phase's GPU time), "ncu": {...metrics below...}}]}]}), or this
    flat layout, assumed before that command's JSON was fixed:
        {"schema": "braidinfer.profile/1",
         "device": {...as in bench runs...} or "GPU name",     (optional)
         "git_commit": "...", "date_utc": "...", "model": "...",  (optional)
         "kernels": [{"name": str, "phase": str ("prefill", "decode", ...), "calls": int,
                      "total_us": float, "avg_us": float,
                      "share": float  (of the GPU time, 0..1; percentages > 1 are accepted and
                                       divided by 100; absent: total_us / sum of total_us)}],
         "ncu": [{"kernel": str, "sm_throughput_pct", "dram_throughput_pct",
                  "mem_throughput_pct" (or "memory_throughput_pct"), "achieved_occupancy_pct",
                  "l1_hit_rate_pct", "l2_hit_rate_pct", "duration_us": floats,
                  "roofline": str}]   (optional)}
    Kernels are shown per phase. Missing fields read as "not in these results".

JSON of another layout is listed as skipped; a file that is missing or not JSON is an error (exit
2). Sections without data say "not in these results"; no figure is drawn without measured data.
Needs matplotlib (Debian: python3-matplotlib); runs without a GPU.
"""

import argparse
import datetime
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report_data as data  # noqa: E402

NOT_HERE = "not in these results"


# ---- formatting ------------------------------------------------------------------------------


def fmt_us(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 1000 else f"{v:.1f}"


def fmt_rate(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 100 else f"{v:.1f}" if v < 1000 else \
        f"{v:.0f}"


def fmt_err(v):
    return "-" if v is None else "0" if v == 0 else f"{v:.2e}"


def cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()[:60] or "x"


def base(path):
    return os.path.basename(path)


# ---- the document ----------------------------------------------------------------------------


class Document:
    """The Markdown lines and the numbered figures."""

    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.lines = []
        self.figures = 0
        self.names = set()
        os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)

    def add(self, *lines):
        self.lines += lines

    def figure(self, name, draw, caption):
        """Draws into figures/<name>.png (draw(path)) and links it with a numbered caption."""
        name = slug(name)
        while name in self.names:
            name += "_"
        self.names.add(name)
        rel = f"figures/{name}.png"
        draw(os.path.join(self.out_dir, rel))
        self.figures += 1
        self.add(f"![{name}]({rel})", "",
                 f"*Figure {self.figures}. {caption}*", "")

    def write(self):
        path = os.path.join(self.out_dir, "report.md")
        with open(path, "w") as f:
            f.write("\n".join(self.lines).rstrip() + "\n")
        return path


# ---- header ----------------------------------------------------------------------------------

FACTS = ["GPU", "compute capability", "SMs", "GPU memory", "NVIDIA driver", "CUDA driver API",
         "CUDA runtime (braidinfer)", "CUDA runtime (PyTorch)", "cuBLASLt", "cuDNN", "PyTorch",
         "transformers", "triton", "braidinfer library", "git commit", "date (UTC)"]


def _gib(v):
    v = data.number(v)
    return f"{v / 2**30:.1f} GiB" if v else None


def _device_facts(d):
    """A bench run's device (report.cpp's device_json) or a profile's (its "driver" and
    "runtime" are the CUDA driver API and runtime versions)."""
    return {"GPU": d.get("name"), "compute capability": d.get("compute_capability"),
            "SMs": d.get("sm_count"), "GPU memory": _gib(d.get("memory_bytes")),
            "NVIDIA driver": d.get("kernel_driver"),
            "CUDA driver API": d.get("driver_version") or d.get("driver"),
            "CUDA runtime (braidinfer)": d.get("runtime_version") or d.get("runtime"),
            "cuBLASLt": d.get("cublas_version")}


def facts(src):
    """{fact: value} of one input (values missing or empty left out)."""
    f = {}
    if src["kind"] == "bench":
        f.update(_device_facts(src["device"] or {}))
        f.update({"git commit": src["git_commit"], "date (UTC)": src["date"]})
    elif src["kind"] == "compare":
        e = src["environment"]
        f.update({"GPU": e.get("gpu"), "compute capability": e.get("compute_capability"),
                  "SMs": e.get("sms"), "GPU memory": _gib(e.get("memory_bytes")),
                  "NVIDIA driver": e.get("driver"), "CUDA driver API": e.get("cuda_driver"),
                  "CUDA runtime (PyTorch)": e.get("cuda"), "cuDNN": e.get("cudnn"),
                  "PyTorch": e.get("torch"), "transformers": e.get("transformers"),
                  "triton": e.get("triton"), "braidinfer library": e.get("braidinfer_version"),
                  "git commit": e.get("git_commit"), "date (UTC)": e.get("date")})
    elif src["kind"] == "serve":  # a network client: the server's GPU is not in its file
        f.update({"git commit": src["git_commit"], "date (UTC)": src["date"]})
    elif src["kind"] == "profile":
        f.update(_device_facts(src["device"] or {}))
        f.update({"GPU": src["gpu"], "git commit": src["git_commit"], "date (UTC)": src["date"]})
    return {k: str(v) for k, v in f.items() if v not in (None, "", "unknown")}


def header_rows(inputs):
    rows = []
    for fact in FACTS:
        seen = {}  # value -> files
        for src in inputs:
            v = facts(src).get(fact)
            if v is not None:
                seen.setdefault(v, []).append(base(src["path"]))
        if not seen:
            rows.append([fact, NOT_HERE])
        elif len(seen) == 1:
            rows.append([fact, next(iter(seen))])
        else:
            rows.append([fact, "; ".join(
                f"{v} ({', '.join(files) if len(files) <= 2 else f'{len(files)} files'})"
                for v, files in seen.items())])
    return rows


# ---- sections --------------------------------------------------------------------------------


def section_inputs(doc, inputs, skipped):
    doc.add("## Inputs", "")
    rows = []
    for src in inputs:
        what = {"bench": lambda s: f"bench run, suite '{s['suite']}'",
                "compare": lambda s: f"compare ({s['comparison']})",
                "serve": lambda s: "bench serve, model "
                                   f"'{s['parameters'].get('model') or '?'}'",
                "profile": lambda s: "profile"}[src["kind"]](src)
        rows.append([base(src["path"]), what,
                     len(src.get("rows") or src.get("kernels") or src.get("metrics") or [])])
    rows += [[base(s["path"]), f"skipped: {s['reason']}", "-"] for s in skipped]
    doc.add(*table(["file", "read as", "rows"], rows), "")


def section_ceilings(doc, benches):
    doc.add("## Ceilings", "")
    if not benches:
        doc.add(f"Ceilings: {NOT_HERE} (no braidinfer bench run given).", "")
        return
    doc.add("Measured in the same run as its rows (`braidinfer bench`): the copy ceiling is the "
            "best device-to-device copy, the GEMM ceilings the best cuBLASLt GEMM; the ridge "
            "point is GEMM TFLOP/s x 1e3 / copy GB/s (FLOP per byte).", "")
    rows = []
    for b in benches:
        c = b["ceilings"]
        r16, r8 = data.ridge(c), data.ridge(c, fp8=True)
        rows.append([base(b["path"]), b["suite"], fmt_rate(c["copy_gbps"]),
                     fmt_rate(c["gemm_tflops"]), fmt_rate(c["fp8_gemm_tflops"]),
                     f"{r16:.0f}" if r16 else "-", f"{r8:.0f}" if r8 else "-"])
    doc.add(*table(["file", "suite", "copy GB/s", "bf16 GEMM TFLOP/s", "fp8 GEMM TFLOP/s",
                    "ridge bf16", "ridge fp8"], rows), "",
            "`-`: not measured in that run.", "")


def _mark(row, key, text):
    return text + "†" if key in row["derived"] and text != "-" else text


def section_results(doc, benches):
    doc.add("## Results", "")
    if not benches:
        doc.add(f"Bench results: {NOT_HERE}.", "")
        return
    for b in benches:
        doc.add(f"### {b['suite']} ({base(b['path'])})", "",
                f"Commit {b['git_commit'] or 'unknown'}, {b['date'] or 'date unknown'}, "
                f"{(b['device'] or {}).get('name', 'device unknown')}. Times in microseconds "
                "(median of the samples); % of ceiling against the row's bound (memory: copy, "
                "compute: bf16 GEMM, compute_fp8: fp8 GEMM).", "")
        rows = []
        for r in b["rows"]:
            a = r["accuracy"] or {}
            check = {True: "ok", False: "FAIL"}.get(a.get("passed"), "-")
            acc_mark = "‡" if "accuracy" in r["derived"] else ""
            pct = r["percent_of_ceiling"]
            rows.append([r["name"], r["params"], r["timing"], fmt_us(r["median_us"]),
                         _mark(r, "gbps", fmt_rate(r["gbps"])),
                         _mark(r, "tflops", fmt_rate(r["tflops"])),
                         _mark(r, "percent_of_ceiling", f"{pct:.1f}" if pct is not None else "-"),
                         _mark(r, "roofline", r["roofline"] or "-"),
                         fmt_err(a.get("max_abs")) + acc_mark, fmt_err(a.get("mean_abs")) + acc_mark,
                         fmt_err(a.get("max_rel")) + acc_mark, check, r["note"]])
        doc.add(*table(["name", "params", "timing", "median us", "GB/s", "TFLOP/s", "% ceil",
                        "roofline", "max abs", "mean abs", "max rel", "check", "note"], rows), "")
        notes = []
        if any(set(r["derived"]) - {"accuracy"} for r in b["rows"]):
            notes.append("† computed by this tool from the row's bytes, FLOPs and median and the "
                         "run's ceilings (the file predates the field), as report.cpp computes it.")
        if any("accuracy" in r["derived"] for r in b["rows"]):
            notes.append("‡ error figures from the run's top-level validation section (same "
                         "params), against an fp32 reference.")
        if not any(r["accuracy"] for r in b["rows"]):
            notes.append(f"Accuracy (max abs / mean abs / max rel / check): {NOT_HERE} (this "
                         "run's rows carry no checks).")
        for n in notes:
            doc.add(n, "")


def section_validation(doc, inputs):
    doc.add("## Validation against seed 001's criteria", "")
    crit = data.SEED001_CRITERIA
    doc.add(*table(["metric", "acceptable", "excellent"],
                   [["max absolute error", f"< {crit['max_abs'][0]:g}", f"< {crit['max_abs'][1]:g}"],
                    ["mean absolute error", f"< {crit['mean_abs'][0]:g}",
                     f"< {crit['mean_abs'][1]:g}"],
                    ["max relative error", f"< {crit['max_rel'][0]:g}",
                     f"< {crit['max_rel'][1]:g}"]]), "")
    rows = data.validation_rows(inputs)
    if not rows:
        doc.add(f"Error figures: {NOT_HERE} (no bench row carries an accuracy check and no "
                "compare row an error).", "")
        return
    counts = data.grade_counts(rows)
    doc.add(f"{len(rows)} rows with error figures. Each figure is graded on its own: "
            "*excellent* below the excellent bound, *acceptable* below the acceptable bound, "
            "*not met* otherwise, *not measured* where the source has no such figure.", "")
    doc.add(*table(["metric", "excellent", "acceptable", "not met", "not measured"],
                   [[m, c["excellent"], c["acceptable"], c["not met"], c["not measured"]]
                    for m, c in counts.items()]), "")
    detail = []
    for v in rows:
        def g(metric):
            grade = v[metric + "_grade"]
            return f"{fmt_err(v[metric])} ({grade})" if grade else "-"

        own = {True: "ok", False: "FAIL"}.get(v["own_check"], "-")
        detail.append([base(v["source"]), v["what"], v["case"], v["implementation"],
                       v["reference"] or "-", g("max_abs"), g("mean_abs"), g("max_rel"),
                       fmt_err(v["rounding_max_abs"]), own])
    doc.add(*table(["file", "what", "case", "implementation", "reference", "max abs", "mean abs",
                    "max rel", "bf16 rounding of ref", "own check"], detail), "")
    doc.add("Reading the grades: the seed's bounds are absolute. An exact result rounded to bf16 "
            "is already off by up to half a bf16 step, 3.9e-3 for values in [1, 2), so a bf16 "
            "output of order-one values cannot meet the max abs bound whatever the kernel does; "
            "the 'bf16 rounding of ref' column (where the source measured it) is that floor for "
            "the row. 'own check' is the row's own pass rule (rel L2 within its tolerance). "
            "Max rel is |d| / max(|ref|, 0.1 x RMS of the output vector) in the C++ benchmarks "
            "and the MoE/GEMM comparisons; the router's figure is against torch, not fp32.", "")


def _speedup_table(rows):
    out = []
    for r, b in data.peer_pairs(rows):
        ratio = (r["median_ms"] / b["median_ms"] if b and b["median_ms"] and r["median_ms"]
                 else None)
        notes = [r["note"] or "no time"] if not r["median_ms"] else []
        if b is None:
            notes.append(f"no {r['peer_of']} row in this file")
        elif not b["median_ms"]:
            notes.append(f"{r['peer_of']}: {b['note'] or 'no time'}")
        note = "; ".join(notes)
        out.append([r["case"], r["implementation"], fmt_us(r["median_ms"] and r["median_ms"] * 1e3),
                    r["peer_of"], fmt_us(b["median_ms"] * 1e3 if b and b["median_ms"] else None),
                    f"{ratio:.2f}x" if ratio else "-", note or ""])
    return out


def section_speedups(doc, compares):
    from report_figures import speedup_bars

    doc.add("## Speed-up against the peers", "")
    if not compares:
        doc.add(f"Comparisons with peers: {NOT_HERE} (no compare JSON given).", "")
        return
    for src in compares:
        for name, err in src["failures"].items():
            doc.add(f"- {name} ({base(src['path'])}): the comparison failed: `{err}`")
        if src["failures"]:
            doc.add("")
        by_comparison = {}
        for r in src["rows"]:
            by_comparison.setdefault(r["comparison"], []).append(r)
        for comparison, rows in by_comparison.items():
            doc.add(f"### {comparison} ({base(src['path'])})", "")
            items = [(c, p, x) for c, p, x, _ in data.speedups(rows) if x is not None]
            if items:
                doc.figure(
                    f"speedup_{comparison}_{base(src['path'])}",
                    lambda path, t=f"{comparison}: peer time / braidinfer time", i=items:
                    speedup_bars(t, i, path),
                    f"Speed-up of braidinfer over each peer in the '{comparison}' comparison, per "
                    "case: the peer's median time divided by braidinfer's (the braidinfer row the "
                    "peer is compared with; '/ name' when that is not plain 'braidinfer'); right "
                    f"of the dashed line braidinfer is faster. Source: {base(src['path'])}.")
            else:
                doc.add(f"Speed-ups: {NOT_HERE} (no case has both a braidinfer and a peer time).",
                        "")
            doc.add(*table(["case", "peer", "peer us", "vs", "braidinfer us", "speed-up", "note"],
                           _speedup_table(rows)), "")


def _serve_number(v, digits=2):
    if v is None:
        return "-"
    return f"{v:.0f}" if float(v).is_integer() and digits == 0 else f"{v:.{digits}f}"


SERVE_METRICS = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"),
                 ("e2e_ms", "E2E latency")]


def section_serving(doc, serves):
    doc.add("## Serving benchmarks", "")
    if not serves:
        doc.add(f"Serving benchmarks: {NOT_HERE} (no `braidinfer bench serve` JSON given).", "")
        return
    doc.add("`braidinfer bench serve` against an OpenAI-compatible server, measured as `vllm bench "
            "serve` measures: throughputs over the run's duration, counting completed requests; "
            "latencies in ms (TTFT to the first generated text, TPOT = (E2E - TTFT) / (output "
            "tokens - 1), ITL between generated-text events).", "")
    rows = []
    for s in serves:
        p, r = s["parameters"], s["results"]
        rate = p.get("request_rate")
        rows.append([base(s["path"]), p.get("model") or "-",
                     f"{p.get('base_url') or ''}{p.get('endpoint') or ''}" or "-",
                     f"{p.get('input_len', '-')} / {p.get('output_len', '-')}",
                     p.get("num_prompts", "-"), "inf" if rate is None else f"{rate:g}",
                     p.get("max_concurrency") or "none",
                     _serve_number(r.get("completed"), 0), _serve_number(r.get("failed"), 0),
                     _serve_number(r.get("duration_s"), 3),
                     _serve_number(r.get("request_throughput")),
                     _serve_number(r.get("output_throughput")),
                     _serve_number(r.get("total_token_throughput"))])
    doc.add(*table(["file", "model", "server", "in / out tokens", "prompts", "rate req/s",
                    "max conc.", "completed", "failed", "duration s", "req/s", "out tok/s",
                    "total tok/s"], rows), "")
    pcts = sorted({p for s in serves for m in s["metrics"].values() for p, _ in m["percentiles"]})
    rows = []
    for s in serves:
        for key, title in SERVE_METRICS:
            m = s["metrics"].get(key)
            if m is None:
                continue
            at = dict(m["percentiles"])
            rows.append([base(s["path"]), title, _serve_number(m["count"], 0)]
                        + [_serve_number(m[k]) for k in ("mean", "median", "std", "min")]
                        + [_serve_number(at.get(p)) for p in pcts] + [_serve_number(m["max"])])
    doc.add(*table(["file", "latency (ms)", "count", "mean", "median", "std", "min"]
                   + [f"p{p:g}" for p in pcts] + ["max"], rows), "")
    for s in serves:
        for e in s["errors"]:
            doc.add(f"- {base(s['path'])}: {e.get('count', '?')} failed: `{e.get('message', '?')}`")
    if any(s["errors"] for s in serves):
        doc.add("")


def roofline_points(bench):
    """(normalised points, physical points, rows left out) of one bench run."""
    c = bench["ceilings"]
    norm, phys, left_out = [], [], 0
    for r in bench["rows"]:
        if not (r["flops"] > 0 and r["bytes"] > 0 and r["median_us"] and r["tflops"]):
            continue
        fp8 = r["bound"] == "compute_fp8"
        intensity = r["flops"] / r["bytes"]
        label = f"{r['name']} {r['params']}"
        cls = r["roofline"]
        phys.append({"intensity": intensity, "tflops": r["tflops"], "cls": cls, "fp8": fp8,
                     "label": label})
        ridge, attain = data.ridge(c, fp8), data.attainable_tflops(intensity, c, fp8)
        if ridge and attain:
            norm.append({"x": intensity / ridge, "y": r["tflops"] / attain, "cls": cls,
                         "fp8": fp8, "label": label})
        else:
            left_out += 1
    return norm, phys, left_out


def section_roofline(doc, benches):
    from report_figures import roofline_normalised, roofline_physical

    doc.add("## Roofline", "")
    drawn = False
    for b in benches:
        norm, phys, left_out = roofline_points(b)
        name = f"{b['suite']} ({base(b['path'])})"
        if not phys:
            continue
        drawn = True
        doc.add(f"### {name}", "")
        if norm:
            doc.figure(f"roofline_normalised_{base(b['path'])}",
                       lambda path, p=norm, t=f"{name}: normalised roofline":
                       roofline_normalised(p, t, path),
                       "Normalised roofline: each row with FLOPs and bytes at its arithmetic "
                       "intensity divided by the run's ridge point (x) and its achieved TFLOP/s "
                       "divided by what the measured roofs allow at that intensity (y; 1 = on the "
                       "roof); colour: roofline class, triangles: fp8 rows against the fp8 ridge "
                       f"and roof. Source: {base(b['path'])}"
                       + (f"; {left_out} rows left out (no ceiling for their kind)."
                          if left_out else "."))
        else:
            doc.add(f"Normalised roofline: {NOT_HERE} (the run lacks the copy or GEMM ceiling "
                    "its rows need).", "")
        if b["ceilings"]["copy_gbps"]:
            doc.figure(f"roofline_physical_{base(b['path'])}",
                       lambda path, p=phys, c=b["ceilings"], t=f"{name}: roofline":
                       roofline_physical(p, c, t, path),
                       "Roofline, log-log: achieved TFLOP/s against FLOP per byte of each row with "
                       "FLOPs and bytes; dotted slope: the measured copy ceiling, flat lines: the "
                       "measured bf16 (solid) and fp8 (dashed) GEMM ceilings, where the run "
                       "measured them; colour: roofline class, triangles: fp8 rows. Source: "
                       f"{base(b['path'])}.")
        else:
            doc.add(f"Physical roofline: {NOT_HERE} (the run measured no copy ceiling).", "")
    if not drawn:
        doc.add(f"Roofline: {NOT_HERE} (no bench row with both FLOPs and bytes).", "")


def section_histograms(doc, benches, profiles):
    from report_figures import histogram, metric_histograms

    doc.add("## Kernel metrics", "")
    # Stacked by run; by suite when there are too many runs for telling colours apart.
    by_run = len(benches) <= 10
    stacked = "run" if by_run else "suite"

    def groups(value):
        out = {}
        for b in benches:
            key = f"{b['suite']} ({base(b['path'])})" if by_run else b["suite"]
            out.setdefault(key, []).extend(v for v in map(value, b["rows"]) if v is not None)
        return out

    durations = groups(lambda r: r["median_us"])
    files = ", ".join(base(b["path"]) for b in benches)
    if any(durations.values()):
        doc.figure("hist_duration", lambda path: histogram(
            durations, "median time per row (us, log scale)", "Row durations", path, log=True),
            f"Distribution of the bench rows' median times (log bins), stacked by {stacked}. "
            f"Sources: {files}.")
    else:
        doc.add(f"Durations: {NOT_HERE}.", "")
    pct = groups(lambda r: r["percent_of_ceiling"])
    if any(pct.values()):
        doc.figure("hist_percent_of_ceiling", lambda path: histogram(
            pct, "% of the row's ceiling", "Percent of ceiling", path),
            "Distribution of the bench rows' achieved rate as a percentage of the ceiling of "
            f"their bound (copy, bf16 GEMM or fp8 GEMM), stacked by {stacked}. Sources: {files}.")
    else:
        doc.add(f"% of ceiling: {NOT_HERE}.", "")
    for p in profiles:
        panels = []
        for key, label in data.NCU_METRICS:
            values = [data.number(n.get(key)) for n in p["ncu"]]
            values = [v for v in values if v is not None]
            if values:
                panels.append((label, values))
        if panels:
            doc.figure(f"hist_ncu_{base(p['path'])}", lambda path, ps=panels: metric_histograms(
                ps, f"Nsight Compute metrics ({base(p['path'])})", path),
                "Distribution over the profiled kernels of each Nsight Compute metric present "
                f"(5 % bins). Source: {base(p['path'])}.")
    if not any(p["ncu"] for p in profiles):
        doc.add(f"Nsight Compute metrics (SM / DRAM throughput, occupancy, L1 / L2 hit rates): "
                f"{NOT_HERE}.", "")


def section_profiles(doc, profiles, top):
    from report_figures import share_bars

    doc.add("## Profile", "")
    if not profiles:
        doc.add(f"Profile (top kernels by time): {NOT_HERE}.", "")
        return
    for p in profiles:
        doc.add(f"### {base(p['path'])}", "")
        meta = [f"{k} {v}" for k, v in (("model", p["model"]), ("commit", p["git_commit"]),
                                         ("date", p["date"]), ("GPU", p["gpu"])) if v]
        if meta:
            doc.add(", ".join(meta) + ".", "")
        if not p["phases"]:
            doc.add(f"Kernels: {NOT_HERE}.", "")
        for phase, all_kernels in p["phases"].items():
            kernels = all_kernels[:top]
            where = f"the {phase} phase" if phase else "the profile"
            doc.add(f"Top {len(kernels)} of {len(all_kernels)} kernels of {where} by share of "
                    "its GPU time:", "")
            shown = [(k["name"], k["share"]) for k in kernels if k["share"] is not None]
            if shown:
                doc.figure(f"profile_share_{phase or 'all'}_{base(p['path'])}",
                           lambda path, s=shown, t=f"Top kernels by GPU time ({phase or 'all'})":
                           share_bars(s, t, path),
                           f"The {len(shown)} kernels with the largest share of the GPU time of "
                           f"{where}"
                           + (" (shares given as percentages in the file)"
                              if p["share_was_percent"] else "")
                           + f". Source: {base(p['path'])}.")
            doc.add(*table(["kernel", "phase", "calls", "total us", "avg us", "share"],
                           [[k["name"], k["phase"] or "-",
                             f"{k['calls']:.0f}" if k["calls"] is not None else "-",
                             fmt_us(k["total_us"]), fmt_us(k["avg_us"]),
                             f"{100 * k['share']:.1f}%" if k["share"] is not None else "-"]
                            for k in kernels]), "")
        if p["ncu"]:
            cols = [k for k, _ in data.NCU_METRICS]
            doc.add("Nsight Compute, per kernel (% of the unit's peak):", "")
            doc.add(*table(["kernel", "duration us"] + [lbl for _, lbl in data.NCU_METRICS]
                           + ["roofline"],
                           [[n.get("kernel", "?"), fmt_us(data.number(n.get("duration_us")))]
                            + [fmt_rate(data.number(n.get(c))) for c in cols]
                            + [n.get("roofline") or "-"] for n in p["ncu"]]), "")
        else:
            doc.add(f"Nsight Compute table: {NOT_HERE}.", "")


def section_profile_vs_breakdown(doc, profiles, benches):
    """A profile's decode components beside `bench decode --breakdown` of the same model shape:
    the check that the two tools see the same step."""
    pairs = []
    for p in profiles:
        decode = (p.get("steps") or {}).get("decode")
        if not decode or not decode["components"] or not p["model"]:
            continue
        for b in benches:
            rows = b["rows"]
            steps = [r for r in rows if r["name"] == "decode_step"
                     and r["params"].split(" ")[0] == p["model"]]
            events = {r["params"]: r["median_us"] for r in rows if r["name"] == "decode_component"}
            if steps and events:
                pairs.append((p, decode, b, steps, events))
    if not pairs:
        return
    doc.add("## Profile against the decode breakdown", "")
    for p, decode, b, steps, events in pairs:
        doc.add(f"### {base(p['path'])} and {base(b['path'])}", "")
        kernels = " / ".join(
            f"{r['timing']}: {fmt_us(r['median_us'])} us ({r['note'].split(',')[0]})" for r in steps)
        doc.add(f"`bench decode` ({steps[0]['params']}): {kernels}. `profile` ({p['model']}, "
                f"{decode['steps']:.0f} eager decode steps under CUPTI): "
                f"{decode['kernels_per_step']:.1f} kernels per step, GPU busy "
                f"{fmt_us(decode['busy_us_per_step'])} us per step, wall "
                f"{fmt_us(decode['wall_us_per_step'])} us per step.", "")
        rows, sums = [], [0.0, 0.0, 0.0, 0.0]
        for comp in decode["components"]:
            name = comp.get("component", "?")
            figures = [data.number(comp.get(k)) for k in
                       ("us_per_step", "span_us_per_step", "elapsed_us_per_step")]
            event = events.get(name)
            for i, v in enumerate(figures + [event]):
                sums[i] += v or 0
            ratio = (figures[2] / event) if figures[2] and event else None
            rows.append([name] + [fmt_us(v) for v in figures] + [fmt_us(event),
                         f"{ratio:.2f}" if ratio else "-"])
        rows.append(["sum"] + [fmt_us(v) for v in sums] + ["-"])
        doc.add(*table(["component", "profile: kernel us", "profile: span us",
                        "profile: elapsed us", "bench decode: events us", "elapsed / events"],
                       rows), "")
        doc.add("Kernel us sums kernel durations per step; span counts kernels that overlap "
                "(programmatic dependent launch) once; elapsed runs from the end of the previous "
                "component, launch gaps included, which is what the CUDA events recorded after each "
                "component measure in `bench decode --breakdown` (the events themselves add host "
                "time to every component of an eager, launch-bound step).", "")


# ---- main ------------------------------------------------------------------------------------


def build(paths, out_dir, title="braidinfer benchmark report", top=15):
    """Reads every input and writes out_dir/report.md with its figures; returns its path.
    Raises data.InputError for an unreadable input."""
    inputs, skipped = [], []
    for path in paths:
        src = data.read_input(path)
        (skipped if src["kind"] == "skipped" else inputs).append(src)
    benches = [s for s in inputs if s["kind"] == "bench"]
    compares = [s for s in inputs if s["kind"] == "compare"]
    profiles = [s for s in inputs if s["kind"] == "profile"]
    serves = [s for s in inputs if s["kind"] == "serve"]

    doc = Document(out_dir)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    doc.add(f"# {title}", "", f"Generated {now} by tools/report.py from {len(paths)} files.", "",
            "## Hardware and software", "")
    doc.add(*table(["", ""], header_rows(inputs)), "")
    section_inputs(doc, inputs, skipped)
    section_ceilings(doc, benches)
    section_results(doc, benches)
    section_validation(doc, inputs)
    section_speedups(doc, compares)
    section_roofline(doc, benches)
    section_histograms(doc, benches, profiles)
    section_profiles(doc, profiles, top)
    section_profile_vs_breakdown(doc, profiles, benches)
    section_serving(doc, serves)
    return doc.write()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("results", nargs="+",
                        help="JSON files (bench, bench serve, compare, profile)")
    parser.add_argument("-o", "--out", required=True, help="output folder")
    parser.add_argument("--title", default="braidinfer benchmark report")
    parser.add_argument("--top", type=int, default=15, help="kernels shown per profile")
    args = parser.parse_args(argv)
    try:
        import report_figures  # noqa: F401  (matplotlib: fail before reading anything)
    except ImportError as e:
        print(f"report: needs matplotlib ({e}); Debian: apt-get install python3-matplotlib",
              file=sys.stderr)
        return 2
    try:
        path = build(args.results, args.out, args.title, args.top)
    except data.InputError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
