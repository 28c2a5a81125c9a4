"""The harness every `python3 -m braidinfer.compare NAME` comparison runs on, so that each module
(compare_NAME.py: one peer comparison) holds only its implementations, its checks and its tables:

  options   parser(): the command line every comparison shares (--json, and --quick where it has
            one); int_list() for comma-separated counts
  running   main(): parse, check the arguments, check for torch with a CUDA device, run, say what
            was written, the exit code; cuda_torch_missing(), error_string()
  timing    CUDA events on torch's current stream: time_us() (L2 flushed before each call, through
            triton when present), time_alone() (an event pair around one call), time_eager() and
            time_graph() (calls captured in a torch CUDA graph), sized to a time budget by
            plan_reps() and graph_calls(); summary() / summary_ms() of the samples
  output    environment() (the machine and versions, the header of every report), save_json();
            the normalised rows of every report are compare_rows.py's

Nothing here imports torch until it is called, so every comparison's --help works without it.
"""

import argparse
import datetime
import json
import os
import statistics
import sys

# ---- options -----------------------------------------------------------------------------------


def parser(name, description, quick=None):
    """The parser of `python3 -m braidinfer.compare NAME`: --json, and --quick with its help text
    when the comparison has one; the module adds its own options."""
    p = argparse.ArgumentParser(prog=f"python3 -m braidinfer.compare {name}",
                                description=description)
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", help="write every row and the environment to this file")
    return p


def int_list(text):
    """"1,16,256" -> [1, 16, 256] (an argparse type)."""
    return [int(v) for v in text.split(",")]


# ---- running -----------------------------------------------------------------------------------


def error_string(e):
    """An exception as one short line: "RuntimeError: CUDA out of memory"."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def cuda_torch_missing(what):
    """Why comparison `what` cannot run here ("compare gemm: no CUDA device"), or None when torch
    with a CUDA device is available."""
    try:
        import torch
    except ImportError:
        return f"{what}: needs torch (with CUDA)"
    if not torch.cuda.is_available():
        return f"{what}: no CUDA device"
    return None


def main(name, build_parser, run, argv=None, prepare=None, exit_code=None):
    """Runs a comparison from its command line: the arguments (prepare(args) turns them into run's
    further arguments; its ValueError is a usage error), then torch and a CUDA device (exit 2
    without them), run(args, *prepared) -> the report, saved to --json (run may save it before,
    after each part), and exit_code(report) (default 0)."""
    p = build_parser()
    args = p.parse_args(argv)
    prepared = ()
    if prepare is not None:
        try:
            prepared = prepare(args)
        except ValueError as e:
            p.error(str(e))
    missing = cuda_torch_missing(f"compare {name}")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    report = run(args, *prepared)
    if args.json:
        save_json(report, args.json)
        print(f"wrote {args.json}")
    return exit_code(report) if exit_code is not None else 0


# ---- timing ------------------------------------------------------------------------------------


def summary(times_us):
    """Median, min and max of samples in microseconds, and their count."""
    return {"median_us": statistics.median(times_us), "min_us": min(times_us),
            "max_us": max(times_us), "samples": len(times_us)}


def summary_ms(times_ms):
    """summary() of samples in milliseconds, in milliseconds."""
    s = summary([t * 1e3 for t in times_ms])
    return {"median_ms": s["median_us"] / 1e3, "min_ms": s["min_us"] / 1e3,
            "max_ms": s["max_us"] / 1e3, "samples": s["samples"]}


def event_times_ms(fn, calls_per_sample, reps):
    """`reps` samples of milliseconds per call: an event pair around fn() (one call, or a graph
    replay of calls_per_sample calls), the host waiting for the end event each time, so the GPU is
    idle when the next start event is recorded."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls_per_sample)
    return times


def time_us(fn):
    """Median microseconds of fn() with the L2 flushed before each call (triton.testing.do_bench),
    or, without triton, the median of 50 event pairs after 10 warm-up calls."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
    for _ in range(10):
        fn()
    times = [t * 1e3 for t in event_times_ms(fn, 1, 50)]
    return sorted(times)[len(times) // 2]


def time_alone(fn, warmup, reps):
    """summary() of an event pair around one call, `reps` times after `warmup` calls (seed 000's
    method: what a caller pays per call, host-side cost included when it exceeds the GPU's idle
    gap)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return summary([t * 1e3 for t in event_times_ms(fn, 1, reps)])


def capture_graph(fn, calls, warm_calls):
    """A torch CUDA graph of `calls` calls of fn, captured after warm_calls calls on a side stream
    (torch's advice: capture needs one warmed up first)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm_calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def plan_reps(estimate_ms, budget_ms):
    """(warm-up calls, timed calls) for a call of about estimate_ms: the timed calls fill the
    budget, between 5 and 200 of them."""
    est = max(estimate_ms, 1e-3)
    return min(20, max(2, int(200 / est))), min(200, max(5, int(budget_ms / est)))


def graph_calls(estimate_ms):
    """Calls per captured graph: enough for ~20 ms per replay, at most 20."""
    return min(20, max(1, int(20 / max(estimate_ms, 1e-3))))


def time_eager(fn, budget_ms):
    """(summary_ms() of an event pair around each call, the first estimate), the calls sized to
    ~budget_ms by plan_reps() from one timed call, after a warm-up."""
    import torch

    fn()
    torch.cuda.synchronize()
    estimate = min(event_times_ms(fn, 1, 2))
    warmup, reps = plan_reps(estimate, budget_ms)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return summary_ms(event_times_ms(fn, 1, reps)), estimate


def time_graph(fn, estimate_ms, budget_ms):
    """summary_ms() per call of graph_calls() calls captured in one torch CUDA graph and replayed
    (replay time / calls), the replays sized to ~budget_ms."""
    import torch

    calls = graph_calls(estimate_ms)
    graph = capture_graph(fn, calls, 2)
    warmup, reps = plan_reps(estimate_ms * calls, budget_ms)
    for _ in range(min(warmup, 3)):
        graph.replay()
    torch.cuda.synchronize()
    result = summary_ms(event_times_ms(graph.replay, calls, reps))
    del graph
    return result


def measure(result, name, fn, flops, budget_ms, check=None, graph=True):
    """Times fn eagerly and (with graph) as graph replays into result["impls"][name] =
    {flops, eager, graph, check, error}; check(first output) fills "check". A failure is recorded
    in the row and the comparison goes on."""
    import torch

    row = {"flops": flops, "eager": None, "graph": None, "check": None, "error": None}
    result["impls"][name] = row
    try:
        out = fn()
        torch.cuda.synchronize()
        if check is not None:
            row["check"] = check(out)
        row["eager"], estimate = time_eager(fn, budget_ms)
        if graph:
            row["graph"] = time_graph(fn, estimate, budget_ms)
    except Exception as e:  # one failing implementation must not stop the others
        row["error"] = error_string(e)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---- output ------------------------------------------------------------------------------------


def fmt_median(s, unit="ms", digits=3):
    """A summary()'s or summary_ms()'s median as a table cell ("-" for none)."""
    return f"{s[f'median_{unit}']:.{digits}f}" if s else "-"


def fmt_range(s, unit="ms", digits=3):
    """Its min-max as a table cell ("-" for none)."""
    return f"{s[f'min_{unit}']:.{digits}f}-{s[f'max_{unit}']:.{digits}f}" if s else "-"


def fmt_ratio(v, digits=2):
    """A speed-up as a table cell: "1.50x" ("-" for none)."""
    return f"{v:.{digits}f}x" if v else "-"


def fmt_error(v):
    """An error figure as a table cell: "1.23e-04" ("-" for none)."""
    return f"{v:.2e}" if v is not None else "-"


def environment():
    """The machine, torch and the library the comparison ran on: every report's "info"."""
    import torch

    from . import _library

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "timing": "median of CUDA-event timings, L2 flushed before each call",
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
        info["timing"] = "median of 50 CUDA-event timings after 10 warm-up calls (no triton)"
    try:
        info["braidinfer_library"] = _library.library_path()
        info["braidinfer_version"] = _library.version()
    except Exception as e:
        info["braidinfer_library"] = error_string(e)
    return info


def print_environment(info, extra=""):
    """The header line of a comparison: device, torch, CUDA and the library it loaded."""
    print(f"{info['device']}, torch {info['torch']} (CUDA {info['torch_cuda']}), "
          f"library {info.get('braidinfer_library')}{extra}")


def save_json(document, path):
    """Writes the JSON through a temporary file, so that a reader never sees half of it (a
    comparison saves after each part: an interrupted run keeps what it measured)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=2)
    os.replace(tmp, path)
