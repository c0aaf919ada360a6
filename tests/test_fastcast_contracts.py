"""Contracts of the fast casts (minifp8.fastcast) and their cast points (minifp8.fp8) that the
other test files left unpinned.

- Statistics of a float64 ``mxfp8`` cast with NaN blocks: ``saturation_count`` counts every element
  of a NaN block once (OCP MX v1.0 section 6.3: a block holding NaN or Inf decodes to NaN, and a
  NaN output counts as saturated, `fastcast.CastStats`), never an element twice because its
  scaled input (NaN, Inf) also lies beyond max; checked against a count of mx.quantize's NaN
  outputs.
- Cast points under ``autograd.no_grad``: a block recipe casts only the forward operands of a GEMM
  (``x`` and ``w``), since no backward pass will want the columnwise copies (fp8.CastPoint: "Block
  recipes cast only what the backward pass needs").
- float64 input beyond float32's range: a ValueError under every recipe that works in float32
  (``current``, ``delayed``, ``blockwise``, and ``mxfp8``, whose block of 1e39 would dequantize
  to Inf), as fp8.fake_quantize documents; ``fp8`` and ``unit`` round float64 exactly (E4M3
  saturates to 448).
- ``FP8State.summary`` names no cast while a fraction is 0 (its docstring: "None while the
  fraction is 0"), even after casts that neither underflowed nor saturated.
"""
import numpy as np
import pytest

from minifp8 import fp8, mx, nn, scaling
from minifp8.autograd import Tensor, no_grad


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_float64_mx_nan_blocks_count_each_element_once(fmt):
    """Two blocks of 32 hold a NaN and an Inf: all 64 of their elements come out NaN, and exactly
    those 64 saturate (the other blocks hold 1.0: nothing beyond max, nothing underflows)."""
    x = np.ones((4, 64), np.float64)
    x[0, 3], x[2, 40] = np.nan, -np.inf
    values, stats = fp8.fake_quantize(x, "mxfp8", fmt)
    expected = mx.quantize(x, "MXFP8_" + fmt).dequantize()
    nan_outputs = int(np.count_nonzero(np.isnan(expected)))
    assert nan_outputs == 64
    np.testing.assert_array_equal(np.isnan(values), np.isnan(expected))
    assert stats.saturation_count == nan_outputs
    assert stats.underflow_count == 0


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_a_gemm_under_no_grad_casts_only_its_forward_operands(recipe):
    """With gradients off, a linear whose operands require grad still casts only x and w (the
    columnwise copies x_t, w_t serve backward GEMMs that will never run)."""
    rng = np.random.default_rng(5)
    layer = nn.Linear(64, 32, bias=False, rng=rng)
    state = fp8.apply_recipe(layer, recipe)
    x = Tensor(rng.standard_normal((16, 64)).astype(np.float32), requires_grad=True)
    with no_grad():
        layer(x)
    assert set(state.points["Linear"].stats) == {"x", "w"}


def test_summary_names_no_cast_while_nothing_underflows_or_saturates():
    """Values that E4M3 and E5M2 hold exactly (powers of two in range): every count is 0, so the
    summary's fractions are 0 and it names no cast point, though every role has been cast."""
    layer = nn.Linear(32, 16, bias=False, rng=np.random.default_rng(0))
    layer.weight.data = np.full((16, 32), 0.5, np.float32)
    state = fp8.apply_recipe(layer, "fp8")
    layer(Tensor(np.ones((4, 32), np.float32))).backward(np.full((4, 16), 0.25, np.float32))
    assert set(state.points["Linear"].stats) == {"x", "w", "grad"}
    assert state.summary() == {"max_underflow": 0.0, "max_underflow_at": None,
                               "max_saturation": 0.0, "max_saturation_at": None}


@pytest.mark.parametrize("recipe", ["current", "delayed", "mxfp8", "blockwise"])
def test_float64_beyond_float32_range_is_refused_where_the_cast_works_in_float32(recipe):
    """1e39 is finite in float64 and Inf in float32 (whose max is about 3.4e38)."""
    x = np.ones((2, 128))
    x[1, 5] = 1e39
    scaler = scaling.DelayedScaling("E4M3") if recipe == "delayed" else None
    with pytest.raises(ValueError, match="beyond float32's range"):
        fp8.fake_quantize(x, recipe, "E4M3", scaler=scaler)


def test_float64_beyond_float32_range_saturates_under_the_exact_naive_cast():
    """``fp8`` rounds float64 itself (codec.quantize): 1e39 lies beyond E4M3's max, 448, and saturates."""
    x = np.ones((2, 128))
    x[1, 5] = 1e39
    values, stats = fp8.fake_quantize(x, "fp8", "E4M3")
    assert values[1, 5] == 448 and stats.saturation_count == 1
