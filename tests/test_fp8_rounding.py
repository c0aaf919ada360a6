"""The arithmetic of the FP8 casts' fast path (minifp8.fastcast), proved against the codec.

A fast cast splits the elements of a tensor by the magnitude their tile's power-of-two scale gives
them: inside the format's normal range it rounds them in place (`fastcast._round_normal`,
Veltkamp's splitting), below it onto the subnormal grid (`fastcast._round_below_normal`; with a
scale per tile `fastcast._round_in_tiles`, on both sides of the range), beyond max's rounding
interval it saturates or overflows (`fastcast._round_beyond_max`); `fastcast._normal_range` draws the
lines; the block recipes fall back to the codec's table (`fastcast._round_into`). Each piece must
equal ``codec.quantize`` on its whole domain: structured sweeps here (every
float32 upper half with the lower halves that make exact ties, their neighbours and the ends of
the interval), every float32 under ``pytest -m slow``. tests/test_fp8.py holds the casts built
from them to the scaling.py and mx.py references.
"""
import math

import numpy as np
import pytest

from minifp8 import codec, fastcast, formats

FORMATS = ("E4M3", "E5M2")
LOW_HALVES = np.array([0, 1, 2, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF], np.uint32)


def structured_float32() -> np.ndarray:
    """Every float32 upper half, both signs, times the lower halves of LOW_HALVES."""
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    return (upper[:, None] | LOW_HALVES[None, :]).reshape(-1).view(np.float32)


def magnitude_bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32) & np.uint32(0x7FFF_FFFF)


def assert_same_bits(actual, expected):
    """Equal bit for bit (so -0.0 != 0.0), except that any NaN matches any NaN."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    np.testing.assert_array_equal(actual[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def round_normal(x: np.ndarray, fmt) -> np.ndarray:
    out = np.empty_like(x)
    fastcast._round_normal(np.ascontiguousarray(x), out, fmt, np.empty_like(out))
    return out


@pytest.mark.parametrize("name", FORMATS)
def test_normal_range_edges(name):
    """`_normal_range` at scale 1: min_normal is the first magnitude inside; the last one inside
    rounds to max, the first beyond does not; just below min_normal, rounding in place would be
    wrong. At scale 2**-k the bounds are these times 2**k: min_normal's raised to float32's
    smallest normal (k from -127, the smallest MX scale's, to 100, `_HUGE`'s)."""
    fmt = formats.get(name)
    lower, beyond = fastcast._normal_range(fmt, 0)
    assert lower == np.float32(fmt.min_normal).view(np.uint32)
    last_inside, first_beyond = np.array([beyond - 1, beyond], np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        assert codec.quantize(last_inside, fmt) == fmt.max
        assert not np.isfinite(codec.quantize(first_beyond, fmt))
    below = structured_float32()
    below = below[(magnitude_bits(below) < lower) & (magnitude_bits(below) >= lower - (1 << 23))]
    assert (round_normal(below, fmt) != codec.quantize(below, fmt)).any()

    exponents = np.arange(-127, 101, dtype=np.int32)
    lowers, beyonds = fastcast._normal_range(fmt, exponents)
    expected_lower = np.maximum(fmt.min_normal * np.exp2(exponents), 2.0**-126).astype(np.float32)
    expected_beyond = (np.float64(first_beyond) * np.exp2(exponents)).astype(np.float32)
    np.testing.assert_array_equal(lowers, expected_lower.view(np.uint32))
    np.testing.assert_array_equal(beyonds, expected_beyond.view(np.uint32))


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_in_place_equals_the_codec_in_every_binade(name):
    """`_round_normal` inside the normal range, both signs: at scale 1 against codec.quantize, and
    the same inputs times every power of two that keeps them within [2**-126, 2**100), where block
    casts with power-of-two scales round them in place, against codec.quantize times it."""
    fmt = formats.get(name)
    lower, beyond = fastcast._normal_range(fmt, 0)
    x = structured_float32()
    x = x[(magnitude_bits(x) >= lower) & (magnitude_bits(x) < beyond)]
    expected = codec.quantize(x, fmt, saturate=True)
    assert_same_bits(round_normal(x, fmt), expected)
    smallest = -126 - round(math.log2(fmt.min_normal))
    largest = 100 - math.ceil(math.log2(float(np.array([beyond], np.uint32).view(np.float32)[0])))
    for k in range(smallest, largest + 1):
        factor = np.float32(2.0**k)
        assert_same_bits(round_normal(x * factor, fmt), expected * factor)


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_below_normal_equals_the_codec(name):
    """`_round_below_normal` on every magnitude below min_normal, both signs: the format's
    subnormals, their ties, underflow to +-0, and float32's own subnormals."""
    fmt = formats.get(name)
    lower, _ = fastcast._normal_range(fmt, 0)
    x = structured_float32()
    x = x[magnitude_bits(x) < lower]
    assert_same_bits(fastcast._round_below_normal(x.copy(), fmt), codec.quantize(x, fmt, saturate=True))


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_in_tiles_equals_the_codec(name):
    """`_round_in_tiles` with a tile exponent k per element: a nonzero ``x`` below max's rounding
    interval of its tile is cast as ``x * 2**-k`` is (computed in float64, exactly), times
    ``2**k``: for tile exponents from the lowest that does not raise the bound (-120 for E4M3) up
    to 100, every magnitude below the tile's normal range (float32's subnormals and the products
    that underflow in float32 included) and inside it. It reports elements below the range exactly
    when there are some."""
    fmt = formats.get(name)
    x = structured_float32()
    x = x[magnitude_bits(x) != 0]
    lowest = fastcast._RAISED_BELOW[fmt.name]
    for k in sorted({lowest, lowest + 1, -64, -9, -1, 0, 1, 9, 64, 99, 100}):
        lower, beyond = fastcast._normal_range(fmt, k)
        for part in (x[magnitude_bits(x) < lower], x[(magnitude_bits(x) >= lower) & (magnitude_bits(x) < beyond)],
                     x[magnitude_bits(x) < beyond]):
            expected = (codec.quantize(part.astype(np.float64) * 2.0**-k, fmt, saturate=True) * 2.0**k).astype(np.float32)
            actual, below = fastcast._round_in_tiles(part, fmt, np.full(part.size, k, np.int32))
            assert_same_bits(actual, expected)
            assert below == bool((magnitude_bits(part) < lower).any())
    # exponents that differ element by element: each element on its own tile's grid
    rng = np.random.default_rng(0)
    part = x[magnitude_bits(x) < fastcast._normal_range(fmt, lowest)[1]]
    exponents = rng.integers(lowest, 101, part.size).astype(np.int32)
    part = (part * np.exp2((exponents - lowest).astype(np.float64))).astype(np.float32)  # (exact, below 2**100)
    expected = (codec.quantize(part.astype(np.float64) * np.exp2(-exponents.astype(np.float64)), fmt, saturate=True)
                * np.exp2(exponents.astype(np.float64))).astype(np.float32)
    assert_same_bits(fastcast._round_in_tiles(part, fmt, exponents)[0], expected)


@pytest.mark.parametrize("name, saturate", [("E4M3", True), ("E4M3", False), ("E5M2", True), ("E5M2", False)])
def test_rounding_beyond_max_equals_the_codec(name, saturate):
    """`_round_beyond_max` on every magnitude from the first beyond max's rounding interval up,
    Inf and NaN: +-max saturating, else +-Inf, or NaN in E4M3, which has no Inf (a review's find: it
    gave +-Inf there; the casts in training always saturate E4M3, so none met it)."""
    fmt = formats.get(name)
    _, beyond = fastcast._normal_range(fmt, 0)
    x = structured_float32()
    x = x[magnitude_bits(x) >= beyond]
    with np.errstate(invalid="ignore"):
        assert_same_bits(fastcast._round_beyond_max(x, fmt, saturate), codec.quantize(x, fmt, saturate=saturate))


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("saturate", [True, False])
def test_the_table_cast_equals_the_codec(name, saturate):
    """`_round_into`, the cast of the codec's table that the block recipes fall back to (a NaN, an Inf or
    a magnitude of 2**100 in the tensor), on the structured sweep: its table holds one value per
    float32 upper half for a nonzero lower half and one for a zero one (a review found no direct test)."""
    fmt = formats.get(name)
    x = structured_float32()
    out = np.empty_like(x)
    fastcast._round_into(x, out, fmt, saturate)
    with np.errstate(invalid="ignore", over="ignore"):
        assert_same_bits(out, codec.quantize(x, fmt, saturate=saturate))


@pytest.mark.slow
@pytest.mark.parametrize("name", FORMATS)
def test_all_float32_inputs_take_the_codec_value(name):
    """Every float32, each through the piece its magnitude selects at scale 1, equals codec.quantize."""
    fmt = formats.get(name)
    lower, beyond = fastcast._normal_range(fmt, 0)
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        magnitude = magnitude_bits(x)
        below, inside, above = magnitude < lower, (magnitude >= lower) & (magnitude < beyond), magnitude >= beyond
        with np.errstate(invalid="ignore", over="ignore"):
            expected = codec.quantize(x, fmt, saturate=True)
            if inside.any():
                assert_same_bits(round_normal(x[inside], fmt), expected[inside])
            if below.any():
                assert_same_bits(fastcast._round_below_normal(x[below], fmt), expected[below])
            if above.any():
                assert_same_bits(fastcast._round_beyond_max(x[above], fmt, True), expected[above])


def test_block_scale_rules_equal_their_references():
    """The block scales the fast path computes from amax bits: MX's shared exponents equal
    mx.shared_exponents in every scale mode (floor, ceil and rceil are spelled out there, and the
    blocks of ceil and rceil never saturate), blockwise's
    equal -log2 of scaling.scale_from_amax(power_of_2=True), and never take an amax past max (the
    exponent of one amax, as the largest tile's is taken, equals them too);
    for every float32 exponent field the fast path takes (finite amax below 2**100, zero and
    subnormals included), with mantissas at the edges that decide the rounding modes."""
    from minifp8 import mx, scaling

    fields = np.arange(0, 127 + 100, dtype=np.uint32) << np.uint32(23)
    mantissas = np.array([0, 1, 0x40_0000, 0x5F_FFFF, 0x60_0000, 0x60_0001, 0x70_0000, 0x7F_FFFF], np.uint32)
    amax = (fields[:, None] | mantissas[None, :]).reshape(-1)
    for name in FORMATS:
        fmt = formats.get(name)
        for mode in mx.SCALE_MODES:
            expected = mx.shared_exponents(amax.view(np.float32), "MXFP8_" + name, mode)[1]
            rule = fastcast._mx_rule(fmt, mode)
            np.testing.assert_array_equal(rule.exponents(amax), expected)
            assert [rule.exponent_of(one) for one in amax] == expected.tolist()  # one amax at a time
            # ceil and rceil keep every scaled amax within max, floor and even do not; a rule that
            # says its blocks never saturate (reaches_max False) must be one that keeps it
            within = (amax.view(np.float32).astype(np.float64) * np.exp2(-expected.astype(np.float64)) <= fmt.max).all()
            assert within == (mode in ("ceil", "rceil")) and (within or rule.reaches_max)
            assert rule.reaches_max == (mode not in ("ceil", "rceil"))
        scale = scaling.scale_from_amax(amax.view(np.float32), fmt, power_of_2=True)
        exponents = fastcast._blockwise_rule(fmt).exponents(amax)
        np.testing.assert_array_equal(np.exp2(-exponents.astype(np.float64)), scale)
        assert [fastcast._blockwise_rule(fmt).exponent_of(one) for one in amax] == exponents.tolist()
        # blockwise's scaled amax never passes max (so its tiles never saturate: reaches_max False)
        assert not fastcast._blockwise_rule(fmt).reaches_max
        assert (amax.view(np.float32).astype(np.float64) * np.exp2(-exponents.astype(np.float64)) <= fmt.max).all()
