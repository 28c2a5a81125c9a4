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
