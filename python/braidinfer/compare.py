"""Side-by-side comparisons of braidinfer's kernels with PyTorch, in one process on the GPU
machine (needs torch with CUDA, and triton for the timings it prefers):

    python3 -m braidinfer.compare attention [--sweep] [--json FILE]
        attention_prefill beside naive PyTorch attention and SDPA (FlashAttention-2, cuDNN) on
        the ANCHORS.md attention-forward configurations (braidinfer/compare_attention.py)
    python3 -m braidinfer.compare decode [--json FILE]
        attention_decode beside SDPA on the ANCHORS.md decode shapes
        (braidinfer/compare_decode.py; also python3 -m braidinfer.compare_decode)
    python3 -m braidinfer.compare router [--json FILE]
        moe_route_topk_softmax beside PyTorch softmax + topk (128 experts, top-8, bf16) at 1, 4,
        256 and 1024 tokens (braidinfer/compare_router.py)
    python3 -m braidinfer.compare moe [--shape seed001|qwen3|all] [--tokens N,...] [--json FILE]
        the MoE layer (route, permute, gather, grouped GEMMs, combine) beside a torch._grouped_mm
        pipeline, transformers' per-expert loop and dense cuBLAS on seed 001's and Qwen3-30B-A3B's
        layers (braidinfer/compare_moe.py)
    python3 -m braidinfer.compare moe-fp8 [--shape seed003|seed001|all] [--tokens N,...] [--json FILE]
        the FP8 block-scale MoE: seed 003's definition (moe_fp8_block_scale, intermediate terms 3
        and 1) beside its torch reference, and seed 001's layer in fp8 beside a
        torch._scaled_grouped_mm pipeline and the bf16 torch._grouped_mm one
        (braidinfer/compare_moe_fp8.py)
    python3 -m braidinfer.compare gemm [--quick] [--json FILE]
        ops.gemm beside torch.matmul (cuBLAS) on Llama-3-8B's projections at M = 1, 16, 128, 4096
        (braidinfer/compare_gemm.py)
    python3 -m braidinfer.compare prefill [--models ...] [--quick] [--braidinfer-json F] [--json FILE]
        transformers LlamaForCausalLM prefill on seed 001's small / medium / large models, beside
        `braidinfer bench prefill --json F` (braidinfer/compare_prefill.py)
    python3 -m braidinfer.compare all [--quick] [--only a,b] [--skip a,b]
        [--braidinfer-prefill-json F] [--json FILE]
        every comparison above in one process, one JSON with normalised rows
        (braidinfer/compare_all.py, braidinfer/compare_rows.py)

Each comparison is one module, compare_NAME.py, on one harness (compare_harness.py: the command
line, the CUDA-event timing, the environment header and the JSON); compare_rows.py turns any of
their reports into normalised rows. A new peer comparison is one module and one SUBCOMMANDS entry
(and one COMPARISONS entry in compare_rows.py with its normaliser, for `compare all`).

Run from the repository root with the package and a CUDA build of the library:

    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare attention --json out.json
"""

import importlib
import sys

# subcommand -> module of this package with a main(argv) (imported only when chosen, so that
# --help works without torch)
SUBCOMMANDS = {"attention": "compare_attention", "decode": "compare_decode",
               "router": "compare_router", "moe": "compare_moe", "moe-fp8": "compare_moe_fp8",
               "gemm": "compare_gemm", "prefill": "compare_prefill", "all": "compare_all"}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] not in SUBCOMMANDS:
        print(f"braidinfer.compare: unknown comparison '{argv[0]}' (choose from "
              f"{', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module("." + SUBCOMMANDS[argv[0]], __package__ or "braidinfer")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
