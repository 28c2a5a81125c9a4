"""braidinfer.LLM (offline inference, vLLM's shape) on the embedded model, on the CPU: greedy output
equals the transformers golden, a batch equals its prompts one at a time, seeded sampling repeats,
logprobs have the right shape, and errors raise BraidError with the library's message."""

import gc
import json
import os

import pytest

from braidinfer import LLM, BraidError, RequestOutput, SamplingParams, Status

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "tiny-fortunes")
# 64 pages of 16 tokens: two full 512-token contexts, cheap to start.
CPU = dict(device="cpu", num_kv_pages=64)


@pytest.fixture(scope="module")
def llm(library):
    with LLM(MODEL, **CPU) as engine:
        yield engine


@pytest.fixture(scope="module")
def golden():
    with open(os.path.join(MODEL, "golden.json")) as f:
        return json.load(f)


def greedy(max_tokens=48, **kw):
    return SamplingParams(temperature=0, max_tokens=max_tokens, **kw)


def test_greedy_continuation_equals_the_golden(llm, golden):
    case = golden["cases"][0]
    assert case["prompt"] == "The meaning of life is"
    [out] = llm.generate(case["prompt"], greedy(48))
    assert isinstance(out, RequestOutput)
    assert out.prompt == case["prompt"]
    assert out.prompt_token_ids == case["prompt_ids"]
    [c] = out.outputs
    assert c.text == " a capacity.\n\t\t-- Gordon Light" == case["text"]
    assert c.token_ids == case["tokens"]
    assert c.token_ids[-1] == golden["eos_token_id"]
    assert c.finish_reason == "stop" and c.stop_reason is None and c.finished()
    assert c.index == 0 and c.logprobs is None and c.cumulative_logprob is None


def test_tensor_parallel_ranks_on_cpu_threads_give_the_golden(library, golden):
    # tiny-fortunes' 4 heads over 2 KV heads: split at 2 ranks, the KV heads replicated at 4.
    case = golden["cases"][0]
    for ranks in (2, 4):
        with LLM(MODEL, **CPU, tensor_parallel_size=ranks) as split:
            assert split.info["tensor_parallel_size"] == ranks
            assert split.info["expert_parallel"] is False
            [out] = split.generate(case["prompt"], greedy(48))
            assert out.outputs[0].token_ids == case["tokens"]


def test_every_golden_case_in_one_batch(llm, golden):
    cases = golden["cases"]
    outs = llm.generate([c["prompt"] for c in cases], greedy(golden["max_new_tokens"]))
    assert [o.prompt for o in outs] == [c["prompt"] for c in cases]
    for o, case in zip(outs, cases):
        assert o.outputs[0].token_ids == case["tokens"], case["prompt"]
        assert o.outputs[0].text == case["text"], case["prompt"]
        ended = case["tokens"][-1] == golden["eos_token_id"]
        assert o.outputs[0].finish_reason == ("stop" if ended else "length")
    assert len({o.request_id for o in outs}) == len(outs)


def test_a_batch_gives_what_each_prompt_gets_alone(llm):
    prompts = ["The meaning of life is", "A fool", {"prompt_token_ids": [2342]},
               "Love is", [317, 3119]]
    params = [greedy(20), SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=20),
              greedy(12, ignore_eos=True), SamplingParams(temperature=1.2, top_k=50, seed=3,
                                                          max_tokens=16, n=2),
              greedy(8, ignore_eos=True)]
    batch = llm.generate(prompts, params)
    alone = [llm.generate(p, sp)[0] for p, sp in zip(prompts, params)]
    for b, a in zip(batch, alone):
        assert b.prompt_token_ids == a.prompt_token_ids
        assert [(o.index, o.token_ids, o.text, o.finish_reason) for o in b.outputs] == \
               [(o.index, o.token_ids, o.text, o.finish_reason) for o in a.outputs]
    assert batch[2].prompt is None and batch[2].prompt_token_ids == [2342]
    assert batch[4].prompt_token_ids == [317, 3119]
    assert len(batch[3].outputs) == 2


def test_seeded_sampling_repeats_and_seeds_differ(llm):
    sp = SamplingParams(temperature=1.0, seed=1234, max_tokens=24, ignore_eos=True, n=3)
    first = llm.generate("Love", sp)[0].outputs
    again = llm.generate("Love", sp)[0].outputs
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert [o.index for o in first] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in first}) > 1, "choices draw different tokens"
    other = llm.generate("Love", SamplingParams(temperature=1.0, seed=99, max_tokens=24,
                                                ignore_eos=True, n=3))[0].outputs
    assert [o.token_ids for o in other] != [o.token_ids for o in first]


def test_the_llm_seed_makes_unseeded_requests_repeat(library):
    runs = []
    for _ in range(2):
        with LLM(MODEL, seed=5, **CPU) as engine:
            runs.append(engine.generate(["Love", "A fool"],
                                        SamplingParams(max_tokens=12, ignore_eos=True)))
    assert [o.outputs[0].token_ids for o in runs[0]] == [o.outputs[0].token_ids for o in runs[1]]


def test_logprobs_shape(llm):
    [out] = llm.generate("A fool", greedy(10, logprobs=3, ignore_eos=True))
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) == 10
    total = 0.0
    for token, step in zip(c.token_ids, c.logprobs):
        assert next(iter(step)) == token, "the sampled token comes first"
        assert len(step) == 3, "greedy: the sampled token is the first of the 3 alternatives"
        assert [lp.rank for lp in step.values()] == [1, 2, 3]
        values = [lp.logprob for lp in step.values()]
        assert values == sorted(values, reverse=True) and values[0] <= 0.0
        assert all(isinstance(lp.decoded_token, str) for lp in step.values())
        total += step[token].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-4)

    [sampled] = llm.generate("A fool", SamplingParams(seed=8, max_tokens=10, logprobs=0,
                                                      ignore_eos=True))
    for token, step in zip(sampled.outputs[0].token_ids, sampled.outputs[0].logprobs):
        assert list(step) == [token] and step[token].rank is None


def test_stop_strings_and_stop_tokens(llm):
    text = llm.generate("The meaning of life is", greedy(40))[0].outputs[0]
    stop = text.text[len(text.text) // 2:][:3]
    c = llm.generate("The meaning of life is", greedy(40, stop=["zzz", stop]))[0].outputs[0]
    assert c.text == text.text[:text.text.index(stop)]
    assert c.finish_reason == "stop" and c.stop_reason == stop
    c = llm.generate("The meaning of life is",
                     greedy(40, stop=stop, include_stop_str_in_output=True))[0].outputs[0]
    assert c.text == text.text[:text.text.index(stop) + len(stop)]
    c = llm.generate("The meaning of life is",
                     greedy(40, stop_token_ids=[text.token_ids[2]]))[0].outputs[0]
    assert c.token_ids == text.token_ids[:3] and c.stop_reason == text.token_ids[2]


def test_max_tokens_none_fills_the_context(llm):
    [out] = llm.generate([[300] * 500], greedy(None, ignore_eos=True))
    assert len(out.outputs[0].token_ids) == llm.max_model_len - 500
    assert out.outputs[0].finish_reason == "length"


def test_tokenizer_round_trip_and_info(llm, golden):
    tok = llm.get_tokenizer()
    case = golden["cases"][0]
    assert tok.encode(case["prompt"]) == case["prompt_ids"]
    assert tok.decode(case["tokens"]) == case["text"]
    assert tok.decode(case["tokens"], skip_special_tokens=False).endswith("<|endoftext|>")
    info = llm.info
    assert info["device"] == "cpu" and info["dtype"] == "f32" and info["max_model_len"] == 512
    assert info["num_kv_pages"] == 64 and info["eos_token_ids"] == [0]
    assert info["weights"] == "dense"


def expect_braid_error(fn, status, *fragments):
    with pytest.raises(BraidError) as e:
        fn()
    assert e.value.status == status
    for f in fragments:
        assert f in e.value.message, e.value.message
    return e.value


def test_bad_requests_raise_braid_error_with_the_message(llm):
    bad = Status.INVALID_ARGUMENT
    expect_braid_error(lambda: llm.generate("x", SamplingParams(temperature=-1)), bad,
                       "requests[0]", "temperature")
    expect_braid_error(lambda: llm.generate(["x", "y"], [greedy(), SamplingParams(top_p=0)]),
                       bad, "requests[1]", "top_p")
    expect_braid_error(lambda: llm.generate([[300] * 600], greedy(4)), bad,
                       "requests[0]", "600 tokens", "512")
    expect_braid_error(lambda: llm.generate([[1, 99999]], greedy(4)), bad, "99999", "vocabulary")
    expect_braid_error(lambda: llm.generate("x", SamplingParams(logprobs=50)), bad,
                       "requests[0].logprobs")
    expect_braid_error(lambda: llm.generate("", greedy()), bad, "empty")
    expect_braid_error(lambda: llm.generate({"prompt": 3}), bad, "requests[0].prompt")
    with pytest.raises(ValueError, match="3 SamplingParams for 2 prompts"):
        llm.generate(["a", "b"], [greedy()] * 3)
    with pytest.raises(ValueError, match="multi_modal_data"):
        llm.generate({"prompt": "a", "multi_modal_data": {}})
    with pytest.raises(TypeError):
        llm.generate(3.5)
    # Nothing ran, and the engine still serves.
    assert len(llm.generate("A fool", greedy(3))[0].outputs[0].token_ids) == 3
    assert llm.generate([]) == []


def test_bad_options_raise_braid_error(library):
    bad = Status.INVALID_ARGUMENT
    expect_braid_error(lambda: LLM(MODEL, device="tpu"), bad, "options.device", "tpu")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", max_model_len=100000), bad,
                       "max_model_len", "max_position_embeddings")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", num_kv_pages=3), bad,
                       "options.num_kv_pages")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", dtype="int8"), bad, "options.dtype")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", quantize="int4"), bad,
                       "options.quantize", "int4")
    # quantize="fp8" reaches the loader: tiny-fortunes' 688-row gate_proj does not stack in
    # 128-row fp8 blocks, and the error says so.
    expect_braid_error(lambda: LLM(MODEL, device="cpu", quantize="fp8"), Status.UNSUPPORTED,
                       "gate_proj.weight", "688 rows", "quantize fp8")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", tensor_parallel_size=0), bad,
                       "options.tensor_parallel_size")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", tensor_parallel_size=3), bad,
                       "num_attention_heads 4")
    expect_braid_error(lambda: LLM(MODEL, device="cpu", tensor_parallel_size=2,
                                   enable_expert_parallel=True), bad, "num_experts 0")
    expect_braid_error(lambda: LLM(os.path.join(ROOT, "no-such-model"), device="cpu"),
                       Status.IO, "no-such-model")
    with pytest.raises(ValueError, match="contradict"):
        LLM(MODEL, enforce_eager=True, cuda_graphs=True)


def test_close_context_manager_and_del(library):
    engine = LLM(MODEL, **CPU)
    engine.close()
    engine.close()  # idempotent
    expect_braid_error(lambda: engine.generate("x"), Status.INVALID_ARGUMENT, "closed")
    with LLM(MODEL, **CPU) as inner:
        assert inner.generate("A fool", greedy(2))[0].outputs[0].token_ids
    expect_braid_error(lambda: inner.get_tokenizer().encode("x"), Status.INVALID_ARGUMENT,
                       "closed")
    dropped = LLM(MODEL, **CPU)
    del dropped  # __del__ frees it
    gc.collect()


def test_numpy_prompts_and_parameters(llm):
    np = pytest.importorskip("numpy")
    ids = np.array([317, 3119, 290], dtype=np.int64)
    [one] = llm.generate(ids, greedy(np.int32(5), ignore_eos=True))
    assert one.prompt_token_ids == [317, 3119, 290] and len(one.outputs[0].token_ids) == 5
    two = llm.generate(np.stack([ids, ids]), SamplingParams(seed=np.int64(4), max_tokens=5,
                                                            temperature=np.float32(0.7)))
    assert len(two) == 2 and two[0].outputs[0].token_ids == two[1].outputs[0].token_ids
