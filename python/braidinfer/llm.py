"""Offline inference with braidinfer's serving engine, shaped like vLLM's `LLM` class.

    from braidinfer import LLM, SamplingParams
    llm = LLM("models/tiny-fortunes", device="cpu")
    outs = llm.generate(["The meaning of life is", "A fool"],
                        SamplingParams(temperature=0, max_tokens=32))
    outs[0].outputs[0].text, outs[0].outputs[0].token_ids, outs[0].prompt_token_ids

`generate` hands every prompt to the engine at once (continuous batching, chunked prefill, the
prefix cache) and returns when all have finished, results in the order of the prompts. The class
and field names are vLLM's where vLLM has them (LLM.generate, SamplingParams, RequestOutput,
CompletionOutput, Logprob), so code written for vLLM's offline API mostly runs unchanged.

It is a thin layer over braid_llm_* in libbraid.so (JSON in and out, see include/braid/braid.h);
every check happens in the library, and its errors raise BraidError with the library's message
("braid_llm_generate: requests[1].top_p ..."). A generate call holds the engine until it returns:
Ctrl-C is seen only afterwards.
"""

import ctypes
import dataclasses
import json
import operator
import os
import threading
from typing import Dict, List, Optional, Sequence, Union

from ._library import BraidError, Status, check, function

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob"]


@dataclasses.dataclass
class SamplingParams:
    """How to sample, vLLM's names and defaults. temperature 0 is greedy; max_tokens=None runs
    until the context is full; logprobs=k returns the sampled token's log-probability and the k
    most likely alternatives at each step (k <= 20)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def _to_request(self) -> dict:
        """The request fields of braid_llm_generate (None goes as null: the library's default,
        or for max_tokens the rest of the context)."""
        fields = dataclasses.asdict(self)
        if isinstance(self.stop, (list, tuple)):
            fields["stop"] = list(self.stop)
        if self.stop_token_ids is not None:
            fields["stop_token_ids"] = [operator.index(t) for t in self.stop_token_ids]
        return fields


@dataclasses.dataclass
class Logprob:
    """One token's log-probability under the model; rank is 1 for the most likely token (None
    when the sampled token is not among the alternatives asked for)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclasses.dataclass
class CompletionOutput:
    """One completion (choice `index` of its request). logprobs: per generated token, a dict
    token id -> Logprob holding the sampled token first, then the most likely alternatives."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class RequestOutput:
    """The n completions of one prompt. prompt is None for a token-id prompt."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0
    prompt_logprobs: None = None


PromptType = Union[str, Dict[str, object], Sequence[int]]


def _is_token_ids(p) -> bool:
    return isinstance(p, (list, tuple)) and len(p) > 0 and all(
        hasattr(t, "__index__") and not isinstance(t, (str, bytes)) for t in p)


def _prompt_fields(p) -> dict:
    """One prompt as braid_llm_generate's prompt fields."""
    if isinstance(p, str):
        return {"prompt": p}
    if isinstance(p, dict):
        unknown = set(p) - {"prompt", "prompt_token_ids"}
        if unknown:
            raise ValueError(f"LLM.generate: prompt dicts take 'prompt' or 'prompt_token_ids', "
                             f"got {sorted(unknown)}")
        out = dict(p)
        if "prompt_token_ids" in out and out["prompt_token_ids"] is not None:
            out["prompt_token_ids"] = [operator.index(t) for t in out["prompt_token_ids"]]
        return out
    if hasattr(p, "tolist"):
        p = p.tolist()
    if isinstance(p, (list, tuple)):
        return {"prompt_token_ids": [operator.index(t) for t in p]}
    raise TypeError(f"LLM.generate: a prompt must be a str, a list of token ids or a dict with "
                    f"'prompt' or 'prompt_token_ids', got {type(p).__name__}")


def _prompt_list(prompts) -> list:
    """A single prompt (text, dict, or one list of token ids) or a list of them."""
    if hasattr(prompts, "tolist") and not isinstance(prompts, (str, dict)):
        prompts = prompts.tolist()  # a NumPy array or a torch tensor of token ids
    if isinstance(prompts, (str, dict)) or _is_token_ids(prompts):
        return [prompts]
    if isinstance(prompts, (list, tuple)):
        return list(prompts)
    raise TypeError(f"LLM.generate: prompts must be a prompt or a list of prompts, got "
                    f"{type(prompts).__name__}")


def _logprobs(entries) -> Optional[List[Dict[int, Logprob]]]:
    if entries is None:
        return None
    out = []
    for e in entries:
        ranks = {alt["token_id"]: r for r, alt in enumerate(e["top"], 1)}
        step = {e["token_id"]: Logprob(e["logprob"], ranks.get(e["token_id"]), e["decoded_token"])}
        for r, alt in enumerate(e["top"], 1):
            step.setdefault(alt["token_id"], Logprob(alt["logprob"], r, alt["decoded_token"]))
        out.append(step)
    return out


def _request_output(request_id: str, r: dict) -> RequestOutput:
    outputs = [
        CompletionOutput(
            index=o["index"],
            text=o["text"],
            token_ids=o["token_ids"],
            cumulative_logprob=o["cumulative_logprob"],
            logprobs=_logprobs(o["logprobs"]),
            finish_reason=o["finish_reason"] or None,
            stop_reason=o["stop_reason"],
        )
        for o in r["outputs"]
    ]
    return RequestOutput(request_id=request_id, prompt=r["prompt"],
                         prompt_token_ids=r["prompt_token_ids"], outputs=outputs,
                         num_cached_tokens=r["num_cached_tokens"])


def _json_default(o):
    """NumPy (and other) integer and float scalars in prompts or SamplingParams."""
    if hasattr(o, "__index__"):
        return operator.index(o)
    if hasattr(o, "__float__"):
        return float(o)
    raise TypeError(f"LLM.generate: a {type(o).__name__} cannot be sent to the library")


def _take_string(ptr: ctypes.c_void_p) -> str:
    """The text of a string the library returned, which is then freed."""
    try:
        return ctypes.string_at(ptr.value).decode("utf-8")
    finally:
        function("braid_free_string")(ptr)


class _Tokenizer:
    """The model's tokenizer (LLM.get_tokenizer()): encode and decode, as Hugging Face's."""

    def __init__(self, llm: "LLM"):
        self._llm = llm

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self._llm._tokenize(text, add_special_tokens)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._llm._detokenize(token_ids, skip_special_tokens)


class LLM:
    """A model folder loaded into braidinfer's serving engine.

    model: a Hugging Face folder (config.json, safetensors, tokenizer.json). device: "cpu",
    "cuda", "cuda:N" or "auto" (CUDA when usable). The other options size the engine; None keeps
    the library's default (dtype: f32 on the CPU, the checkpoint's 16-bit type on CUDA;
    max_model_len: the model's context, at most 8192; num_kv_pages: pages of 16 tokens, else
    sized from gpu_memory_utilization on CUDA or max_num_seqs contexts on the CPU).
    quantize="fp8" quantizes a 16-bit checkpoint's linear layers to fp8 with 128 x 128 block
    scales at load (info["weights"] then says "fp8_blocks").
    enforce_eager=True is vLLM's spelling of cuda_graphs=False. seed makes the requests that
    bring no seed of their own repeat from run to run.
    tensor_parallel_size=N splits the model over N ranks (on CUDA the GPUs from the device's on,
    over NCCL; on the CPU threads), enable_expert_parallel=True a MoE model's routed experts whole
    over them (vLLM's spellings; info["tensor_parallel_size"] and info["expert_parallel"] say
    what runs).
    """

    def __init__(self, model: Union[str, os.PathLike], *, device: str = "auto",
                 dtype: str = "auto", quantize: Optional[str] = None,
                 max_model_len: Optional[int] = None,
                 max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None,
                 gpu_memory_utilization: Optional[float] = None,
                 num_kv_pages: Optional[int] = None,
                 enable_prefix_caching: Optional[bool] = None,
                 cuda_graphs: Optional[bool] = None, enforce_eager: Optional[bool] = None,
                 seed: Optional[int] = None, tensor_parallel_size: Optional[int] = None,
                 enable_expert_parallel: Optional[bool] = None):
        self._handle = None  # first: __del__ must find it even if the rest fails
        self._lock = threading.Lock()
        self._next_request = 0
        if enforce_eager is not None:
            if cuda_graphs is not None and cuda_graphs == enforce_eager:
                raise ValueError("LLM: enforce_eager and cuda_graphs contradict each other")
            cuda_graphs = not enforce_eager
        options = {
            "device": device, "dtype": dtype, "quantize": quantize, "max_model_len": max_model_len,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "gpu_memory_utilization": gpu_memory_utilization, "num_kv_pages": num_kv_pages,
            "enable_prefix_caching": enable_prefix_caching, "cuda_graphs": cuda_graphs,
            "seed": seed, "tensor_parallel_size": tensor_parallel_size,
            "enable_expert_parallel": enable_expert_parallel,
        }
        options = {k: v for k, v in options.items() if v is not None}
        handle = ctypes.c_void_p()
        check(function("braid_llm_create")(os.fsencode(model), json.dumps(options).encode(),
                                           ctypes.byref(handle)))
        self._handle = handle
        self._info = json.loads(self._call_string("braid_llm_info"))

    # ---- lifetime ----

    def close(self) -> None:
        """Frees the engine and its memory; the LLM cannot be used afterwards. Idempotent."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                function("braid_llm_destroy")(handle)

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Interpreter shutdown may have torn down what close() needs: never raise from here.
        try:
            self.close()
        except Exception:
            pass

    def _call_string(self, name: str, *args) -> str:
        """Calls braid_llm_<name>(handle, *args, &out) and returns out's text."""
        if self._handle is None:
            raise BraidError(Status.INVALID_ARGUMENT, "LLM: this LLM has been closed")
        out = ctypes.c_void_p()
        check(function(name)(self._handle, *args, ctypes.byref(out)))
        return _take_string(out)

    # ---- what it runs ----

    @property
    def info(self) -> dict:
        """device, dtype, weights (dense, fp8_blocks or fp8_per_channel), architecture,
        max_model_len, vocab_size, num_kv_pages, page_size, eos_token_ids, has_tokenizer,
        tensor_parallel_size, expert_parallel."""
        return dict(self._info)

    @property
    def max_model_len(self) -> int:
        return self._info["max_model_len"]

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer(self)

    def _tokenize(self, text: str, add_special_tokens: bool) -> List[int]:
        with self._lock:
            return json.loads(self._call_string("braid_llm_tokenize", text.encode("utf-8"),
                                                int(bool(add_special_tokens))))

    def _detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool) -> str:
        ids = [operator.index(t) for t in token_ids]
        for i, t in enumerate(ids):
            if not -2**31 <= t < 2**31:
                raise ValueError(f"detokenize: token_ids[{i}] = {t} is not a 32-bit token id")
        array = (ctypes.c_int32 * len(ids))(*ids)
        with self._lock:
            return self._call_string("braid_llm_detokenize", array, len(ids),
                                     int(bool(skip_special_tokens)))

    # ---- generation ----

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: bool = False) -> List[RequestOutput]:
        """Runs every prompt to completion and returns one RequestOutput per prompt, in order.

        prompts: a str, a list of token ids, a dict {"prompt": str} or {"prompt_token_ids":
        [...]}, or a list of these. sampling_params: one SamplingParams for all, or a list with
        one per prompt (None: SamplingParams()). use_tqdm is accepted for vLLM compatibility and
        ignored (the whole batch is one library call)."""
        del use_tqdm
        items = _prompt_list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(items)
        else:
            params = list(sampling_params)
            if len(params) != len(items):
                raise ValueError(f"LLM.generate: {len(params)} SamplingParams for "
                                 f"{len(items)} prompts; give one, or one per prompt")
            for i, p in enumerate(params):
                if not isinstance(p, SamplingParams):
                    raise TypeError(f"LLM.generate: sampling_params[{i}] is a "
                                    f"{type(p).__name__}, not a SamplingParams")
        requests = [{**_prompt_fields(p), **sp._to_request()} for p, sp in zip(items, params)]
        text = json.dumps(requests, ensure_ascii=False, default=_json_default).encode("utf-8")
        with self._lock:
            results = json.loads(self._call_string("braid_llm_generate", text))
            first = self._next_request
            self._next_request += len(results)
        return [_request_output(str(first + i), r) for i, r in enumerate(results)]
