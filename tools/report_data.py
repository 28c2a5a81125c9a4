"""Reading the inputs of tools/report.py: braidinfer bench runs, compare JSONs (compare all's and
the single modules'), profiles. Pure python (no matplotlib), so it is tested on its own.

Every reader is defensive: a missing field reads as None ("not in these results"), never as a
made-up value. Derived figures (GB/s, TFLOP/s, % of ceiling, roofline class) are computed here
only where an older file lacks them, the way src/bench/harness/report.cpp computes them, and
marked as derived.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from braidinfer import compare_rows  # noqa: E402  (pure python: no torch, no library)

BENCH_SCHEMA = "braidinfer.bench.run/1"
SERVE_SCHEMA = "braidinfer.bench.serve/1"
PROFILE_SCHEMA = "braidinfer.profile/1"

# Seed 001's "Validation Criteria", (acceptable, excellent): a figure strictly below the bound.
SEED001_CRITERIA = {"max_abs": (1e-3, 1e-4), "mean_abs": (1e-4, 1e-5), "max_rel": (1e-2, 1e-3)}
NCU_METRICS = [("sm_throughput_pct", "SM throughput (%)"),
               ("dram_throughput_pct", "DRAM throughput (%)"),
               ("mem_throughput_pct", "memory throughput (%)"),
               ("achieved_occupancy_pct", "achieved occupancy (%)"),
               ("l1_hit_rate_pct", "L1 hit rate (%)"), ("l2_hit_rate_pct", "L2 hit rate (%)")]


class InputError(Exception):
    """A file that cannot be read as any input: the message names it and what is wrong."""


def number(v):
    """v as a float, or None for None / non-numbers / NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if v != v else float(v)


# ---- roofline, as src/bench/harness/report.cpp -------------------------------------------------


def ridge(ceilings, fp8=False):
    """FLOP per byte where the compute roof meets the copy roof; None if a ceiling is unknown."""
    copy = number(ceilings.get("copy_gbps"))
    peak = number(ceilings.get("fp8_gemm_tflops" if fp8 else "gemm_tflops"))
    return peak * 1e3 / copy if copy and peak else None


def roofline_class(flops, bytes_, ceilings, fp8=False):
    """'memory' below half the ridge, 'compute' above twice it, else 'balanced' (report.cpp's
    row_roofline); None for rows that move nothing and compute nothing, and for rows with FLOPs
    in a run without the ceilings of their ridge (report.cpp says 'balanced' there; this tool
    says it does not know)."""
    if flops <= 0 and bytes_ <= 0:
        return None
    if bytes_ <= 0:
        return "compute"
    if flops <= 0:
        return "memory"
    r = ridge(ceilings, fp8)
    if not r:
        return None
    intensity = flops / bytes_
    return "memory" if intensity < r / 2 else "compute" if intensity > 2 * r else "balanced"


def attainable_tflops(intensity, ceilings, fp8=False):
    """min(compute roof, intensity x copy roof) in TFLOP/s; None if a ceiling is unknown."""
    copy = number(ceilings.get("copy_gbps"))
    peak = number(ceilings.get("fp8_gemm_tflops" if fp8 else "gemm_tflops"))
    if not copy or not peak:
        return None
    return min(peak, intensity * copy / 1e3)


# ---- braidinfer bench runs ---------------------------------------------------------------------


def _legacy_accuracy(validation):
    """params -> accuracy dict from an older attention run's top-level "validation" list."""
    out = {}
    for v in validation if isinstance(validation, list) else []:
        if not isinstance(v, dict) or "params" not in v:
            continue
        out[v["params"]] = {
            "reference": "fp32 (the run's validation section)", "elements": v.get("elements"),
            "max_abs": number(v.get("max_abs_error")), "mean_abs": number(v.get("mean_abs_error")),
            "max_rel": number(v.get("max_rel_error")), "rel_l2": number(v.get("rel_l2_error")),
            "rounding_max_abs": number(v.get("bf16_rounding_max_abs")),
            "rel_l2_tolerance": None, "passed": v.get("ok")}
    return out


def bench_row(r, ceilings, legacy=None):
    """A bench row with every derived figure present; 'derived' lists what was computed here."""
    median = number(r.get("median_us")) or 0.0
    bytes_ = number(r.get("bytes")) or 0.0
    flops = number(r.get("flops")) or 0.0
    bound = r.get("bound") or "none"
    fp8 = bound == "compute_fp8"
    row = {"name": r.get("name", "?"), "params": r.get("params", ""),
           "timing": r.get("timing", ""), "median_us": median or None,
           "min_us": number(r.get("min_us")), "max_us": number(r.get("max_us")),
           "bytes": bytes_, "flops": flops, "bound": bound, "note": r.get("note") or "",
           "derived": []}

    def take(key, compute):
        if key in r:
            row[key] = r[key] if not isinstance(r[key], (int, float)) else number(r[key])
        else:
            row[key] = compute()
            if row[key] is not None:
                row["derived"].append(key)

    take("gbps", lambda: bytes_ / median / 1e3 if bytes_ > 0 and median > 0 else None)
    take("tflops", lambda: flops / median / 1e6 if flops > 0 and median > 0 else None)
    take("arithmetic_intensity", lambda: flops / bytes_ if flops > 0 and bytes_ > 0 else None)

    def percent():
        if bound == "memory" and row["gbps"] and number(ceilings.get("copy_gbps")):
            return 100 * row["gbps"] / ceilings["copy_gbps"]
        key = {"compute": "gemm_tflops", "compute_fp8": "fp8_gemm_tflops"}.get(bound)
        if key and row["tflops"] and number(ceilings.get(key)):
            return 100 * row["tflops"] / ceilings[key]
        return None

    take("percent_of_ceiling", percent)
    take("roofline", lambda: roofline_class(flops, bytes_, ceilings, fp8))
    acc = r.get("accuracy")
    if isinstance(acc, dict):
        row["accuracy"] = {k: number(acc.get(k)) for k in
                           ("max_abs", "mean_abs", "max_rel", "rel_l2", "rounding_max_abs",
                            "rel_l2_tolerance")}
        row["accuracy"].update(reference=acc.get("reference"), passed=acc.get("passed"))
    elif legacy and row["params"] in legacy:
        row["accuracy"] = dict(legacy[row["params"]])
        row["derived"].append("accuracy")
    else:
        row["accuracy"] = None
    return row


def read_bench(doc, path):
    ceilings = {k: number((doc.get("ceilings") or {}).get(k))
                for k in ("copy_gbps", "gemm_tflops", "fp8_gemm_tflops")}
    legacy = _legacy_accuracy(doc.get("validation"))
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise InputError(f"{path}: bench JSON without a 'rows' list")
    return {"kind": "bench", "path": path, "suite": doc.get("suite") or "?",
            "git_commit": doc.get("git_commit"), "date": doc.get("date_utc"),
            "device": doc.get("device") if isinstance(doc.get("device"), dict) else None,
            "ceilings": ceilings,
            "rows": [bench_row(r, ceilings, legacy) for r in rows if isinstance(r, dict)]}


# ---- serving benchmarks ----------------------------------------------------------------------


def _percentile_key(key):
    """95.0 for "p95", None for keys that are not a percentile."""
    try:
        return float(key[1:]) if key.startswith("p") else None
    except ValueError:
        return None


def read_serve(doc, path):
    """`braidinfer bench serve --json` (src/bench/suites/serve/serve_report.h): the run's
    parameters, results (counts, duration, throughputs) and latency distributions in ms
    ({metric: {count, mean, median, std, min, max, "p90", ...}}). Values that are missing or null
    read as None."""
    def section(name):
        v = doc.get(name)
        return v if isinstance(v, dict) else {}

    metrics = {}
    for name, d in section("metrics").items():
        if isinstance(d, dict):
            stats = {k: number(d.get(k)) for k in ("count", "mean", "median", "std", "min", "max")}
            stats["percentiles"] = sorted((p, number(v)) for k, v in d.items()
                                          if (p := _percentile_key(k)) is not None)
            metrics[name] = stats
    errors = [e for e in doc.get("errors") or [] if isinstance(e, dict)]
    return {"kind": "serve", "path": path, "git_commit": doc.get("git_commit"),
            "date": doc.get("date_utc"), "parameters": section("parameters"),
            "results": {k: number(v) for k, v in section("results").items()},
            "metrics": metrics, "errors": errors}


# ---- compare JSONs ---------------------------------------------------------------------------


def read_compare(doc, path, kind):
    """compare all's document, or one module's report (normalised the same way)."""
    if kind == "all":
        env = doc.get("environment") or {}
        comparisons = doc.get("comparisons") or {}
        rows = doc.get("rows")
        if not isinstance(rows, list):  # normalise again if only the reports are there
            rows = [r for name, rep in comparisons.items() if name in compare_rows.NORMALISERS
                    for r in compare_rows.normalise(name, rep)]
        failures = {n: r["error"] for n, r in comparisons.items() if compare_rows.is_failure(r)}
    else:
        info = doc.get("info") or {}
        env = {"gpu": info.get("device"), "date": info.get("date"), "torch": info.get("torch"),
               "cuda": info.get("torch_cuda"), "cudnn": info.get("cudnn"),
               "triton": info.get("triton"), "transformers": info.get("transformers"),
               "compute_capability": info.get("compute_capability"), "sms": info.get("sms"),
               "memory_bytes": info.get("memory_bytes"),
               "braidinfer_version": info.get("braidinfer_version")}
        rows = compare_rows.normalise(kind, doc)
        failures = {}
    return {"kind": "compare", "path": path, "comparison": kind, "environment": env,
            "rows": rows, "failures": failures}


# ---- profiles --------------------------------------------------------------------------------


def _kernel(k, phase):
    return {"name": str(k.get("short_name") or k.get("name") or "?"),
            "phase": k.get("phase", phase), "calls": number(k.get("calls")),
            "total_us": number(k.get("total_us")), "avg_us": number(k.get("avg_us")),
            "share": number(k.get("share"))}


def _ncu_entry(n, kernel=None):
    """One kernel's Nsight Compute metrics; 'mem_throughput_pct' and 'memory_throughput_pct'
    both read as the memory throughput."""
    e = dict(n)
    if kernel:  # the readable name of the table row; ncu's own (mangled) name stays as symbol
        if "kernel" in e:
            e.setdefault("symbol", e["kernel"])
        e["kernel"] = kernel
    e.setdefault("kernel", "?")
    if "mem_throughput_pct" not in e and "memory_throughput_pct" in e:
        e["mem_throughput_pct"] = e["memory_throughput_pct"]
    return e


def _fill_shares(kernels):
    """Shares of the same phase: percentages (> 1) divided by 100, missing ones from total_us
    over the phase's sum. Returns whether the file gave percentages."""
    shares = [k["share"] for k in kernels if k["share"] is not None]
    as_percent = bool(shares) and max(shares) > 1.0
    total = sum(k["total_us"] or 0 for k in kernels)
    for k in kernels:
        if k["share"] is None and k["total_us"] is not None and total > 0:
            k["share"] = k["total_us"] / total
        elif k["share"] is not None and as_percent:
            k["share"] /= 100.0
    return as_percent


def read_profile(doc, path):
    """Two layouts: the flat one this tool's docstring assumes ({"schema":
    "braidinfer.profile/1", "kernels": [...], "ncu": [...]}), and `braidinfer profile --json`'s
    ({"suite": "profile", "phases": [{"phase", "kernels_table": [{name, short_name, calls,
    total_us, avg_us, share, "ncu": {...}}]}]}). Kernels come back grouped by phase, largest share
    first."""
    phases = {}  # phase -> kernels
    steps = {}  # phase -> its per-step figures and components (braidinfer profile's layout)
    ncu = []
    ncu_seen = set()  # braidinfer folds one kernel's metrics into every phase that ran it
    if isinstance(doc.get("kernels"), list):
        for k in doc["kernels"]:
            if isinstance(k, dict):
                kk = _kernel(k, None)
                phases.setdefault(kk["phase"], []).append(kk)
    for p in doc.get("phases") or []:
        if not isinstance(p, dict):
            continue
        steps[p.get("phase")] = {
            "steps": number(p.get("steps")), "kernels_per_step": number(p.get("kernels_per_step")),
            "busy_us_per_step": number(p.get("busy_us_per_step")),
            "wall_us_per_step": number(p.get("wall_us_per_step")),
            "components": [cc for cc in p.get("components") or [] if isinstance(cc, dict)]}
        for k in p.get("kernels_table") or []:
            if isinstance(k, dict):
                kk = _kernel(k, p.get("phase"))
                phases.setdefault(kk["phase"], []).append(kk)
                key = k.get("symbol") or k.get("name") or kk["name"]
                if isinstance(k.get("ncu"), dict) and key not in ncu_seen:
                    ncu_seen.add(key)
                    ncu.append(_ncu_entry(k["ncu"], kk["name"]))
    if isinstance(doc.get("ncu"), list):
        ncu += [_ncu_entry(n) for n in doc["ncu"] if isinstance(n, dict)]
    as_percent = False
    for kernels in phases.values():
        as_percent |= _fill_shares(kernels)
        kernels.sort(key=lambda k: -(k["share"] or 0))
    device = doc.get("device")
    setup = doc.get("setup") if isinstance(doc.get("setup"), dict) else {}
    return {"kind": "profile", "path": path, "phases": phases, "steps": steps,
            "kernels": [k for ks in phases.values() for k in ks], "ncu": ncu,
            "device": device if isinstance(device, dict) else None,
            "gpu": device if isinstance(device, str) else (device or {}).get("name"),
            "git_commit": doc.get("git_commit"), "date": doc.get("date_utc") or doc.get("date"),
            "model": doc.get("model") or setup.get("model"), "share_was_percent": as_percent}


# ---- any input -------------------------------------------------------------------------------


def read_input(path):
    """One input file as a dict with 'kind' bench / compare / profile, or {'kind': 'skipped',
    'reason': ...} for JSON of a layout this tool does not know. Raises InputError for a file
    that cannot be read or is not JSON."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema == BENCH_SCHEMA:
        return read_bench(doc, path)
    if schema == SERVE_SCHEMA:
        return read_serve(doc, path)
    if schema == PROFILE_SCHEMA or (isinstance(doc, dict) and doc.get("suite") == "profile"
                                    and isinstance(doc.get("phases"), list)):
        return read_profile(doc, path)
    kind = compare_rows.detect(doc)
    if kind is not None:
        return read_compare(doc, path, kind)
    reason = (f"schema {schema!r} is not one this tool reads" if schema else
              "no schema and not the layout of a compare module")
    return {"kind": "skipped", "path": path, "reason": reason}


# ---- comparisons -----------------------------------------------------------------------------


def peer_pairs(rows):
    """[(peer row, the braidinfer row it is the peer of (same case) or None)] of one
    comparison's rows."""
    braid = {(r["case"], r["implementation"]): r for r in rows if r["peer_of"] is None}
    return [(r, braid.get((r["case"], r["peer_of"]))) for r in rows if r["peer_of"] is not None]


def speedups(rows):
    """[(case, peer, ratio or None, note)] of one comparison's rows: ratio = peer median / the
    median of the braidinfer row it is the peer of (same case); None when either has no time."""
    out = []
    for r, b in peer_pairs(rows):
        if b is None:
            out.append((r["case"], r["implementation"], None, f"no {r['peer_of']} row"))
        elif not b["median_ms"]:
            out.append((r["case"], r["implementation"], None,
                        f"{r['peer_of']} has no time: {b['note'] or 'not measured'}"))
        elif not r["median_ms"]:
            out.append((r["case"], r["implementation"], None, r["note"] or "not measured"))
        else:
            label = r["implementation"]
            if r["peer_of"] != "braidinfer":
                label += f" / {r['peer_of']}"
            out.append((r["case"], label, r["median_ms"] / b["median_ms"], None))
    return out


# ---- validation against seed 001 ---------------------------------------------------------------


def grade(metric, value):
    """'excellent', 'acceptable', 'not met' against SEED001_CRITERIA, or None if not measured."""
    if value is None:
        return None
    acceptable, excellent = SEED001_CRITERIA[metric]
    return "excellent" if value < excellent else "acceptable" if value < acceptable else "not met"


def validation_rows(inputs):
    """Rows with error figures: every braidinfer bench row with accuracy, and each distinct
    (comparison, case, implementation) of the compare rows with an error (the timing bracket
    stripped: eager and graph share one check)."""
    out = []
    for src in inputs:
        if src["kind"] == "bench":
            for r in src["rows"]:
                a = r["accuracy"]
                if a:
                    out.append({"source": src["path"], "what": f"{src['suite']}: {r['name']}",
                                "case": r["params"], "implementation": "braidinfer",
                                "reference": a.get("reference"), "max_abs": a.get("max_abs"),
                                "mean_abs": a.get("mean_abs"), "max_rel": a.get("max_rel"),
                                "rounding_max_abs": a.get("rounding_max_abs"),
                                "own_check": a.get("passed")})
        elif src["kind"] == "compare":
            seen = set()
            for r in src["rows"]:
                e = r["error"]
                if not e:
                    continue
                case = r["case"].split(" [")[0]
                key = (r["comparison"], case, r["implementation"])
                if key in seen:
                    continue
                seen.add(key)
                out.append({"source": src["path"], "what": r["comparison"], "case": case,
                            "implementation": r["implementation"],
                            "reference": e.get("reference"), "max_abs": e.get("max_abs"),
                            "mean_abs": e.get("mean_abs"), "max_rel": e.get("max_rel"),
                            "rounding_max_abs": None, "own_check": None})
    for v in out:
        for metric in SEED001_CRITERIA:
            v[metric + "_grade"] = grade(metric, v[metric])
    return out


def grade_counts(rows):
    """{metric: {grade: count}} with None counted as 'not measured'."""
    counts = {}
    for metric in SEED001_CRITERIA:
        c = {"excellent": 0, "acceptable": 0, "not met": 0, "not measured": 0}
        for r in rows:
            c[r[metric + "_grade"] or "not measured"] += 1
        counts[metric] = c
    return counts
