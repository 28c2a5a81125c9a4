"""The PyTorch 2 features some tests compare against, and a skip that names the missing one.

With an older torch (Debian 12 ships 1.13) those tests must skip, saying which feature and which
version they need, not fail with AttributeError: the rest of the suite still runs on that torch.
Both features arrived in PyTorch 2.1 (F.scaled_dot_product_attention itself in 2.0, but without
the scale= argument the references pass).
"""

import re

import pytest

try:
    import torch as _installed
except ImportError:
    _installed = None

FEATURES = {
    "sdpa": "F.scaled_dot_product_attention with scale= (PyTorch >= 2.1)",
    "float8": "the float8 dtypes torch.float8_e4m3fn / float8_e5m2 (PyTorch >= 2.1)",
}


def _version(torch):
    """(major, minor) of a torch.__version__ such as '2.5.1+cu124' or '1.13.0a0+gitunknown'."""
    m = re.match(r"(\d+)\.(\d+)", getattr(torch, "__version__", ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _has(feature, torch):
    if _version(torch) < (2, 1):
        return False
    if feature == "sdpa":
        return hasattr(torch.nn.functional, "scaled_dot_product_attention")
    if feature == "float8":
        return hasattr(torch, "float8_e4m3fn")
    raise ValueError(f"unknown feature {feature!r}")


def missing(feature, torch=_installed):
    """None when `torch` has the feature, else why not (for the skip message)."""
    if torch is None:
        return "torch is not installed"
    if _has(feature, torch):
        return None
    return f"needs {FEATURES[feature]}; torch {torch.__version__} is installed"


def require(feature, torch=_installed):
    """Skips the calling test unless `torch` has the feature."""
    why = missing(feature, torch)
    if why is not None:
        pytest.skip(why)
