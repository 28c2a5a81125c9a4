#!/usr/bin/env python3
"""Trains the embedded default model, models/tiny-fortunes: a byte-level BPE tokenizer and a tiny
LlamaForCausalLM trained from scratch on the English text of Debian's fortune cookie packages.

Three steps; the first runs where the Debian packages are installed, the other two on the GPU
machine (torch, transformers, tokenizers):

    apt-get install -y fortunes fortunes-min fortune-mod
    python3 tools/train_tiny_model.py prepare            # -> .cache/train-text/ (gitignored)
    python3 tools/train_tiny_model.py train --seconds 210  # tokenizer + model + golden
    python3 tools/train_tiny_model.py golden             # only the golden/samples, again
    python3 tools/train_tiny_model.py readme             # only README.md (needs no torch)

The training text is a build-time input only; the engine never needs it.
"""
import argparse
import glob
import json
import math
import os
import random
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TEXT_DIR = os.path.join(ROOT, ".cache", "train-text")
MODEL_DIR = os.path.join(ROOT, "models", "tiny-fortunes")
FORTUNES = "/usr/share/games/fortunes"
SKIP_FILES = {"ascii-art"}  # pictures, not prose

EOT = "<|endoftext|>"
# The model was trained on plain text, not on conversations: its chat template only joins the
# messages' contents, with no markers and an empty generation prompt, so the server's chat
# endpoint can be exercised on it (the reply continues the last message's text).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
# The Llama-3 pre-tokenizer split (letters, 1-3 digit groups, punctuation runs, whitespace),
# followed by a byte-level mapping without its own regex: the same tokenizer.json shape as the
# Llama-3 and Qwen tokenizers the engine reads.
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 4096
SEQ = 256
PROMPTS = ["The meaning of life is", "A fool", "Love"]
NEW_TOKENS = 48


# ---------------------------------------------------------------------------------- prepare
def prepare(args):
    """Splits each fortune file on its '%' lines into documents, one JSON string a line."""
    files = sorted(p for p in glob.glob(os.path.join(args.fortunes, "*"))
                   if os.path.exists(p + ".dat") and os.path.basename(p) not in SKIP_FILES)
    if not files:
        sys.exit(f"no fortune files in {args.fortunes}: apt-get install fortunes fortunes-min")
    os.makedirs(args.text, exist_ok=True)
    docs, sources = [], []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        doc, count = [], 0
        for line in lines + ["%"]:
            if line.strip() == "%":
                text = "\n".join(doc).strip("\n")
                if text.strip():
                    docs.append(text)
                    count += 1
                doc = []
            else:
                doc.append(line.rstrip())
        sources.append(f"{os.path.basename(path)}\t{count}")
    with open(os.path.join(args.text, "documents.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(args.text, "SOURCES.txt"), "w") as f:
        f.write(f"# from {args.fortunes} (Debian fortunes, fortunes-min)\n# file\tdocuments\n")
        f.write("\n".join(sources) + "\n")
    chars = sum(len(d) for d in docs)
    print(f"prepare: {len(docs)} documents, {chars} characters from {len(files)} files "
          f"-> {args.text}")


def load_documents(text_dir):
    with open(os.path.join(text_dir, "documents.jsonl")) as f:
        return [json.loads(line) for line in f]


# --------------------------------------------------------------------------------- tokenizer
def train_tokenizer(docs, out_dir):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer)
    eot_id = tok.token_to_id(EOT)

    # Let transformers write tokenizer.json + tokenizer_config.json in the form it reads back.
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT,
                                   model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    back = AutoTokenizer.from_pretrained(out_dir)
    for text in PROMPTS + ["Hello,  world!\n\tIt's 2024 -- café"]:
        ids, hf_ids = tok.encode(text).ids, back(text)["input_ids"]
        # Not fatal (the model is still worth training), but the lead must hear of it.
        if hf_ids != ids:
            print(f"WARNING: transformers encodes {text!r} as {hf_ids}, tokenizers as {ids}")
        if back.decode(ids) != text:
            print(f"WARNING: round trip of {text!r} gives {back.decode(ids)!r}")
    print(f"tokenizer: vocab {tok.get_vocab_size()}, {EOT} = {eot_id}, "
          f"files {sorted(os.listdir(out_dir))}")
    return tok, eot_id


# ------------------------------------------------------------------------------------ model
def model_config(vocab, eot_id):
    from transformers import LlamaConfig
    # ~4M parameters: 8 MB in bf16 with the embedding tied to the output head.
    return LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=688,
                       num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=512, rms_norm_eps=1e-5, hidden_act="silu",
                       tie_word_embeddings=True, initializer_range=0.02,
                       bos_token_id=eot_id, eos_token_id=eot_id)


def train(args):
    import torch
    import torch.nn.functional as F
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    docs = load_documents(args.text)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    tok, eot_id = train_tokenizer(docs, args.out)

    # One stream: each document followed by <|endoftext|>, in a shuffled order.
    order = list(range(len(docs)))
    random.shuffle(order)
    stream = []
    for i, enc in zip(order, tok.encode_batch([docs[i] for i in order])):
        stream += enc.ids + [eot_id]
    data = torch.tensor(stream, dtype=torch.long, device="cuda")
    print(f"data: {len(docs)} documents, {len(stream)} tokens "
          f"({sum(map(len, docs)) / len(stream):.2f} chars/token), "
          f"tokenizer {time.time() - t0:.0f}s")

    cfg = model_config(tok.get_vocab_size(), eot_id)
    model = LlamaForCausalLM(cfg).cuda().train()
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=True)

    def batch():
        starts = torch.randint(0, len(stream) - SEQ - 1, (args.batch,), device="cuda")
        idx = starts[:, None] + torch.arange(SEQ + 1, device="cuda")[None, :]
        w = data[idx]
        return w[:, :-1], w[:, 1:]

    # The cosine schedule needs a step count: measure the step time first, then fit the budget.
    warmup, total, step, start, ema = 100, None, 0, time.time(), None
    while total is None or step < total:
        if step == 10:  # the first steps pay for CUDA start-up: time from here
            torch.cuda.synchronize()
            t10 = time.time()
        if total is None and step == 60:
            torch.cuda.synchronize()
            per_step = (time.time() - t10) / 50
            total = max(step + 1, int((args.seconds - (t10 - start)) / per_step))
            print(f"{per_step * 1e3:.1f} ms/step -> {total} steps "
                  f"({total * args.batch * SEQ / len(stream):.0f} epochs)")
        progress = step / total if total else 0.0
        cosine = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))  # ends at a tenth
        lr = args.lr * min(1.0, (step + 1) / warmup) * cosine
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == total:
            value = loss.item()
            ema = value if ema is None else 0.9 * ema + 0.1 * value
            if step % 500 == 0 or step == total:
                print(f"step {step}/{total} loss {value:.3f} (ema {ema:.3f}) lr {lr:.2e} "
                      f"{time.time() - start:.0f}s")
    seconds = time.time() - start

    model = model.to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(bos_token_id=eot_id, eos_token_id=eot_id,
                                               do_sample=False)
    model.save_pretrained(args.out)
    info = {"steps": step, "batch": args.batch, "seq": SEQ, "tokens_seen": step * args.batch * SEQ,
            "stream_tokens": len(stream), "documents": len(docs), "final_loss_ema": round(ema, 4),
            "train_seconds": round(seconds), "parameters": params, "lr": args.lr,
            "seed": args.seed}
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"saved {args.out}: {sorted(os.listdir(args.out))}")
    golden(args)


# ----------------------------------------------------------------------------------- golden
def generate(model, tokenizer, ids, device):
    import torch
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                             max_new_tokens=NEW_TOKENS, output_logits=True,
                             return_dict_in_generate=True)
    tokens = out.sequences[0, len(ids):].tolist()
    steps = torch.stack([l[0].float().cpu() for l in out.logits])
    top = torch.topk(steps, 2, dim=-1).values
    gaps = (top[:, 0] - top[:, 1]).tolist()
    return tokens, gaps


def golden(args):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.out)
    ref = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32).eval()
    low = None
    if torch.cuda.is_available():
        low = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.bfloat16).cuda().eval()
    cases = []
    for prompt in PROMPTS + args.extra_prompts:
        ids = tokenizer(prompt)["input_ids"]
        tokens, gaps = generate(ref, tokenizer, ids, "cpu")
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        case = {"prompt": prompt, "prompt_ids": ids, "tokens": tokens, "text": text,
                "top2_gap": [float(f"{g:.4e}") for g in gaps]}
        print(f"\n--- {prompt!r} (fp32, CPU): {prompt}{text}")
        if low is not None:
            b_tokens, _ = generate(low, tokenizer, ids, "cuda")
            same = next((i for i, (a, b) in enumerate(zip(tokens, b_tokens)) if a != b),
                        min(len(tokens), len(b_tokens)))
            case["tokens_bf16_cuda"] = b_tokens
            case["bf16_equal_prefix"] = same
            print(f"--- {prompt!r} (bf16, CUDA, first {same} tokens equal): "
                  f"{prompt}{tokenizer.decode(b_tokens, skip_special_tokens=True)}")
        if prompt in PROMPTS:
            cases.append(case)
    result = {
        "about": "greedy decoding with transformers; prompts encoded without BOS; 'tokens' "
                 "(new tokens only, generation stops at <|endoftext|>) from the model in float32 "
                 "on the CPU; top2_gap: top-1 minus top-2 logit at each step",
        "max_new_tokens": NEW_TOKENS,
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOT),
        "cases": cases,
    }
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    write_readme(args, result)


def write_readme(args, result=None):
    """README.md of the model folder, from the files in it (needs no torch)."""
    def read(name):
        path = os.path.join(args.out, name)
        return json.load(open(path)) if os.path.exists(path) else {}
    result = result or read("golden.json")
    info, cfg = read("training.json"), read("config.json")
    sources = os.path.join(args.text, "SOURCES.txt")
    files = "?"
    if os.path.exists(sources):
        files = ", ".join(l.split("\t")[0] for l in open(sources) if not l.startswith("#"))
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    samples = "\n".join(f"- *{c['prompt']}*{c['text']}".replace("\n", " ").replace("\t", " ")
                        for c in result["cases"])
    text = f"""# tiny-fortunes

The embedded default model: a {info.get('parameters', 0) / 1e6:.1f}M-parameter `LlamaForCausalLM`
({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, {cfg['num_attention_heads']} query
heads and {cfg['num_key_value_heads']} KV heads of {cfg['head_dim']}, intermediate
{cfg['intermediate_size']}, tied embeddings, context {cfg['max_position_embeddings']}, bfloat16,
{size / 1e6:.1f} MB) with its own byte-level BPE tokenizer (vocab {cfg['vocab_size']};
`<|endoftext|>` = {result['eos_token_id']} is BOS and EOS; the Llama-3 split regex, then
ByteLevel; no BOS is added when encoding), both trained from scratch by
`tools/train_tiny_model.py`.

**Chat template** (`chat_template` in `tokenizer_config.json`): deliberately trivial, since the
model never saw a conversation: each message's content, one after the other, with no role
markers and an empty generation prompt (`{CHAT_TEMPLATE}`). It exists so the
server's chat endpoint and `braidinfer generate --chat` can be tested on this model; the reply
continues the text of the last message.

**Training text**: the fortune cookie files of the Debian packages `fortunes` and `fortunes-min`
(`/usr/share/games/fortunes`; copyright and licence in `/usr/share/doc/fortunes/copyright`),
each split on its `%` lines into documents, joined with `<|endoftext|>`:
{info.get('documents', '?')} documents, {info.get('stream_tokens', '?')} tokens.
Files: {files}.

**Training**: AdamW (peak lr {info.get('lr')}, betas 0.9/0.95, weight decay 0.1), linear warm-up
then cosine to a tenth, bf16 autocast, batches of {info.get('batch')} x {info.get('seq')} tokens,
{info.get('steps')} steps ({info.get('tokens_seen')} tokens, {info.get('train_seconds')} s on one
H100), seed {info.get('seed')}; final training loss {info.get('final_loss_ema')} (moving average;
the model has largely memorised its small corpus). `training.json` holds these numbers.

**golden.json**: the greedy continuations transformers gives (at most
{result['max_new_tokens']} new tokens, stopping at `<|endoftext|>`; model in float32 on the CPU;
prompt ids as the tokenizer encodes them), with the top-1/top-2 logit gap of every step and the
bf16 CUDA tokens. The engine must reproduce `tokens` exactly.

{samples}
"""
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="fortune files -> documents.jsonl")
    p.add_argument("--fortunes", default=FORTUNES)
    p.add_argument("--text", default=TEXT_DIR)
    for name in ("train", "golden", "readme"):
        p = sub.add_parser(name)
        p.add_argument("--text", default=TEXT_DIR)
        p.add_argument("--out", default=MODEL_DIR)
        p.add_argument("--seconds", type=float, default=210.0, help="training time budget")
        p.add_argument("--batch", type=int, default=64)
        p.add_argument("--lr", type=float, default=2e-3)
        p.add_argument("--seed", type=int, default=1234)
        p.add_argument("--extra-prompts", nargs="*", default=[
            "The best way to", "Computers are", "Why did the chicken"])
    args = ap.parse_args()
    {"prepare": prepare, "train": train, "golden": golden, "readme": write_readme}[args.cmd](args)


if __name__ == "__main__":
    main()
