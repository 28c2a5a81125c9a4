"""braidinfer from Python: the library's ops on PyTorch tensors and numpy arrays, through
ctypes and libbraid.so (no build step against PyTorch; torch and numpy are both optional).

    import torch, braidinfer
    x = torch.randn(4, 4096, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
    y = braidinfer.rms_norm(x, w, 1e-6)            # allocates y
    braidinfer.rms_norm(x, w, 1e-6, out=x)         # in place

Offline inference with the serving engine, as vLLM's LLM class (see llm.py):

    from braidinfer import LLM, SamplingParams
    llm = LLM("models/tiny-fortunes", device="cpu")
    outs = llm.generate(["The meaning of life is"], SamplingParams(temperature=0, max_tokens=32))
    outs[0].outputs[0].text

libbraid.so is found through $BRAIDINFER_LIBRARY, else braidinfer/lib/, else the newest
<repo>/build*/libbraid.so; it is loaded on the first call.
"""

from ._library import (
    BraidError,
    Status,
    cuda_device_count,
    find_library,
    library_path,
    status_string,
    version,
)
from .llm import LLM, CompletionOutput, Logprob, RequestOutput, SamplingParams
from .ops import (
    RopeConfig,
    add_rms_norm,
    argmax,
    attention,
    attention_decode,
    attention_decode_counters,
    attention_decode_workspace_floats,
    attention_mla,
    attention_mla_workspace_floats,
    attention_prefill,
    embedding,
    gemm,
    kv_append,
    qk_norm_rope_kv_append,
    qk_norm_rope_kv_append_attention_decode,
    moe_combine,
    moe_experts,
    moe_fp8_block_scale,
    moe_fp8_block_scale_workspace_bytes,
    moe_fp8_quantize,
    moe_gather,
    moe_gather_fp8,
    moe_grouped_gemm,
    moe_grouped_gemm_fp8,
    moe_permute,
    moe_permute_workspace_size,
    moe_route_grouped,
    moe_route_softmax_grouped,
    moe_route_topk_softmax,
    paged_kv_gather,
    rms_norm,
    rope_apply,
    sample_tokens,
    sample_tokens_workspace_bytes,
    silu_mul,
    softmax,
)

__all__ = [
    "BraidError",
    "CompletionOutput",
    "LLM",
    "Logprob",
    "RequestOutput",
    "SamplingParams",
    "Status",
    "RopeConfig",
    "add_rms_norm",
    "argmax",
    "attention",
    "attention_decode",
    "attention_decode_counters",
    "attention_decode_workspace_floats",
    "attention_mla",
    "attention_mla_workspace_floats",
    "attention_prefill",
    "cuda_device_count",
    "embedding",
    "find_library",
    "gemm",
    "kv_append",
    "qk_norm_rope_kv_append",
    "qk_norm_rope_kv_append_attention_decode",
    "library_path",
    "moe_combine",
    "moe_experts",
    "moe_fp8_block_scale",
    "moe_fp8_block_scale_workspace_bytes",
    "moe_fp8_quantize",
    "moe_gather",
    "moe_gather_fp8",
    "moe_grouped_gemm",
    "moe_grouped_gemm_fp8",
    "moe_permute",
    "moe_permute_workspace_size",
    "moe_route_grouped",
    "moe_route_softmax_grouped",
    "moe_route_topk_softmax",
    "paged_kv_gather",
    "rms_norm",
    "rope_apply",
    "sample_tokens",
    "sample_tokens_workspace_bytes",
    "silu_mul",
    "softmax",
    "status_string",
    "version",
]
