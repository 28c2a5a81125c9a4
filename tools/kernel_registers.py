#!/usr/bin/env python3
"""Registers, stack and spills of each CUDA kernel of one source file, as ptxas reports them.

Why: a kernel under `__launch_bounds__` that runs out of registers spills silently, and a path
that a call never takes still costs the paths it does take their registers (decode.md, session
17: the quantized fp8 tile compiled into the exact MoE gate_up kernel gave it 88 bytes of
spills). This compiles the file again with the build's own command plus `-Xptxas -v` (into a
temporary object: the build folder is left as it was) and prints one line a kernel.

Usage:
  python3 tools/kernel_registers.py src/ops/cuda/moe/moe_experts.cu [--build build]
      [--match REGEX]      only kernels whose demangled name matches
      [--max-spill BYTES]  exit 1 if a listed kernel spills more (stores or loads)
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Kernel:
    mangled: str
    arch: str
    registers: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    name: str = ""  # demangled


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_FOR = re.compile(r"Function properties for (\S+)")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas(text):
    """Kernels of `ptxas -v` output, in order. Properties of other (non-entry) functions that
    ptxas lists between them are skipped."""
    kernels, current, props_of = [], None, None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = Kernel(m.group(1), m.group(2))
            kernels.append(current)
            props_of = None
            continue
        m = _PROPS_FOR.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = _PROPS.search(line)
        if m and current is not None and props_of == current.mangled:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            current = None  # one "Used" line closes the entry
    return kernels


def demangle(names):
    if not names or shutil.which("c++filt") is None:
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def short_name(demangled):
    """The demangled name without namespaces, the anonymous namespace and the argument list."""
    name = demangled.replace("(anonymous namespace)::", "")
    name = re.sub(r"^void ", "", name)
    depth, end = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    name = name[:end]
    return re.sub(r"\b[a-z_0-9]+::", "", name)


def object_of(build, source):
    """The build's object target for `source`, or None (no build.ninja, or no such object)."""
    if not os.path.isfile(os.path.join(build, "build.ninja")) or shutil.which("ninja") is None:
        return None
    rel = os.path.relpath(os.path.abspath(source), ROOT)
    targets = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], capture_output=True,
                             text=True).stdout
    for line in targets.splitlines():
        target = line.split(":")[0]
        if target.endswith("/" + rel + ".o"):
            return target
    return None


def compile_command(build, source):
    """The build's compile command for `source` (argv, run in `build`)."""
    rel = os.path.relpath(os.path.abspath(source), ROOT)
    target = object_of(build, source)
    if target is None:
        sys.exit(f"kernel_registers: no object of {rel} in {build}'s build.ninja")
    lines = subprocess.run(["ninja", "-C", build, "-t", "commands", target], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    argv = shlex.split(lines[-1])
    if os.path.basename(argv[0]) == "ccache":
        argv = argv[1:]
    if not argv or "nvcc" not in os.path.basename(argv[0]):
        sys.exit(f"kernel_registers: {rel} is not compiled by nvcc ({lines[-1][:80]}...)")
    return argv


def registers_of(build, source):
    argv = compile_command(build, source)
    with tempfile.TemporaryDirectory() as tmp:
        cleaned, skip = [], 0
        for arg in argv:  # the dependency file and the object go to the temporary folder
            if skip:
                skip -= 1
                continue
            if arg in ("-MT", "-MF", "-o"):
                skip = 1
                continue
            if arg == "-MD":
                continue
            cleaned.append(arg)
        cleaned += ["-o", os.path.join(tmp, "x.o"), "-Xptxas", "-v"]
        run = subprocess.run(cleaned, cwd=build, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kernel_registers: the compile failed:\n{run.stderr[-2000:]}")
    kernels = parse_ptxas(run.stdout + run.stderr)
    for k, name in zip(kernels, demangle([k.mangled for k in kernels])):
        k.name = short_name(name)
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--match", default="")
    ap.add_argument("--max-spill", type=int, default=None)
    args = ap.parse_args()
    kernels = [k for k in registers_of(args.build, args.source) if re.search(args.match, k.name)]
    width = max((len(k.name) for k in kernels), default=10)
    print(f"{'kernel':{width}}  arch     regs  stack  spill st  spill ld")
    over = []
    for k in kernels:
        print(f"{k.name:{width}}  {k.arch:7}  {k.registers:4}  {k.stack:5}  {k.spill_stores:8}  {k.spill_loads:8}")
        if args.max_spill is not None and max(k.spill_stores, k.spill_loads) > args.max_spill:
            over.append(k.name)
    if over:
        print(f"{len(over)} kernel(s) spill more than {args.max_spill} bytes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
