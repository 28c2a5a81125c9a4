"""pytest setup: import braidinfer from this checkout (python/), and give each test fresh random
inputs whose seed is printed, so a failure can be reproduced."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import braidinfer  # noqa: E402


@pytest.fixture(scope="session")
def library():
    """The path of the libbraid.so under test; skips when none has been built."""
    try:
        return braidinfer.library_path()
    except OSError as e:
        pytest.skip(str(e))


@pytest.fixture
def seed():
    """A fresh seed per test, printed (pytest shows it with a failure's captured output)."""
    s = int.from_bytes(os.urandom(8), "little")
    print(f"seed {s}")
    return s


@pytest.fixture
def cuda():
    """The current CUDA device as a torch.device; skips without torch, without a device visible to
    PyTorch, or when libbraid.so sees none (a CPU-only build)."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    if braidinfer.cuda_device_count() == 0:
        pytest.skip(f"{braidinfer.library_path()} sees no CUDA device (a CPU-only build?)")
    return torch.device("cuda", torch.cuda.current_device())
