"""Error measures shared by the numpy-based tests."""

import math

import numpy as np


def rel_error(got, ref):
    """‖got − ref‖ / ‖ref‖ in float64; inf if anything is NaN."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if np.isnan(got).any() or np.isnan(ref).any():
        return math.inf
    den = np.linalg.norm(ref)
    num = np.linalg.norm(got - ref)
    return num / den if den > 0 else num
