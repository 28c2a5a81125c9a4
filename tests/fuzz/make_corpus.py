#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/) from the real files of the
checkout: the golden checkpoints and configs (tests/data/goldens/, models/tiny-fortunes/), the
tokenizer goldens' strings, the chat templates and conversations (tests/data/chat/), and the npm
tokenizers in .cache/tokenizers/ (scripts/fetch-tokenizers.sh). Real files are cut down (tensors
to a few elements, vocabularies to a few hundred tokens) so the corpus stays small (a few hundred
KB) while keeping every field the loaders read. Deterministic: rerunning writes the same files.

    python3 tests/fuzz/make_corpus.py      # then commit tests/fuzz/corpus/
"""

import glob
import hashlib
import json
import os
import re
import shutil
import struct

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
GOLDENS = os.path.join(ROOT, "tests", "data", "goldens")
TINY = os.path.join(ROOT, "models", "tiny-fortunes")
NPM = os.path.join(ROOT, ".cache", "tokenizers")
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I32": 4, "I64": 8, "U8": 1}


def read(path, mode="r"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        return f.read()


def seed(target, name, data):
    """One seed file; the name says where it came from."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    folder = os.path.join(OUT, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def small_safetensors(path, keep=12):
    """The first `keep` tensors of a real checkpoint (names, dtypes, rank kept), each shrunk to
    at most 2 per dimension, packed back to back over data from the real file."""
    raw = read(path, "rb")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", None)
    out, data = {}, b""
    for name in sorted(header)[:keep]:
        e = header[name]
        shape = [min(d, 2) for d in e["shape"]]
        size = DTYPE_SIZE[e["dtype"]]
        for d in shape:
            size *= d
        out[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [len(data), len(data) + size]}
        begin = 8 + n + e["data_offsets"][0]
        data += raw[begin : begin + size]
    if meta is not None:
        out["__metadata__"] = meta
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)  # padded as the Python writer pads
    return struct.pack("<Q", len(text)) + text + data


def small_tokenizer(path, keep=300, added=40):
    """A real tokenizer.json with its normalizer, pre-tokenizer, post-processor, decoder and
    added tokens kept, and the BPE vocabulary cut to the first `keep` ids plus the merges that
    stay inside it."""
    t = json.loads(read(path))
    model = t["model"]
    vocab = {tok: i for tok, i in model["vocab"].items() if i < keep}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    t["added_tokens"] = t.get("added_tokens", [])[:added]
    return json.dumps(t, ensure_ascii=False)


def literals(*paths):
    """The string literals of C++ sources: the field names, types and keywords a parser looks
    for, which random mutation alone finds slowly."""
    words = set()
    for pattern in paths:
        for path in glob.glob(os.path.join(ROOT, pattern)):
            for m in re.finditer(r'"((?:[^"\\\n]|\\.){2,40})"', read(path)):
                if re.fullmatch(r"[A-Za-z0-9_.<|>{}%#/-]+", m.group(1)):
                    words.add(m.group(1))
    return words


# Numbers at the edges of the integer types, for sizes, offsets, shapes and ids.
EDGES = ["0", "-1", "1e308", "2147483647", "2147483648", "4294967296", "4294967313",
         "4611686018427387904", "9223372036854775807", "9223372036854775808",
         "18446744073709551615", "1.5", "-0.0", "null", "true", "[]", "{}"]


def write_dictionaries():
    """tests/fuzz/dict/TARGET.dict (libFuzzer's -dict): the words each parser looks for."""
    folder = os.path.join(ROOT, "tests", "fuzz", "dict")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    words = {
        "safetensors": literals("src/model/safetensors.cpp"),
        "config": literals("src/model/config.cpp"),
        "tokenizer_load": literals("src/tokenizer/load.cpp", "src/tokenizer/added_tokens.cpp"),
        "chat_template": literals("src/chat/jinja_*.cpp", "src/chat/chat_template.cpp"),
        "openai_request": literals("src/server/openai_request.cpp"),
        "prompt_ids": set(),
    }
    for target, ws in words.items():
        ws = sorted(ws | set(EDGES))
        with open(os.path.join(folder, target + ".dict"), "w", encoding="utf-8") as f:
            for w in ws:
                f.write('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"\n')


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    sample = "Hello world! <|endoftext|> Grüße, 你好 🎉\n\t  x=1+2 "

    # safetensors: every golden family and the tiny model, cut down.
    for path in sorted(glob.glob(os.path.join(GOLDENS, "*", "model.safetensors"))):
        seed("safetensors", os.path.basename(os.path.dirname(path)), small_safetensors(path))
    seed("safetensors", "tiny-fortunes", small_safetensors(os.path.join(TINY, "model.safetensors")))

    # config: config.json NUL generation_config.json, one per family, plus transformers-5 and
    # rope-scaling variants of the Llama one.
    dirs = sorted(glob.glob(os.path.join(GOLDENS, "*"))) + [TINY]
    for d in dirs:
        if not os.path.exists(os.path.join(d, "config.json")):
            continue
        gen = os.path.join(d, "generation_config.json")
        text = read(os.path.join(d, "config.json")) + ("\0" + read(gen) if os.path.exists(gen) else "")
        seed("config", os.path.basename(d), text)
    llama = json.loads(read(os.path.join(GOLDENS, "llama", "config.json")))
    for name, rope in [("llama3", {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
                       ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                                 "beta_fast": 32, "beta_slow": 1, "mscale": 1.0})]:
        seed("config", "llama-" + name, json.dumps(dict(llama, rope_scaling=rope)))
        t5 = {k: v for k, v in llama.items() if k not in ("rope_theta", "torch_dtype")}
        t5.update(dtype="bfloat16", rope_parameters=dict(rope, rope_theta=500000.0))
        seed("config", "llama-" + name + "-transformers5", json.dumps(t5))

    # tokenizer_load: the tiny model's and the npm tokenizers, cut down, NUL, a sample text.
    tokenizers = [("tiny-fortunes", os.path.join(TINY, "tokenizer.json"))]
    tokenizers += [(os.path.basename(d), os.path.join(d, "tokenizer.json"))
                   for d in sorted(glob.glob(os.path.join(NPM, "*")))]
    for name, path in tokenizers:
        if os.path.exists(path):
            seed("tokenizer_load", name, small_tokenizer(path) + "\0" + sample)

    # tokenizer_encode: the strings of the tokenizer goldens and the Unicode defect strings, one
    # file each (deduplicated), and every 16th of the sampled code-point strings.
    strings = {sample}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "tokenizer", "*.json"))):
        data = json.loads(read(path))
        strings.update(data.get("strings", []) if "goldens_" in path else data.get("strings", [])[::16])
        strings.update(data.get("defect_strings", []))
    for s in sorted(strings):
        if s:
            seed("tokenizer_encode", hashlib.sha1(s.encode()).hexdigest()[:12], s)

    # chat_template: every template with each conversation (NUL between).
    chat = os.path.join(ROOT, "tests", "data", "chat")
    conversations = json.loads(read(os.path.join(chat, "conversations.json")))
    names = sorted(conversations)
    for i, path in enumerate(sorted(glob.glob(os.path.join(chat, "templates", "*.jinja")))):
        conv = conversations[names[i % len(names)]]
        body = {"messages": conv["messages"], "add_generation_prompt": True}
        if "tools" in conv:
            body["tools"] = conv["tools"]
        seed("chat_template", os.path.basename(path)[: -len(".jinja")], read(path) + "\0" + json.dumps(body))

    # openai_request: bodies of both endpoints, with the fields the parser reads.
    bodies = {
        "completion-text": {"model": "tiny-fortunes", "prompt": "A fool", "max_tokens": 16,
                            "temperature": 0.7, "top_p": 0.9, "seed": 1, "stop": ["\n", "."]},
        "completion-ids": {"prompt": [[1, 2, 3], [317, 3119]], "max_tokens": 4, "n": 2, "logprobs": 3,
                           "echo": True, "stream": True, "stream_options": {"include_usage": True}},
        "completion-vllm": {"prompt": ["x", "y"], "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
                            "min_tokens": 2, "ignore_eos": True, "stop_token_ids": [0],
                            "skip_special_tokens": False, "include_stop_str_in_output": True,
                            "presence_penalty": 0.5, "frequency_penalty": -0.5, "return_token_ids": True,
                            "return_tokens_as_token_ids": True, "add_special_tokens": False},
        "chat-basic": {"model": "tiny-fortunes", "messages": conversations["multi_turn"]["messages"],
                       "max_completion_tokens": 32, "logprobs": True, "top_logprobs": 2},
        "chat-tools": {"messages": [{"role": "user", "content": "Weather?"}],
                       "tools": [{"type": "function", "function": {"name": "get_weather",
                                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                       "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": True},
        "chat-unicode": {"messages": conversations["unicode"]["messages"], "stream": True, "n": 1},
    }
    for name, body in bodies.items():
        seed("openai_request", name, json.dumps(body, ensure_ascii=False))

    # prompt_ids
    for name, text in {"three": "1,2,3", "max": "0,2147483647", "one": "317"}.items():
        seed("prompt_ids", name, text)

    write_dictionaries()

    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(OUT, "*", "*")))
    print(f"make_corpus: {len(glob.glob(os.path.join(OUT, '*', '*')))} seeds, {total // 1024} KB in {OUT}")


if __name__ == "__main__":
    main()
