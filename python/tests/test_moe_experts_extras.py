"""moe_experts' optional arguments through braidinfer on numpy arrays (CPU): fp8 experts (uint8
e4m3 codes with 128 x 128 block scales), DeepSeek's shared experts and the residual, against the
contract of include/braid/ops.h written here in float64 (with its roundings to x's dtype), and
the errors that name a wrong argument. The CUDA kernels behind the same call are tested on torch
tensors in test_ops_torch.py.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402
from fp8_weights import block_weights, dequantize_weights  # noqa: E402
from numeric import rel_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("library")


def r32(v):
    return v.astype(np.float32).astype(np.float64)


def silu(v):
    return v / (1.0 + np.exp(-v))


def mlp(x, gate_up, down):
    """One SwiGLU MLP in float64 on one row, g, u and h rounded to f32 (x's dtype here)."""
    inter = down.shape[1]
    g, u = r32(gate_up[:inter] @ x), r32(gate_up[inter:] @ x)
    return down @ r32(silu(g) * u)


def experts_ref(x, w, ids, gate_up, down, shared=None, residual=None):
    """The contract: routed = to_dtype(sum_j w[t, j] * y_j); with shared experts and a residual
    out = to_dtype(residual + to_dtype(routed + to_dtype(shared_mlp(x))))."""
    out = np.zeros(x.shape, dtype=np.float64)
    for t in range(x.shape[0]):
        xt = x[t].astype(np.float64)
        routed = sum(float(w[t, j]) * mlp(xt, gate_up[ids[t, j]], down[ids[t, j]])
                     for j in range(ids.shape[1]))
        moe = r32(routed)
        if shared is not None:
            moe = r32(moe + r32(mlp(xt, *shared)))
        out[t] = r32(moe + residual[t]) if residual is not None else moe
    return out


def routing(rng, tokens, experts, k):
    ids = np.stack([rng.permutation(experts)[:k] for _ in range(tokens)]).astype(np.int32)
    w = rng.uniform(0.1, 1.0, size=(tokens, k))
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32), ids


def fp8_experts(rng, experts, hidden, inter):
    """gate_up / down codes and their block scales (block_weights: products of O(1))."""
    gate_up, gu_scale = block_weights(rng, experts, 2 * inter, hidden)
    down, dn_scale = block_weights(rng, experts, hidden, inter)
    return gate_up, gu_scale, down, dn_scale


@pytest.mark.parametrize("tokens,experts,k", [(1, 8, 2), (5, 16, 4)])
def test_fp8_experts(seed, tokens, experts, k):
    rng = np.random.default_rng(seed)
    hidden, inter = 256, 128
    x = rng.uniform(-1, 1, size=(tokens, hidden)).astype(np.float32)
    w, ids = routing(rng, tokens, experts, k)
    gate_up, gu_scale, down, dn_scale = fp8_experts(rng, experts, hidden, inter)
    out = bi.moe_experts(x, w, ids, gate_up, down, gate_up_scale=gu_scale, down_scale=dn_scale)
    assert out.dtype == np.float32 and out.shape == x.shape
    ref = experts_ref(x, w, ids, dequantize_weights(gate_up, gu_scale),
                      dequantize_weights(down, dn_scale))
    assert rel_error(out, ref) <= 1e-5


def test_fp8_shared_experts_and_residual_in_place(seed):
    rng = np.random.default_rng(seed)
    tokens, experts, k, hidden, inter, shared = 3, 8, 2, 256, 128, 256  # two shared experts
    x = rng.uniform(-1, 1, size=(tokens, hidden)).astype(np.float32)
    residual = rng.uniform(-1, 1, size=(tokens, hidden)).astype(np.float32)
    w, ids = routing(rng, tokens, experts, k)
    gate_up, gu_scale, down, dn_scale = fp8_experts(rng, experts, hidden, inter)
    s_gate_up, s_gu_scale, s_down, s_dn_scale = (a[0] for a in fp8_experts(rng, 1, hidden, shared))
    ref = experts_ref(x, w, ids, dequantize_weights(gate_up, gu_scale),
                      dequantize_weights(down, dn_scale),
                      (dequantize_weights(s_gate_up, s_gu_scale),
                       dequantize_weights(s_down, s_dn_scale)),
                      residual.astype(np.float64))
    out = bi.moe_experts(x, w, ids, gate_up, down, out=residual, gate_up_scale=gu_scale,
                         down_scale=dn_scale, shared_gate_up=s_gate_up,
                         shared_gate_up_scale=s_gu_scale, shared_down=s_down,
                         shared_down_scale=s_dn_scale, residual=residual)
    assert out is residual  # in place
    assert rel_error(out, ref) <= 1e-5


def test_16bit_shared_experts_with_a_given_workspace(seed):
    rng = np.random.default_rng(seed)
    tokens, experts, k, hidden, inter, shared = 4, 6, 2, 64, 32, 64
    x = rng.uniform(-1, 1, size=(tokens, hidden)).astype(np.float32)
    w, ids = routing(rng, tokens, experts, k)
    gate_up = rng.uniform(-0.2, 0.2, size=(experts, 2 * inter, hidden)).astype(np.float32)
    down = rng.uniform(-0.2, 0.2, size=(experts, hidden, inter)).astype(np.float32)
    s_gate_up = rng.uniform(-0.2, 0.2, size=(2 * shared, hidden)).astype(np.float32)
    s_down = rng.uniform(-0.2, 0.2, size=(hidden, shared)).astype(np.float32)
    workspace = np.full((tokens * (k + shared // inter), inter), np.nan, dtype=np.float32)
    out = bi.moe_experts(x, w, ids, gate_up, down, workspace, shared_gate_up=s_gate_up,
                         shared_down=s_down)
    ref = experts_ref(x, w, ids, gate_up.astype(np.float64), down.astype(np.float64),
                      (s_gate_up.astype(np.float64), s_down.astype(np.float64)))
    assert rel_error(out, ref) <= 1e-5
    with pytest.raises(BraidError) as e:  # the routed experts' rows alone are too few
        bi.moe_experts(x, w, ids, gate_up, down, workspace[: tokens * k],
                       shared_gate_up=s_gate_up, shared_down=s_down)
    assert e.value.status == Status.SHAPE and "workspace" in str(e.value)


def test_errors_name_the_argument(seed):
    rng = np.random.default_rng(seed)
    tokens, experts, k, hidden, inter = 2, 4, 2, 128, 128
    x = rng.uniform(-1, 1, size=(tokens, hidden)).astype(np.float32)
    w, ids = routing(rng, tokens, experts, k)
    gate_up, gu_scale, down, dn_scale = fp8_experts(rng, experts, hidden, inter)
    cases = [
        # one scale without the other
        (dict(gate_up_scale=gu_scale), "down_scale"),
        # a scale of the wrong shape
        (dict(gate_up_scale=gu_scale[:, :1], down_scale=dn_scale), "gate_up_scale"),
        # a shared expert's down without its gate_up
        (dict(gate_up_scale=gu_scale, down_scale=dn_scale, shared_down=down[0],
              shared_down_scale=dn_scale[0]), "shared"),
        # a residual of the wrong shape
        (dict(gate_up_scale=gu_scale, down_scale=dn_scale, residual=x[:1]), "residual"),
    ]
    for kwargs, fragment in cases:
        with pytest.raises(BraidError) as e:
            bi.moe_experts(x, w, ids, gate_up, down, **kwargs)
        assert "moe_experts" in str(e.value) and fragment in str(e.value), (kwargs.keys(), e.value)
