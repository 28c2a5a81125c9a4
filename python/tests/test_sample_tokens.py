"""sample_tokens through braidinfer:

* on numpy arrays (CPU): greedy rows are the argmax that skips NaN, top_k = 1 and tiny top_p are
  greedy, the frequencies over many steps are the renormalised kept distribution (computed here in
  float64), a seed and step give the same token, and bad arguments raise naming the argument;
* on CUDA torch tensors: the same token as the CPU on every row; skips without torch or a GPU.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402

pytestmark = pytest.mark.usefixtures("library")


def params(m, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, steps=None):
    return (np.full(m, temperature, np.float32), np.full(m, top_k, np.int32),
            np.full(m, top_p, np.float32), np.full(m, min_p, np.float32),
            np.full(m, seed, np.int64),
            np.arange(m, dtype=np.int64) if steps is None else np.asarray(steps, np.int64))


def random_logits(rng, m, vocab):
    x = rng.normal(0.0, 2.5, size=(m, vocab)).astype(np.float32)
    x[np.arange(m), rng.integers(0, vocab, size=m)] += 10.0  # a clear favourite per row
    return x


def kept_distribution(l, temperature, top_k, top_p, min_p):
    p = np.exp((l.astype(np.float64) - l.max()) / temperature)
    keep = p >= min_p
    if 0 < top_k < l.size:
        keep &= l >= np.sort(l)[::-1][top_k - 1]
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(np.where(keep, p, 0.0)[order])
        t = p[order][np.searchsorted(cum, top_p * cum[-1])]
        keep &= p >= t
    q = np.where(keep, p, 0.0)
    return q / q.sum()


def test_greedy_and_its_limits(seed):
    rng = np.random.default_rng(seed)
    x = random_logits(rng, 9, 1001)
    x[1, :5] = np.nan  # NaN never wins
    x[2, :] = -np.inf  # nothing finite: index 0
    tokens = bi.sample_tokens(x, *params(9, temperature=0.0))
    want = np.argmax(np.where(np.isnan(x), -np.inf, x), axis=-1)
    np.testing.assert_array_equal(tokens, want)
    assert tokens.dtype == np.int32 and tokens[2] == 0
    x[2, :] = random_logits(rng, 1, 1001)
    want = np.argmax(np.where(np.isnan(x), -np.inf, x), axis=-1)
    np.testing.assert_array_equal(bi.sample_tokens(x, *params(9, top_k=1, seed=seed % 2**63)), want)
    np.testing.assert_array_equal(bi.sample_tokens(x, *params(9, top_p=1e-6)), want)


@pytest.mark.parametrize("temperature,top_k,top_p,min_p",
                         [(1.0, 0, 1.0, 0.0), (0.7, 5, 1.0, 0.0), (1.5, 0, 0.8, 0.0),
                          (2.0, 12, 0.9, 0.02)], ids=["plain", "top_k", "top_p", "all"])
def test_frequencies(temperature, top_k, top_p, min_p):
    rng = np.random.default_rng(1)
    row = rng.normal(0.0, 1.5, size=30).astype(np.float32)
    n = 20000
    x = np.repeat(row[None, :], n, axis=0)
    tokens = bi.sample_tokens(x, *params(n, temperature, top_k, top_p, min_p, seed=3))
    want = kept_distribution(row, temperature, top_k, top_p, min_p)
    got = np.bincount(tokens, minlength=row.size) / n
    assert np.all(got[want == 0] == 0)
    sigma = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(got - want) <= 5 * sigma + 1e-3), (got, want)


def test_same_seed_and_step_same_token(seed):
    rng = np.random.default_rng(seed)
    x = random_logits(rng, 16, 500)
    p = params(16, temperature=1.3, top_p=0.95, seed=seed % 2**63)
    a = bi.sample_tokens(x, *p)
    np.testing.assert_array_equal(bi.sample_tokens(x, *p), a)
    # One row alone gives the token it gets in the batch.
    for r in range(16):
        one = [v[r:r + 1] for v in p]
        assert bi.sample_tokens(x[r:r + 1], *one)[0] == a[r]


def test_errors():
    x = np.zeros((2, 8), np.float32)
    expect = [Status.INVALID_ARGUMENT, ["sample_tokens", "argument 'top_p'", "top_p[1]"]]
    t, k, p, mp, s, st = params(2)
    p[1] = 0.0
    with pytest.raises(BraidError) as e:
        bi.sample_tokens(x, t, k, p, mp, s, st)
    assert e.value.status == expect[0]
    assert all(f in e.value.message for f in expect[1]), e.value.message
    with pytest.raises(BraidError) as e:
        bi.sample_tokens(x.astype(np.float16), *params(2))
    assert e.value.status == Status.DTYPE and "argument 'logits'" in e.value.message
    with pytest.raises(BraidError) as e:
        bi.sample_tokens(x, *params(3))
    assert e.value.status == Status.SHAPE and "argument 'temperature'" in e.value.message
    assert bi.sample_tokens_workspace_bytes(256, 151936) == 0
    with pytest.raises(BraidError) as e:
        bi.sample_tokens_workspace_bytes(1, 0)
    assert "argument 'vocab'" in e.value.message


def test_cuda_matches_cpu(cuda, seed):
    import torch
    rng = np.random.default_rng(seed)
    m, vocab = 24, 151936
    x = random_logits(rng, m, vocab)
    t = rng.choice([0.0, 0.6, 1.0, 1.4], size=m).astype(np.float32)
    k = rng.choice([0, -1, 1, 20, 1000], size=m).astype(np.int32)
    p = rng.choice([1.0, 0.9, 0.5], size=m).astype(np.float32)
    mp = rng.choice([0.0, 0.0, 0.05], size=m).astype(np.float32)
    s = rng.integers(0, 2**63 - 1, size=m, dtype=np.int64)
    st = rng.integers(0, 1000, size=m, dtype=np.int64)
    want = bi.sample_tokens(x, t, k, p, mp, s, st)
    dev = [torch.from_numpy(a).to(cuda) for a in (x, t, k, p, mp, s, st)]
    got = bi.sample_tokens(*dev)
    torch.cuda.synchronize()
    assert got.dtype == torch.int32 and got.device == cuda
    np.testing.assert_array_equal(got.cpu().numpy(), want)
