"""attention_mla (multi-head latent attention, absorbed form, paged latent cache) through braidinfer:

* on numpy arrays (CPU), against the contract's formula written in numpy; runs anywhere
  libbraid.so is built (no GPU, no torch):  /usr/bin/python3 -m pytest -q python/tests -k mla
* on CUDA torch tensors (bf16), against the same formula in torch; skips without torch, a CUDA
  device or a CUDA build of libbraid.so.
"""

import math

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402
from numeric import rel_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("library")

# (heads, r, dr, page_size, [(q_len, kv_len), ...])
CONFIGS = [
    (4, 16, 8, 4, [(6, 37), (13, 13), (1, 20), (0, 5)]),  # chunked prefill, prompt, decode
    (16, 64, 32, 16, [(1, 1), (1, 300), (1, 1000)]),  # decode: the keys split on CUDA
    (2, 512, 64, 64, [(3, 70), (1, 129)]),  # DeepSeek-V2/V3's r, dr
]
CONFIG_IDS = [f"h{c[0]}_r{c[1]}_dr{c[2]}_page{c[3]}" for c in CONFIGS]


def make_batch(rng, heads, r, dr, page_size, seqs, dtype=np.float32):
    """Queries and per-sequence rows, the rows scattered into shuffled pages (unowned slots NaN)."""
    total_q = sum(q for q, _ in seqs)
    pages = [-(-kv // page_size) for _, kv in seqs]
    num_pages = sum(pages) + 2
    max_pages = max(pages) + 1
    q_latent = rng.uniform(-1, 1, (total_q, heads, r)).astype(dtype)
    q_rope = rng.uniform(-1, 1, (total_q, heads, dr)).astype(dtype)
    cache = np.full((num_pages, page_size, 1, r + dr), np.nan, dtype)
    table = np.full((len(seqs), max_pages), -1, np.int32)
    order = rng.permutation(num_pages)
    rows, used = [], 0
    for b, (_, kv) in enumerate(seqs):
        c = rng.uniform(-1, 1, (kv, r + dr)).astype(dtype)
        rows.append(c)
        for j in range(kv):
            if j % page_size == 0:
                table[b, j // page_size] = order[used]
                used += 1
            cache[table[b, j // page_size], j % page_size, 0] = c[j]
    cu = np.zeros(len(seqs) + 1, np.int32)
    cu[1:] = np.cumsum([q for q, _ in seqs])
    kv_lens = np.array([kv for _, kv in seqs], np.int32)
    return q_latent, q_rope, cu, cache, table, kv_lens, rows


def mla_ref(q_latent, q_rope, seqs, rows, scale, causal):
    """The contract in float64: per token and head, softmax over the visible rows of
    (q_latent . c[:r] + q_rope . c[r:]) * scale, weighting the rows' latent parts."""
    r = q_latent.shape[2]
    out = np.zeros(q_latent.shape, np.float64)
    lse = np.zeros(q_latent.shape[:2], np.float64)
    t = 0
    for (q_len, kv_len), c in zip(seqs, rows):
        c = c.astype(np.float64)
        for i in range(q_len):
            visible = kv_len - q_len + i + 1 if causal else kv_len
            k = c[:visible]
            s = (q_latent[t].astype(np.float64) @ k[:, :r].T
                 + q_rope[t].astype(np.float64) @ k[:, r:].T) * scale  # [heads, visible]
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            out[t] = (p @ k[:, :r]) / p.sum(axis=1, keepdims=True)
            lse[t] = m[:, 0] + np.log(p.sum(axis=1))
            t += 1
    return out, lse


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads,r,dr,page_size,seqs", CONFIGS, ids=CONFIG_IDS)
def test_attention_mla(seed, heads, r, dr, page_size, seqs, causal):
    rng = np.random.default_rng(seed)
    q_latent, q_rope, cu, cache, table, kv_lens, rows = make_batch(rng, heads, r, dr, page_size,
                                                                   seqs)
    scale = 1.0 / math.sqrt(r + dr)
    out, lse = bi.attention_mla(q_latent, q_rope, cu, cache, table, kv_lens, scale, causal=causal,
                                return_lse=True)
    out_ref, lse_ref = mla_ref(q_latent, q_rope, seqs, rows, scale, causal)
    assert out.shape == q_latent.shape and out.dtype == np.float32
    assert rel_error(out, out_ref) <= 1e-5
    assert np.abs(lse - lse_ref).max() <= 1e-5


def test_attention_mla_workspace_floats():
    assert bi.attention_mla_workspace_floats(1, 128, 512, 8192) > 0
    assert bi.attention_mla_workspace_floats(1024, 128, 512, 8192) == 0  # a prefill chunk


def test_attention_mla_errors():
    rng = np.random.default_rng(0)
    q_latent, q_rope, cu, cache, table, kv_lens, _ = make_batch(rng, 2, 16, 8, 4, [(2, 5)])
    with pytest.raises(BraidError) as e:
        bi.attention_mla(q_latent, q_rope, cu, cache[..., :20], table, kv_lens, 0.1)
    assert e.value.status == Status.SHAPE and "argument 'cache'" in e.value.message
    kv_lens[0] = 1  # fewer keys than its 2 queries
    with pytest.raises(BraidError) as e:
        bi.attention_mla(q_latent, q_rope, cu, cache, table, kv_lens, 0.1)
    assert e.value.status == Status.INVALID_ARGUMENT and "argument 'kv_lens'" in e.value.message


# ---- torch, on CUDA --------------------------------------------------------------------------


@pytest.mark.parametrize("heads,r,dr,page_size,seqs", CONFIGS[1:], ids=CONFIG_IDS[1:])
def test_attention_mla_cuda(cuda, seed, heads, r, dr, page_size, seqs):
    import torch

    rng = np.random.default_rng(seed)
    q_latent, q_rope, cu, cache, table, kv_lens, rows = make_batch(rng, heads, r, dr, page_size,
                                                                   seqs)

    def bf16(a):
        return torch.from_numpy(a).to(cuda, torch.bfloat16)

    dev = [bf16(q_latent), bf16(q_rope), torch.from_numpy(cu).to(cuda), bf16(cache),
           torch.from_numpy(table).to(cuda), torch.from_numpy(kv_lens).to(cuda)]
    scale = 1.0 / math.sqrt(r + dr)
    out, lse = bi.attention_mla(*dev, scale, return_lse=True)
    torch.cuda.synchronize()
    # The reference sees the same bf16-rounded inputs.
    rounded = [x.float().cpu().numpy() for x in (dev[0], dev[1])]
    rows = [torch.from_numpy(c).to(torch.bfloat16).float().numpy() for c in rows]
    out_ref, lse_ref = mla_ref(rounded[0], rounded[1], seqs, rows, scale, True)
    assert rel_error(out.float().cpu().numpy(), out_ref) <= 1e-2
    assert rel_error(lse.cpu().numpy(), lse_ref) <= 1e-5
