#!/usr/bin/env python3
"""Prints a gtest filter that selects every test of braid_tests that runs on the GPU.

A test runs on the GPU when its name says so (Cuda / CUDA / cuda, as the parameterized
device tests are named) or when its body asks for one (BRAID_REQUIRE_CUDA, Device::cuda).
compute-sanitizer runs over this set (tools/device/check.sh, SANITIZE=1): selecting by
name alone missed GPU tests named after what they check rather than where they run.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEST = re.compile(r"^\s*TEST(?:_P|_F)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
GPU = re.compile(r"BRAID_REQUIRE_CUDA|Device::cuda\b")


def gpu_tests(root: pathlib.Path):
    for path in sorted((root / "tests").rglob("*.cpp")):
        text = path.read_text(errors="replace")
        heads = list(TEST.finditer(text))
        for i, m in enumerate(heads):
            body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            if GPU.search(body):
                yield f"{m.group(1)}.{m.group(2)}"


def main() -> int:
    names = sorted(set(gpu_tests(ROOT)))
    # Parameterized tests are Instance/Suite.Name/Param: match the middle part anywhere.
    patterns = ["*Cuda*", "*CUDA*", "*cuda*"] + [f"*{n}*" for n in names]
    # Left out: the benchmark suite's self-test times 256 MiB copies and every kernel's bench
    # over many repetitions (under racecheck or synccheck it outlasts a device call), and its
    # checks are about timing; each kernel it times has tests of its own in this set.
    # The same for the ceilings' self-test (bandwidth rows within bounds) and the timer's
    # event-interval check: under racecheck they failed on their timing (2026-12-02), not on
    # a kernel; the copy kernel and the timer have tests of their own here.
    excluded = ["KernelSuiteGpu.*", "BenchCeilingsGpu.QuickRunMeasuresEveryRow",
                "BenchTimerGpu.MeasuresTheTimeBetweenTheEventsPerLaunch"]
    print(":".join(patterns) + "-" + ":".join(excluded))
    print(f"cuda_test_filter: {len(names)} tests ask for the GPU in their body", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
