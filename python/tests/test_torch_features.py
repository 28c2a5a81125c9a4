"""torch_features against stand-ins for old and new PyTorch: with Debian 12's torch 1.13, `make
test` failed 28 tests with AttributeError (F.scaled_dot_product_attention, torch.float8_e4m3fn)
instead of skipping them (issue 20). Those tests now call torch_features.require(), checked here
without needing either torch installed."""

import types

import pytest

import torch_features


def fake_torch(version, sdpa=True, float8=True):
    functional = types.SimpleNamespace()
    if sdpa:
        functional.scaled_dot_product_attention = lambda *a, **k: None
    t = types.SimpleNamespace(__version__=version, nn=types.SimpleNamespace(functional=functional))
    if float8:
        t.float8_e4m3fn = object()
    return t


def test_debian_torch_1_13_lacks_both():
    old = fake_torch("1.13.0a0+gitunknown", sdpa=False, float8=False)
    for feature in ("sdpa", "float8"):
        why = torch_features.missing(feature, old)
        assert why is not None and "1.13.0a0+gitunknown" in why and "2.1" in why


def test_torch_2_0_has_sdpa_without_scale():
    # 2.0 has the function but not its scale= argument, which the references pass.
    assert torch_features.missing("sdpa", fake_torch("2.0.1", float8=False)) is not None
    assert torch_features.missing("float8", fake_torch("2.0.1", float8=False)) is not None


def test_recent_torch_has_both():
    new = fake_torch("2.5.1+cu124")
    assert torch_features.missing("sdpa", new) is None
    assert torch_features.missing("float8", new) is None


def test_require_skips_naming_the_feature():
    with pytest.raises(pytest.skip.Exception, match="float8"):
        torch_features.require("float8", fake_torch("1.13.1", float8=False))
    torch_features.require("float8", fake_torch("2.4.0"))  # no skip


def test_no_torch_skips():
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        torch_features.require("sdpa", None)
