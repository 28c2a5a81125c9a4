"""Rotary inverse frequencies as Hugging Face transformers computes them
(_compute_default_rope_parameters, _compute_llama3_parameters, _compute_yarn_parameters in
modeling_rope_utils.py), written independently of braid's C++ in plain numpy, for the tests of
both test_ops_numpy.py and test_ops_torch.py.

Scaling dicts use config.json's keys: {"rope_type": "llama3", "factor": 8.0, "low_freq_factor":
1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192} or {"rope_type": "yarn",
"factor": 4.0, "original_max_position_embeddings": 4096, ...}.
"""

import math

import numpy as np


def default_inv_freq(theta, dim):
    # transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in float32
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (1.0 / (np.float32(theta) ** exponents)).astype(np.float32)


def llama3_inv_freq(theta, dim, s):
    inv_freq = default_inv_freq(theta, dim).astype(np.float64)
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are divided by factor, short ones kept, the band between interpolated.
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn_get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(theta, dim, s):
    """Returns (inv_freq, attention_factor)."""
    factor = s["factor"]
    old_len = s["original_max_position_embeddings"]
    attention_factor = s.get("attention_factor")
    mscale, mscale_all_dim = s.get("mscale"), s.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = _yarn_get_mscale(factor, mscale) / _yarn_get_mscale(
                factor, mscale_all_dim)
        else:
            attention_factor = _yarn_get_mscale(factor)
    beta_fast = s.get("beta_fast") or 32
    beta_slow = s.get("beta_slow") or 1

    def correction_dim(rotations):
        return dim * math.log(old_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    pos_freqs = np.float32(theta) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))
    interpolation, extrapolated = 1.0 / (factor * pos_freqs), 1.0 / pos_freqs
    inv_freq = interpolation * (1 - extrapolation) + extrapolated * extrapolation
    return inv_freq.astype(np.float32), float(attention_factor)


def inv_freq_and_scaling(theta, dim, scaling=None):
    """(inv_freq [dim/2] float32, attention_scaling) for a config.json rope_scaling dict."""
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "default":
        return default_inv_freq(theta, dim), 1.0
    if kind == "llama3":
        return llama3_inv_freq(theta, dim, scaling), 1.0
    if kind == "yarn":
        return yarn_inv_freq(theta, dim, scaling)
    raise ValueError(kind)


def braid_config(theta, rotary_dim, scaling=None):
    """The braidinfer.RopeConfig equivalent to (theta, rotary_dim, rope_scaling dict)."""
    import braidinfer

    s = scaling or {}
    kind = s.get("rope_type", "default")
    cfg = braidinfer.RopeConfig(theta=theta, rotary_dim=rotary_dim,
                                scaling="none" if kind == "default" else kind)
    for key, field in [("factor", "factor"), ("low_freq_factor", "low_freq_factor"),
                       ("high_freq_factor", "high_freq_factor"),
                       ("original_max_position_embeddings", "original_max_position"),
                       ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow"),
                       ("mscale", "mscale"), ("mscale_all_dim", "mscale_all_dim"),
                       ("attention_factor", "attention_factor"), ("truncate", "truncate")]:
        if key in s:
            setattr(cfg, field, s[key])
    return cfg


# Scalings the tests sweep: Llama 3.1's, and YaRN as Qwen / DeepSeek configs use it.
SCALINGS = {
    "default": None,
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
    "yarn_mscale": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707,
                    "truncate": False},
}
