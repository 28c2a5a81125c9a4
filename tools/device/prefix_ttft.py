#!/usr/bin/env python3
"""Time to first token with and without the prefix cache, against an OpenAI-compatible server.

Each request is a long shared prefix plus a short suffix of its own, answered with one token (so
the request's latency is its time to first token). "cold" requests each get a fresh random prefix
(nothing to reuse); "warm" requests share one prefix that a first, untimed request put in the
cache. Prints the medians and their ratio; --json writes them.

Only the standard library: it runs on the GPU machine as is.
"""
import argparse
import json
import random
import statistics
import time
import urllib.request


def post(base_url, body, timeout):
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        answer = json.load(r)
    return time.perf_counter() - t0, answer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--prefix-len", type=int, default=2000)
    p.add_argument("--suffix-len", type=int, default=16)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--vocab-low", type=int, default=1000)
    p.add_argument("--vocab-high", type=int, default=100000)
    p.add_argument("--model", default=None)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rng = random.Random(a.seed)

    def ids(n):
        return [rng.randrange(a.vocab_low, a.vocab_high) for _ in range(n)]

    def body(prompt):
        b = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
        if a.model:
            b["model"] = a.model
        return b

    post(a.base_url, body(ids(a.prefix_len + a.suffix_len)), a.timeout)  # warm-up, untimed
    cold, warm, cached = [], [], []
    for _ in range(a.repeats):
        t, _ = post(a.base_url, body(ids(a.prefix_len + a.suffix_len)), a.timeout)
        cold.append(t)
    shared = ids(a.prefix_len)
    post(a.base_url, body(shared + ids(a.suffix_len)), a.timeout)  # fills the cache
    for _ in range(a.repeats):
        t, answer = post(a.base_url, body(shared + ids(a.suffix_len)), a.timeout)
        warm.append(t)
        cached.append(answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
    result = {
        "prefix_len": a.prefix_len, "suffix_len": a.suffix_len, "repeats": a.repeats,
        "cold_ttft_ms_median": 1e3 * statistics.median(cold),
        "warm_ttft_ms_median": 1e3 * statistics.median(warm),
        "cold_ttft_ms": [1e3 * t for t in cold], "warm_ttft_ms": [1e3 * t for t in warm],
        "warm_cached_tokens": cached,
    }
    result["speedup"] = result["cold_ttft_ms_median"] / result["warm_ttft_ms_median"]
    print(f"prefix {a.prefix_len} + suffix {a.suffix_len} tokens, {a.repeats} requests each: "
          f"TTFT without cache {result['cold_ttft_ms_median']:.2f} ms, with cache "
          f"{result['warm_ttft_ms_median']:.2f} ms ({result['speedup']:.1f}x); cached tokens {cached}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
