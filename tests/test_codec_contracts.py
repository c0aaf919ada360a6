"""Contracts of the codec and the format records that the broader sweeps leave unpinned.

Each expected value here comes from a spec rule or a hand derivation, never from the code under test:

- an unsigned scale format without subnormals has no zero, so every positive input below its
  smallest value encodes to that value (module docstring of `minifp8.codec`, the E8M0 rule
  "values below 2^-127 give 2^-127", applied to a format with mantissa bits), in `encode_scalar`
  as in `encode`, and its ``min_subnormal`` is that smallest value;
- codes are uint8 and decode returns float32, so a format needs 1 to 8 bits and values that
  IEEE 754 binary32 holds (multiples of 2^-149, below 2^128): the bias range is checked at both
  edges, and for a format without subnormals it is the spacing of its lowest binade, not its
  smallest value, that must reach 2^-149;
- decode refuses codes below 0 as it refuses codes from 2^bits up;
- inputs are float16/32/64 or integers with |x| <= 2^53 (DESIGN.md section 3): a long double is
  refused (casting it to float64 first would round twice), the inclusive limit 2^53 is not called
  out of range, and a range error names a value that is out of range;
- the float32 computations (tensor scaling, NVFP4) keep the |x| <= 2^53 rule for integers, which
  a direct cast to float32 would round without a word;
- a format has a non-empty name, and `formats.get_list` gives each format once, in order of first
  mention.
"""
import numpy as np
import pytest

from minifp8 import codec, formats, mx, scaling

# An E8M0-style scale format with 7 mantissa bits and bias 0 (field layout, OCP MX v1.0 section 5.4
# widened): exponent field 0 holds [1, 2) in steps of 2**-7, field 1 holds [2, 4) but for the
# all-ones magnitude 0xFF (NaN). Its smallest value is 1.0, code 0x00; it has no zero.
UNSIGNED_WITH_MANTISSA = formats.FloatFormat("E1M7u", 1, 7, 0, signed=False, has_subnormals=False)


@pytest.mark.parametrize("rounding", ["nearest_even", "nearest_away", "toward_zero"])
def test_an_unsigned_format_without_zero_gives_its_smallest_value_to_everything_below_it(rounding):
    tiny = np.array([2.0**-126, 2.0**-20, 0.25, 0.5, 0.75, 0.99, 1 - 2.0**-20])
    for x in (tiny, tiny.astype(np.float32)):
        assert codec.encode(x, UNSIGNED_WITH_MANTISSA, rounding=rounding).tolist() == [0x00] * len(x)
    assert [codec.encode_scalar(float(v), UNSIGNED_WITH_MANTISSA, rounding) for v in tiny] == [0x00] * len(tiny)
    # with random bits that would carry any discarded fraction up, the floor still applies
    bits = np.full(tiny.shape, 255, np.uint8)
    assert codec.encode(tiny, UNSIGNED_WITH_MANTISSA, rounding="stochastic", random_bits=bits).tolist() == [0x00] * 7
    assert [codec.encode_scalar(float(v), UNSIGNED_WITH_MANTISSA, "stochastic", random_bits=255, random_bit_count=8)
            for v in tiny] == [0x00] * len(tiny)
    assert codec.decode(np.uint8(0x00), UNSIGNED_WITH_MANTISSA) == 1.0


def test_min_subnormal_is_the_smallest_positive_value_also_without_subnormals():
    # "Smallest positive value" (the property's docstring): for the format above that is 1.0, not
    # 2**-7, the spacing of its lowest binade; for E8M0 (DESIGN.md section 2) 2**-127.
    assert UNSIGNED_WITH_MANTISSA.min_subnormal == 1.0 == UNSIGNED_WITH_MANTISSA.min_normal
    assert formats.get("E8M0").min_subnormal == 2.0**-127


def test_a_format_wider_than_8_bits_is_refused():
    # codes are stored in uint8: an E5M3 (9 bits, bias 15, well inside float32) does not fit
    with pytest.raises(ValueError, match="codes are stored in uint8: a format needs 1 to 8 bits, got 9"):
        formats.FloatFormat("E5M3", 5, 3, 15)
    assert formats.FloatFormat("E5M2x", 5, 2, 15, has_infinity=True, nan_style="ieee").bits == 8


# E4M3-shaped (E4M3's top field holds numbers): bias 148 puts the smallest subnormal at
# 2**(1 - 148 - 3) = 2**-150, below float32's 2**-149; bias -113 puts the max at
# 1.75 * 2**(15 + 113) = 1.75 * 2**128, beyond float32's 2**128. Their neighbours 147 and -112 fit.
@pytest.mark.parametrize("bias", [148, -113])
def test_the_bias_range_stops_exactly_where_float32_stops(bias):
    with pytest.raises(ValueError, match=r"float32 cannot hold: bias must lie in \[-112, 147\]"):
        formats.FloatFormat("X", 4, 3, bias)
    # the neighbours inside the range are accepted and decode to finite non-zero float32s
    inside = formats.FloatFormat("X", 4, 3, 147 if bias > 0 else -112)
    values = codec.decode(np.arange(1, 0x7F, dtype=np.uint8), inside)
    assert np.isfinite(values).all() and (values > 0).all()


@pytest.mark.parametrize("codes", [np.array([-1, 3], np.int8), np.array([5, -256], np.int64),
                                   np.array([[0], [-7]], np.int16)])
def test_decode_refuses_negative_codes(codes):
    with pytest.raises(ValueError, match=r"E4M3 codes lie in \[0, 256\), got values in \[-"):
        codec.decode(codes, "E4M3")


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here")
def test_long_double_input_is_refused_rather_than_rounded_twice():
    # 1.0625 + 2**-60 is nearer E4M3's 1.125 than 1.0; through float64 (ulp 2**-52) it becomes the tie
    # 1.0625, which goes to even 1.0. The codec promises one rounding, so it refuses the dtype.
    x = np.array([1.0625], np.longdouble) + np.longdouble(2) ** -60
    assert x[0] != np.longdouble(1.0625) and np.float64(x[0]) == 1.0625
    with pytest.raises(TypeError, match="x must hold float16, float32, float64 or integer values, got dtype"):
        codec.encode(x, "E4M3")


def test_the_integer_limit_2_pow_53_is_inclusive_for_object_arrays_too():
    # An object array of in-range ints is a dtype problem (TypeError), not a range error that claims
    # |x| <= 2**53 is violated.
    with pytest.raises(TypeError, match="got dtype object"):
        codec.encode(np.array([2**53, -(2**53)], dtype=object), "E4M3")


def test_an_integer_range_error_names_a_value_that_is_out_of_range():
    # by magnitude: the negative giant, not the small positive number beside it
    with pytest.raises(ValueError, match=r"\|x\| <= 2\*\*53 to convert exactly, got -1208925819614629174706176$"):
        codec.encode(np.array([3, -(2**80)], dtype=object), "E4M3")
    # not the first element, which is fine
    with pytest.raises(ValueError, match=r"\|x\| <= 2\*\*53 to convert exactly, got 9007199254740993$"):
        codec.encode(np.array([1, -5, 2**53 + 1, 7], np.int64), "E4M3")


def test_the_float32_computations_refuse_integers_beyond_2_pow_53_too():
    # float32 rounds 2**53 + 1 to 2**53 silently; the input rule is the codec's, whatever the path
    too_large = np.array([1, 2**53 + 1], np.int64)
    for compute in (scaling.quantize_current, lambda x: mx.quantize_nvfp4(np.resize(x, 16))):
        with pytest.raises(ValueError, match=r"\|x\| <= 2\*\*53 to convert exactly, got 9007199254740993$"):
            compute(too_large)
    assert scaling.quantize_current(np.array([1, 2**53], np.int64)).amax == 2.0**53  # the limit itself is fine


def test_a_format_needs_a_non_empty_name():
    with pytest.raises(TypeError, match="name must be a non-empty str, got str ''"):
        formats.FloatFormat("", 4, 3, 7)


def test_get_list_names_each_format_once_in_order_of_first_mention():
    spellings = ["e5m2", "E4M3", "float8_e5m2", "fp8_e4m3", "torch.float8_e5m2", formats.get("E2M1")]
    assert formats.get_list(spellings) == [formats.get("E5M2"), formats.get("E4M3"), formats.get("E2M1")]
    assert formats.get_list(formats.get("E8M0")) == [formats.get("E8M0")]


# An unsigned E1M7 without subnormals (E8M0-style): its lowest binade is (1 + m/128) * 2**-bias,
# spaced 2**(-bias - 7) apart, so float32 (down to 2**-149) holds it exactly up to bias 142. Bias
# 143-149 put only the spacing, not the smallest value, below 2**-149: the check must look at
# the spacing, or decode collapses neighbouring codes and the round trip breaks.
@pytest.mark.parametrize("bias", [143, 149])
def test_a_format_without_subnormals_needs_float32_to_hold_its_finest_spacing(bias):
    with pytest.raises(ValueError, match=r"float32 cannot hold: bias must lie in \[-126, 142\]"):
        formats.FloatFormat("U", 1, 7, bias, signed=False, has_subnormals=False)
    limit = formats.FloatFormat("U", 1, 7, 142, signed=False, has_subnormals=False)
    codes = np.arange(255, dtype=np.uint8)  # 0xFF is NaN
    values = codec.decode(codes, limit)
    assert values[0] == 2.0**-142 and values[1] - values[0] == 2.0**-149  # by the definition above
    np.testing.assert_array_equal(codec.encode(values, limit), codes)
