"""fp8 (e4m3) weights for the tests, written from the format's definition: the 256 codes' values,
rounding to e4m3, 128 x 128 block-quantized random weights (numpy and torch) and their
dequantization. Shared by test_moe_fp8.py, test_moe_experts_extras.py and test_ops_torch.py;
torch is imported only by weights_torch."""

import numpy as np

BLOCK = 128


def e4m3_values():
    """The 256 e4m3 (fn) codes as float64: sign bit, 4 exponent bits (bias 7), 3 mantissa bits;
    0x7F and 0xFF are NaN."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, (codes & 7) / 8.0
    v = np.where(exponent == 0, mantissa * 2.0**-6, (1 + mantissa) * 2.0 ** (exponent - 7.0))
    v = np.where(codes & 0x80, -v, v)
    v[(codes & 0x7F) == 0x7F] = np.nan
    return v


E4M3 = e4m3_values()


def e4m3_round(v):
    """v rounded to the nearest e4m3 value, ties to even (np.round), saturated at +-448."""
    v = np.clip(v.astype(np.float64), -448.0, 448.0)
    exponent = np.floor(np.log2(np.maximum(np.abs(v), 2.0**-6)))  # subnormals: 2^-6's spacing
    step = 2.0 ** (exponent - 3)
    return np.round(v / step) * step


def e4m3_codes(values):
    """The codes of e4m3 values (codes 0x00..0x7E hold 0..448 in increasing order)."""
    idx = np.searchsorted(E4M3[:127], np.abs(values))
    return (idx | np.where(np.signbit(values), 0x80, 0)).astype(np.uint8)


def block_weights(rng, experts, n, k):
    """randn / sqrt(k) weights quantized per 128 x 128 block (s = amax / 448): (codes, scales)."""
    w = (rng.standard_normal((experts, n // BLOCK, BLOCK, k // BLOCK, BLOCK)) / np.sqrt(k))
    w = w.astype(np.float32)
    w *= (2.0 ** rng.uniform(-2, 2, (experts, n // BLOCK, 1, k // BLOCK, 1))).astype(np.float32)
    scale = (np.abs(w).max(axis=(2, 4)) / np.float32(448)).astype(np.float32)
    codes = e4m3_codes(e4m3_round(w / scale[:, :, None, :, None]))
    return codes.reshape(experts, n, k), scale


def dequantize_weights(codes, scale):
    """[..., R, C] codes times their 128 x 128 block's scale ([..., R/128, C/128]), in float64."""
    per_element = np.repeat(np.repeat(scale.astype(np.float64), BLOCK, axis=-2), BLOCK, axis=-1)
    return E4M3[codes] * per_element


def weights_torch(gen, experts, n, k):
    """block_weights in torch: (float8_e4m3fn codes [E, n, k], float32 scales), on the CPU."""
    import torch

    w = torch.randn((experts, n // BLOCK, BLOCK, k // BLOCK, BLOCK), generator=gen) / k**0.5
    scale = w.abs().amax(dim=(2, 4)) / 448
    q = (w / scale[:, :, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.reshape(experts, n, k), scale
