"""Edge contracts of block and tensor scaling that the main MX and scaling tests leave open.

Each test pins one rule, against the spec or docstring rule it comes from, worked independently
(by hand, in exact rationals, from the codec, or with `mx.quantize_block_reference`):

- MX packing (`MXArray.packed`): FP4 codes lie in [0, 16); code 16 is already refused.
- MX layout: a block wider than the cache-sized working slice (2**19 elements) is quantized and
  decoded whole.
- MX block amax is read exactly, to the last mantissa bit, from float32 and float64 input.
- `mx.quantize_block_reference` refuses bools (not numbers of a block), as a clear TypeError.
- `scaling.DelayedScaling` margin range for a format whose maximum is a power of two:
  ``margin < emax``, because margin ``emax`` can make ``scale_inv`` overflow.
- `scaling.ScaledTensor` refuses tiles of more than one row over codes that are not 2-d.
"""
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import codec, formats, mx, scaling


# ================================================================================================
# MX block quantization.
# ================================================================================================
def test_packed_fp4_refuses_code_16_the_smallest_code_wider_than_a_nibble():
    # A nibble holds 0..15. Code 16 (0b1_0000) ORed into a high nibble would spill into the next
    # byte's bits; the smallest such code must already be refused.
    q = mx.quantize(np.ones((2, 4), np.float32), "E2M1")
    codes = q.codes.copy()
    codes[0, 1] = 16
    array = mx.MXArray(q.scales, codes, formats.E2M1, 32, -1, q.shape)
    with pytest.raises(ValueError, match=r"E2M1 codes lie in \[0, 16\), got 16 at index \(0, 1\)"):
        array.packed()
    codes[0, 1] = 15  # the largest code that fits is packed: codes[0, 0] low, 15 in the high nibble
    assert mx.MXArray(q.scales, codes, formats.E2M1, 32, -1, q.shape).packed()[0, 0] == (15 << 4) | codes[0, 0]


def test_a_block_wider_than_the_working_slice_is_quantized_and_decoded_whole():
    # One row of 2**20 elements as one block (wider than the 2**19-element slices quantize and
    # dequantize work through). The OCP floor rule, worked here from frexp: amax 3 * 2**10 has
    # floor(log2) = 11, so shared_exp = 11 - emax(E4M3) = 3; the elements are encoded times 2**-3,
    # saturating.
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(2**20) * 100).astype(np.float32)
    x[12345] = -3 * 2**10
    x = np.clip(x, -3 * 2**10, 3 * 2**10)
    amax = float(np.abs(x).max())
    shared_exp = (np.frexp(amax)[1] - 1) - 8
    assert shared_exp == 3
    q = mx.quantize(x, "E4M3", block_size=2**20)
    assert q.scales.tolist() == [127 + shared_exp]
    np.testing.assert_array_equal(q.codes, codec.encode(x * np.float32(2.0**-shared_exp), "E4M3", saturate=True))
    np.testing.assert_array_equal(q.dequantize(), codec.decode(q.codes, "E4M3") * np.float32(2.0**shared_exp))


@pytest.mark.parametrize("dtype, mantissa_bits", [(np.float32, 23), (np.float64, 52)])
def test_block_amax_is_read_to_the_last_mantissa_bit(dtype, mantissa_bits):
    # amax = 2**k * (1 + 2**-m): the next float after a power of two. Under "ceil" the shared
    # exponent is ceil(log2 amax) - emax = k + 1 - 8 (E4M3); a power of two would give k - 8.
    # The smaller elements of the block have both signs.
    for k in (-20, 0, 30):
        amax = dtype(2.0**k) * (1 + dtype(2.0**-mantissa_bits))
        block = np.array([amax / 3, -amax / 5, amax, -amax / 7] * 8, dtype)
        assert block[2] != 2.0**k
        q = mx.quantize(block, "E4M3", scale_mode="ceil")
        assert q.scales.tolist() == [127 + k + 1 - 8]
        assert q.scales[0] == mx.quantize_block_reference(block, "E4M3", scale_mode="ceil")[0]


@pytest.mark.parametrize("value", [True, np.bool_(False)])
def test_block_reference_refuses_bool_values(value):
    with pytest.raises(TypeError, match="block values must be floats, ints or Fractions, got bool"):
        mx.quantize_block_reference([1.0, value], "E4M3")


# ================================================================================================
# Scaling recipes.
# ================================================================================================
def test_delayed_scaling_margin_stops_below_emax_when_the_format_maximum_is_a_power_of_two():
    # A signed E3M0 (no mantissa bits, bias 3, no NaN) has max 2**4 = 16, emax 4. With margin 4,
    # fp8_max * 2**-margin = 1 and amax FLT_MAX gives scale = float32(1 / FLT_MAX): 1 / FLT_MAX is
    # 2**-128 * (1 + 2**-24 + ...), which rounds to 2**-128 on float32's subnormal grid (spacing
    # 2**-149); its inverse, 2**128, overflows float32. So margin 4 is refused, margin 3 is the limit.
    fmt = formats.FloatFormat("E3M0", 3, 0, 3, nan_style="none")
    assert fmt.max == 16 and fmt.emax == 4
    flt_max = Fraction(float(np.finfo(np.float32).max))
    assert Fraction(float(np.float32(float(1 / flt_max)))) == Fraction(1, 2**128)
    with pytest.raises(ValueError, match=r"margin must lie in \[-123, 3\] for E3M0.*got 4"):
        scaling.DelayedScaling(fmt, margin=4)
    # margin 3: scale = float32(2 / FLT_MAX) = 2**-127 on the same grid, and its inverse 2**127 is finite
    recipe = scaling.DelayedScaling(fmt, margin=3)
    recipe.quantize(np.array([np.finfo(np.float32).max], np.float32))
    assert recipe.scale == np.float32(2.0**-127) and recipe.scale_inv == np.float32(2.0**127)


def test_scaled_tensor_refuses_multi_row_tiles_over_codes_that_are_not_2d():
    # (m, n) tiles with m > 1 take m rows along the other axis of a 2-d array; over 3-d codes there
    # is no single other axis. Even with scales of a plausible per-axis tile count, (1, 2, 2) for
    # codes (2, 3, 4) in 2x2 tiles along axis 2, the fields are refused.
    scale = np.ones((1, 2, 2), np.float32)
    with pytest.raises(ValueError, match=r"tiles of 2x2 need 2-d codes, got shape \(2, 3, 4\)"):
        scaling.ScaledTensor(np.zeros((2, 3, 4), np.uint8), scale, scale, scale, formats.E4M3,
                             granularity="block", axis=2, block_shape=(2, 2))
