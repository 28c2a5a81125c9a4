"""Normalised rows of the comparisons' reports, so that a reader (tools/report.py, `compare all`)
can set braidinfer beside its peers without knowing each module's layout. Pure python: no torch,
no GPU.

A row:
    {"comparison":     "attention", "decode", "router", "moe", "moe-fp8", "gemm" or "prefill",
     "case":           the shape, e.g. "B=16 S=2048 H=16 D=64 causal"; a comparison that times
                       two ways puts the way in brackets: "seed001 4x512 T=2048 [graph]"
     "implementation": "braidinfer", "torch_sdpa_flash", ...
     "median_ms":      float, or None when the implementation failed or was not run
     "peer_of":        None for braidinfer's rows; for a peer, the implementation of the same
                       case it is compared with (speed-up = peer median / that row's median)
     "tflops", "gbps": float or None
     "error":          None, or {"max_abs", "mean_abs", "max_rel", "rel_l2", "reference"}
                       against the module's reference (None for figures it does not measure)
     "note":           None, or why the row has no time, or what else it says}
"""

SCHEMA_ALL = "braidinfer.compare.all/1"
COMPARISONS = ["attention", "decode", "router", "moe", "moe-fp8", "gemm", "prefill"]


def make_row(comparison, case, implementation, median_ms, peer_of, tflops=None, gbps=None,
             error=None, note=None):
    return {"comparison": comparison, "case": case, "implementation": implementation,
            "median_ms": median_ms, "peer_of": peer_of, "tflops": tflops, "gbps": gbps,
            "error": error, "note": note or None}


def error_figures(reference, max_abs=None, mean_abs=None, max_rel=None, rel_l2=None):
    """The error dict of a row, or None when no figure was measured."""
    if max_abs is None and mean_abs is None and max_rel is None and rel_l2 is None:
        return None
    return {"max_abs": max_abs, "mean_abs": mean_abs, "max_rel": max_rel, "rel_l2": rel_l2,
            "reference": reference}


def _check_error(check, reference):
    """error_figures of a compare_moe / compare_gemm style check dict (None stays None)."""
    if not check:
        return None
    return error_figures(reference, check.get("max_abs"), check.get("mean_abs"),
                         check.get("max_rel"), check.get("rel_l2"))


def _per_ms(amount, ms, scale):
    return amount / ms / scale if amount and ms else None


# ---- one normaliser per module layout --------------------------------------------------------

ATTENTION_NAMES = {"naive": "torch_naive", "sdpa_flash": "torch_sdpa_flash",
                   "sdpa_cudnn": "torch_sdpa_cudnn"}


def attention_rows(report):
    """compare_attention: {"anchors": [config], "sweep": [config], ...}, config["results"] =
    {impl: {ms, tflops, rel_error, max_abs_error, error, note}}. The memory table has no timings
    and gives no rows."""
    rows = []
    for section in ("anchors", "sweep"):
        for c in report.get(section) or []:
            case = f"B={c['batch']} S={c['seq']} H={c['heads']} D={c['head_dim']} {c['mask']}"
            for name, r in c.get("results", {}).items():
                error = error_figures("fp32", max_abs=r.get("max_abs_error"),
                                      rel_l2=r.get("rel_error"))
                note = "; ".join(x for x in (r.get("error"), r.get("note")) if x)
                if r.get("nan"):
                    note = ("NaN in output; " + note).strip("; ")
                rows.append(make_row("attention", case, ATTENTION_NAMES.get(name, name),
                                     r.get("ms"), None if name == "braidinfer" else "braidinfer",
                                     tflops=r.get("tflops"), error=error, note=note))
    return rows


DECODE_NAMES = {"braidinfer_attention_decode": "braidinfer",
                "braidinfer_attention_decode_graph": "braidinfer_graph"}


def decode_rows(report):
    """compare_decode: {"rows": [{name, batch, kv_len, median_us, gbps, note}]}. The peers are
    timed as braidinfer's per-call row (L2 flushed), and a peer's "_graph" row (calls in a CUDA
    graph, L2 warm) as braidinfer_graph."""
    rows = []
    for r in report.get("rows") or []:
        name = DECODE_NAMES.get(r["name"], r["name"])
        us = r.get("median_us")
        peer = None
        if not name.startswith("braidinfer"):
            peer = "braidinfer_graph" if name.endswith("_graph") else "braidinfer"
        rows.append(make_row("decode", f"batch={r['batch']} kv_len={r['kv_len']}", name,
                             us / 1e3 if us else None, peer,
                             gbps=r.get("gbps"), note=r.get("note")))
    return rows


def router_rows(report):
    """compare_router: {"results": [{tokens, impls: {impl: {alone, graph, error}},
    check_vs_torch}]}, timings in microseconds; one case per timing ('alone', 'graph')."""
    rows = []
    for res in report.get("results") or []:
        check = res.get("check_vs_torch") or {}
        braid_error = error_figures("torch", max_abs=check.get("max_abs_weight_error"))
        ids_note = None
        if check:
            ids_note = (f"ids vs torch: {check.get('ids_equal_rows')} equal, "
                        f"{check.get('ids_tie_rows')} ties, {check.get('ids_different_rows')} "
                        f"different of {check.get('rows')} rows")
        for mode in ("alone", "graph"):
            for name, row in res.get("impls", {}).items():
                s = row.get(mode)
                braid = name == "braidinfer"
                rows.append(make_row("router", f"T={res['tokens']} [{mode}]", name,
                                     s["median_us"] / 1e3 if s else None,
                                     None if braid else "braidinfer",
                                     error=braid_error if braid else None,
                                     note=row.get("error") or (ids_note if braid else None)))
    return rows


def _timed_rows(comparison, case_base, impls, peer_of):
    """Rows of a compare_moe-style result: impls = {impl: {flops, eager, graph, check, error}},
    one case per timing; an implementation not timed one way gives no row for it, a failed one
    a row with its error (once, in the eager case)."""
    rows = []
    for mode in ("eager", "graph"):
        for name, row in impls.items():
            s = row.get(mode)
            if s is None and not (row.get("error") and mode == "eager"):
                continue
            ms = s["median_ms"] if s else None
            rows.append(make_row(comparison, f"{case_base} [{mode}]", name, ms, peer_of(name),
                                 tflops=_per_ms(row.get("flops"), ms, 1e9),
                                 error=_check_error(row.get("check"), "fp32"),
                                 note=row.get("error")))
    return rows


MOE_PEER_OF = {"torch_grouped_mm": "braidinfer", "torch_loop": "braidinfer",
               "torch_grouped_mm_experts": "braidinfer_experts",
               "dense_cublas": "braidinfer_experts"}


def _case_label(model, label, tokens):
    return f"{model} {label}" if label.startswith("T=") else f"{model} {label} T={tokens}"


def moe_rows(report):
    """compare_moe: {"results": [{model, label, tokens, impls}]}: the whole layers (peers of
    braidinfer) and the experts' GEMMs alone (peers of braidinfer_experts)."""
    rows = []
    for res in report.get("results") or []:
        rows += _timed_rows("moe", _case_label(res["model"], res["label"], res["tokens"]),
                            res.get("impls", {}),
                            lambda n: None if n.startswith("braidinfer")
                            else MOE_PEER_OF.get(n, "braidinfer"))
    return rows


def moe_fp8_rows(report):
    """compare_moe_fp8: {"results": [{layer, label, tokens, impls}]}: seed003 (torch_reference
    the peer of braidinfer_terms3, the judged variant) and seed001 in fp8 (peers of
    braidinfer_fp8). seed003's check is flashinfer-bench's rule: max abs and rel L2 only."""
    rows = []
    for res in report.get("results") or []:
        braid = "braidinfer_terms3" if res["layer"] == "seed003" else "braidinfer_fp8"
        rows += _timed_rows("moe-fp8", _case_label(res["layer"], res["label"], res["tokens"]),
                            res.get("impls", {}),
                            lambda n, b=braid: None if n.startswith("braidinfer") else b)
    return rows


def gemm_rows(report):
    """compare_gemm: {"results": [{projection, m, n, k, impls: {impl: {median_us, tflops, gbps,
    check, error}}}]}."""
    rows = []
    for res in report.get("results") or []:
        case = f"{res['projection']} M={res['m']} N={res['n']} K={res['k']}"
        for name, row in res.get("impls", {}).items():
            us = row.get("median_us")
            rows.append(make_row("gemm", case, name, us / 1e3 if us else None,
                                 None if name.startswith("braidinfer") else "braidinfer",
                                 tflops=row.get("tflops"), gbps=row.get("gbps"),
                                 error=_check_error(row.get("check"), "fp32"),
                                 note=row.get("error")))
    return rows


def prefill_rows(report):
    """compare_prefill: {"results": [{model, batch, seq, transformers, braidinfer}]}; braidinfer's
    row only where --braidinfer-json supplied one."""
    rows = []
    impl = (report.get("config") or {}).get("implementation", "transformers_sdpa")
    for res in report.get("results") or []:
        case = f"{res['model']} batch {res['batch']} seq {res['seq']}"
        b = res.get("braidinfer")
        if b:
            rows.append(make_row("prefill", case, "braidinfer", b.get("median_ms"), None,
                                 tflops=b.get("tflops")))
        t = res.get("transformers") or {}
        rows.append(make_row("prefill", case, impl, t.get("median_ms"), "braidinfer",
                             tflops=t.get("tflops"), note=t.get("error")))
    return rows


NORMALISERS = {"attention": attention_rows, "decode": decode_rows, "router": router_rows,
               "moe": moe_rows, "moe-fp8": moe_fp8_rows, "gemm": gemm_rows,
               "prefill": prefill_rows}


def is_failure(report):
    """True for the {"error": "..."} that stands for a comparison that failed as a whole."""
    return isinstance(report, dict) and set(report) == {"error"}


def normalise(comparison, report):
    """The rows of one module's report (a failed comparison's {"error": ...} gives none)."""
    if is_failure(report):
        return []
    return NORMALISERS[comparison](report)


def detect(report):
    """Which comparison a single module's JSON is ("all" for compare all's), or None."""
    if not isinstance(report, dict):
        return None
    if report.get("schema") == SCHEMA_ALL:
        return "all"
    if "anchors" in report and "memory" in report:
        return "attention"
    rows = report.get("rows")
    if isinstance(rows, list) and "info" in report and (not rows or "kv_len" in rows[0]):
        return "decode"
    config = report.get("config")
    if not isinstance(config, dict) or "results" not in report:
        return None
    targets = config.get("targets") or {}
    if "rule" in config:
        return "moe-fp8"
    if "vs_torch_grouped_mm" in targets:
        return "moe"
    if "alone_us" in targets:
        return "router"
    if "projections" in config:
        return "gemm"
    if config.get("implementation", "").startswith("transformers"):
        return "prefill"
    return None
