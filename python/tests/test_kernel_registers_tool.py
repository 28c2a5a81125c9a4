"""tools/kernel_registers.py: ptxas's report parsed into one record a kernel (properties of
non-entry functions skipped), names shortened, and the build's own command run on a small
source where a CUDA build folder exists (skipped elsewhere)."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import kernel_registers as kr  # noqa: E402

PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6first' for 'sm_90a'
ptxas info    : Function properties for _Z6first
    16 bytes stack frame, 24 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 10.0 ms
ptxas info    : Function properties for _Z6helperv
    64 bytes stack frame, 64 bytes spill stores, 64 bytes spill loads
ptxas info    : Compiling entry function '_Z6second' for 'sm_90a'
ptxas info    : Function properties for _Z6second
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""


def test_parse_one_record_a_kernel():
    first, second = kr.parse_ptxas(PTXAS)
    assert (first.mangled, first.arch) == ("_Z6first", "sm_90a")
    assert (first.registers, first.stack, first.spill_stores, first.spill_loads) == (128, 16, 24, 28)
    # The helper's properties, listed between the two entries, belong to neither.
    assert (second.registers, second.stack, second.spill_stores, second.spill_loads) == (40, 0, 0, 0)


def test_parse_nothing():
    assert kr.parse_ptxas("ptxas info    : 0 bytes gmem\n") == []


def test_short_name_drops_namespaces_and_arguments():
    demangled = ("void braid::cuda::(anonymous namespace)::moe_gate_up_kernel<__nv_bfloat16, 1, true, "
                 "true, false>(braid::cuda::moe_experts_device::ExpertArgs)")
    assert kr.short_name(demangled) == "moe_gate_up_kernel<__nv_bfloat16, 1, true, true, false>"
    assert kr.short_name("void gemv<float>(float const*, int)") == "gemv<float>"


ARGMAX = os.path.join(ROOT, "src/ops/cuda/sampling/argmax.cu")


def _cuda_build():
    build = os.path.join(ROOT, "build")
    return build if kr.object_of(build, ARGMAX) is not None else None


@pytest.mark.skipif(_cuda_build() is None, reason="no CUDA build folder (build/ with nvcc objects)")
def test_argmax_kernels_from_the_build():
    kernels = kr.registers_of(_cuda_build(), ARGMAX)
    names = [k.name for k in kernels]
    assert any(n.startswith("argmax_kernel<") for n in names), names
    for k in kernels:
        assert 0 < k.registers <= 255
        assert k.arch.startswith("sm_")
