"""Metamorphic and property tests: relations between the outputs of different calls.

No expected value here is hard-coded or copied from our own output. Each test states a relation
that the documented semantics imply, and checks it on seeded random inputs that cover every binade,
rounding ties, subnormals, zeros of both signs, NaN and Inf where the format or function takes them:

- codec (`minifp8.codec`, formats in `minifp8.formats`): round trips over every code, idempotence,
  sign symmetry, monotonicity, power-of-two equivariance, dtype and memory-layout invariance, and
  the stochastic rounding rule (IEEE P3109 as codec.encode's docstring states it);
- MX and NVFP4 (`minifp8.mx`): scale shifts under ``x * 2**k``, signs, permutations, transposition,
  padding, block locality, idempotence, the packed layout;
- scaling recipes (`minifp8.scaling`): per-tensor, per-row and blockwise;
- the fake-quantize casts of every recipe (`minifp8.fp8.fake_quantize`, computed by fastcast.py's
  separate fast paths).

Comparisons are bitwise (`assert_same_bits`): -0.0 differs from +0.0, and NaN equals NaN only with
the same payload and sign.
"""
import numpy as np
import pytest

from minifp8 import codec, formats, fp8, mx, scaling

SEED = 20240611
ALL_FORMATS = tuple(formats.CATALOGUE)  # E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, E3M2, E2M3, E2M1, E8M0
SIGNED_FORMATS = tuple(name for name in ALL_FORMATS if formats.get(name).signed)
DETERMINISTIC_ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero")
MX_ELEMENTS = mx.ELEMENT_FORMATS
MX_MODES = mx.SCALE_MODES


# ================================================================================================
# Helpers
# ================================================================================================
def assert_same_bits(actual, expected, what=""):
    """``actual`` and ``expected`` have the same dtype, shape and bit patterns (so -0.0 != 0.0)."""
    actual, expected = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    unsigned = np.dtype(f"u{actual.dtype.itemsize}")
    differ = actual.view(unsigned) != expected.view(unsigned)
    if differ.any():
        where = np.unravel_index(np.argmax(differ), differ.shape)
        raise AssertionError(f"{what}: {int(differ.sum())} of {differ.size} differ, first at {where}: "
                             f"{actual[where]!r} != {expected[where]!r}")


def assert_same_values_nan_unsigned(actual, expected, what=""):
    """Bitwise equal except that NaNs only need to sit at the same positions (any sign/payload)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert np.array_equal(np.isnan(actual), np.isnan(expected)), f"{what}: NaN positions differ"
    nan = np.isnan(actual)
    assert_same_bits(np.where(nan, 0, actual).astype(actual.dtype), np.where(nan, 0, expected).astype(expected.dtype),
                     what)


def sample_values(fmt, rng, n=3000, specials=True):
    """float32 values for ``fmt``: every representable value, every midpoint between neighbours
    (the ties), the overflow tie, random 23-bit significands over every binade from below the
    smallest subnormal to beyond max, both signs, +-0 and (``specials``) +-Inf and NaN where legal."""
    table = fmt.values()
    grid = np.unique(np.abs(table[np.isfinite(table)]))  # sorted magnitudes, 0 included when the format has it
    ties = (grid[:-1] + grid[1:]) / 2
    top_spacing = grid[-1] - grid[-2]
    overflow_tie = grid[-1] + top_spacing / 2
    low = max(int(np.floor(np.log2(fmt.min_subnormal))) - 3, -140)
    high = min(int(np.ceil(np.log2(fmt.max))) + 3, 127)
    random = (1 + rng.integers(0, 1 << 23, n) / 2**23) * 2.0 ** rng.integers(low, high + 1, n)
    magnitudes = np.concatenate([grid, ties, [overflow_tie, 2 * fmt.max, 0.0], random])
    with np.errstate(over="ignore"):
        values = magnitudes.astype(np.float32)
    values = np.concatenate([values, -values])
    if specials:
        extra = [np.inf, -np.inf] + ([np.nan, -np.nan] if fmt.has_nan else [])
        values = np.concatenate([values, np.array(extra, np.float32)])
    return rng.permutation(values)


def quantum(x, fmt):
    """The spacing of ``fmt``'s values in the binade of each |x| (subnormals share the lowest binade's)."""
    _, exponent = np.frexp(np.abs(x).astype(np.float64))
    return np.ldexp(1.0, np.maximum(exponent - 1, fmt.emin) - fmt.mantissa_bits)


def mx_input(rng, rows=12, columns=96, dtype=np.float32):
    """Rows of blocks whose amaxes span 2**-30..2**30, with element ties, zeros, -0.0, elements
    2**25 below their block's amax and a row whose scaled elements fall below float32's normals."""
    x = rng.standard_normal((rows, columns)) * 2.0 ** rng.integers(-30, 30, (rows, 1))
    x[:, 3::7] *= 2.0**-25
    x[0, :40] = 0.0
    x[0, 5] = -0.0
    x[1] = rng.choice(np.concatenate([formats.E2M1.values(), formats.E4M3.values()[:100]]), columns) * 0.75
    x[2] = rng.integers(-8, 9, columns) * 2.0**-3  # many exact ties in every element format
    x[3] = rng.standard_normal(columns) * 2.0**-20
    x[3, ::32] = 2.0**120  # amax 2**120: its small elements scale to float32 subnormals (or below)
    return x.astype(dtype)


def specials_row(columns=96, dtype=np.float32):
    """A row with a NaN block, an Inf block and an all-zero block (of 32 elements)."""
    row = np.ones(columns, dtype)
    row[3], row[40], row[64:96] = np.nan, -np.inf, 0.0
    return row[None]


# ================================================================================================
# Codec
# ================================================================================================
@pytest.mark.parametrize("name", ALL_FORMATS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_codec_decode_then_encode_gives_back_every_code(name, dtype):
    """encode(decode(c)) == c for every finite code c, under every rounding mode and saturate
    setting and from every input dtype that holds decode(c) exactly: a representable value needs no
    rounding (OFP8 5.1). Every finite value has exactly one code, -0.0 included. NaN codes give
    the canonical NaN of the same sign (a single 0x80 for FNUZ), and Inf codes give Inf without
    saturation (codec docstring), so quantize(decode(c)) == decode(c) bitwise for those."""
    fmt = formats.get(name)
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    values = codec.decode(codes, fmt)
    with np.errstate(over="ignore"):
        inputs = values.astype(dtype)
    held = (inputs.astype(np.float32) == values) | np.isnan(values)
    assert held.sum() > 0
    finite = np.isfinite(values) & held
    special = ~np.isfinite(values) & held
    for rounding in DETERMINISTIC_ROUNDINGS:
        for saturate in (False, True):
            encoded = codec.encode(inputs, fmt, rounding=rounding, saturate=saturate)
            np.testing.assert_array_equal(encoded[finite], codes[finite], err_msg=f"{rounding}, saturate={saturate}")
    bits = np.random.default_rng(SEED).integers(0, 1 << 16, codes.shape, dtype=np.uint16)
    encoded = codec.encode(inputs, fmt, rounding="stochastic", random_bits=bits)
    np.testing.assert_array_equal(encoded[finite], codes[finite])  # no discarded fraction: never rounds away
    assert_same_bits(codec.quantize(inputs[special], fmt), values[special], f"{name} NaN/Inf codes")


@pytest.mark.parametrize("name", ALL_FORMATS)
@pytest.mark.parametrize("rounding", DETERMINISTIC_ROUNDINGS)
def test_codec_quantize_is_idempotent(name, rounding):
    """quantize(quantize(x)) == quantize(x) bitwise, NaN and -0.0 included: quantize returns
    representable values (or NaN/Inf), which encode unchanged (previous test's relation); Inf and
    NaN map to themselves or to a saturated/NaN value that is again a fixed point."""
    fmt = formats.get(name)
    x = sample_values(fmt, np.random.default_rng(SEED))
    for saturate in (False, True):
        once = codec.quantize(x, fmt, rounding=rounding, saturate=saturate)
        twice = codec.quantize(once, fmt, rounding=rounding, saturate=saturate)
        assert_same_bits(twice, once, f"{name} {rounding} saturate={saturate}")


@pytest.mark.parametrize("name", SIGNED_FORMATS)
def test_codec_encode_is_sign_symmetric(name):
    """encode(-x) == encode(x) ^ sign_mask: every rounding rule here acts on |x| and the sign bit
    is copied (OFP8 5.1, sign-magnitude), for every rounding mode (stochastic with the same bits)
    and saturate setting. FNUZ formats have no -0 and a single NaN 0x80 (formats docstring): there
    a code 0x00 or 0x80 is the same for x and -x instead."""
    fmt = formats.get(name)
    rng = np.random.default_rng(SEED)
    x = sample_values(fmt, rng)
    bits = rng.integers(0, 256, x.shape, dtype=np.uint8)
    fnuz = fmt.nan_style == "negative_zero"
    for rounding in DETERMINISTIC_ROUNDINGS + ("stochastic",):
        options = dict(random_bits=bits) if rounding == "stochastic" else {}
        for saturate in (False, True):
            plus = codec.encode(x, fmt, rounding=rounding, saturate=saturate, **options)
            minus = codec.encode(-x, fmt, rounding=rounding, saturate=saturate, **options)
            unsigned = (plus == 0) | (plus == fmt.sign_mask) if fnuz else np.zeros(x.shape, bool)
            expected = np.where(unsigned, plus, plus ^ fmt.sign_mask).astype(np.uint8)
            np.testing.assert_array_equal(minus, expected, err_msg=f"{rounding}, saturate={saturate}")


@pytest.mark.parametrize("name", ALL_FORMATS)
def test_codec_quantize_is_monotone(name):
    """x <= y implies quantize(x) <= quantize(y) for finite inputs (and +-Inf), under every
    rounding mode, with saturation (and without where overflow gives Inf, not NaN: E5M2, FP6/FP4):
    each rounding picks a neighbour by a rule monotone in |x| and clamps are monotone too.
    Stochastic rounding with one fixed bit pattern for all elements is monotone as well: it rounds
    away when the discarded fraction reaches a fixed threshold. E8M0 is taken on x > 0; FNUZ only
    saturating, which takes its +-Inf to +-max (ONNX Cast-24, codec docstring). The float64 neighbours of
    the samples (just beside every tie) go through the exact core, the float32 ones through the table."""
    fmt = formats.get(name)
    x = sample_values(fmt, np.random.default_rng(SEED)).astype(np.float64)
    x = x[~np.isnan(x)]
    x = np.sort(np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)]))
    if not fmt.signed:
        x = x[x > 0]
    overflow_to_inf_or_clamp = fmt.has_infinity or not fmt.has_nan
    for rounding in DETERMINISTIC_ROUNDINGS + ("stochastic",):
        for bits in ((0, 1, 7, 12, 15) if rounding == "stochastic" else (None,)):
            options = {}
            if bits is not None:
                options = dict(random_bits=np.full(x.shape, bits, np.uint8), random_bit_count=4)
            for saturate in (True, False) if overflow_to_inf_or_clamp else (True,):
                q = codec.quantize(x, fmt, rounding=rounding, saturate=saturate, **options)
                decreasing = ~(q[1:] >= q[:-1])
                assert not decreasing.any(), (rounding, bits, saturate, x[1:][decreasing][:3], q[1:][decreasing][:3])


@pytest.mark.parametrize("name", ALL_FORMATS)
def test_codec_quantize_commutes_with_powers_of_two_in_the_normal_range(name):
    """quantize(2**k * x) == 2**k * quantize(x) when x and 2**k * x both lie in the normal range
    [min_normal, 2**emax): there the values are 2**e * (1 + m / 2**M) with the same M in every
    binade (OFP8 5.1), so scaling by 2**k maps the grid, its ties and the rounding decisions onto
    themselves. Checked on the exact float64 path and on the float32 table path."""
    fmt = formats.get(name)
    rng = np.random.default_rng(SEED)
    n = 4000
    exponent = rng.integers(fmt.emin, fmt.emax, n)
    x = (1 + rng.integers(0, 1 << 20, n) / 2**20) * 2.0**exponent  # 20 bits: exact in float32 near 2**-127
    ties = 2 ** (fmt.mantissa_bits + 1)  # the first 200: values and midpoints of the grid
    x[:200] = (1 + rng.integers(0, ties, 200) / ties) * 2.0**exponent[:200]
    k = rng.integers(fmt.emin - exponent, fmt.emax - exponent)  # emin <= exponent + k < emax
    if fmt.signed:
        x *= rng.choice([-1.0, 1.0], n)
    shifted = np.ldexp(x, k)
    for dtype in (np.float64, np.float32):
        for rounding in DETERMINISTIC_ROUNDINGS:
            q = codec.quantize(x.astype(dtype), fmt, rounding=rounding).astype(np.float64)
            q_shifted = codec.quantize(shifted.astype(dtype), fmt, rounding=rounding).astype(np.float64)
            np.testing.assert_array_equal(q_shifted, np.ldexp(q, k), err_msg=f"{dtype.__name__} {rounding}")


@pytest.mark.parametrize("name", ALL_FORMATS)
def test_codec_encode_is_invariant_to_exact_dtype_conversion_and_memory_layout(name):
    """encode depends on the value only: float16 -> float32 -> float64 conversions are exact, so
    they give the same codes (float16 and float32 take the table path, float64 the exact core:
    codec docstring); so do a strided view, a transposed view, a big-endian copy and a Python list,
    and integer arrays give the codes of their float64 values."""
    fmt = formats.get(name)
    rng = np.random.default_rng(SEED)
    x32 = sample_values(fmt, rng)[:4000]
    x32 = x32[: len(x32) // 40 * 40]
    with np.errstate(over="ignore"):
        x16 = x32.astype(np.float16)
    bits = rng.integers(0, 1 << 12, x32.shape).astype(np.uint16)
    integers = rng.integers(-(1 << 20), 1 << 20, 500) >> rng.integers(0, 21, 500)
    if not fmt.signed:
        integers = np.abs(integers)
    for rounding in DETERMINISTIC_ROUNDINGS + ("stochastic",):
        for saturate in (False, True):
            options = dict(rounding=rounding, saturate=saturate)
            if rounding == "stochastic":
                options.update(random_bits=bits, random_bit_count=12)
            expected = codec.encode(x32.astype(np.float64), fmt, **options)
            np.testing.assert_array_equal(codec.encode(x32, fmt, **options), expected)
            np.testing.assert_array_equal(codec.encode(x32.astype(">f4"), fmt, **options), expected)
            np.testing.assert_array_equal(codec.encode(x16, fmt, **options),
                                          codec.encode(x16.astype(np.float32), fmt, **options))
            if rounding != "stochastic":
                np.testing.assert_array_equal(codec.encode(x32.tolist(), fmt, **options), expected)
                for dtype in (np.int32, np.int64, ">i8"):
                    np.testing.assert_array_equal(codec.encode(integers.astype(dtype), fmt, **options),
                                                  codec.encode(integers.astype(np.float64), fmt, **options))
                grid = x32.reshape(40, -1)
                np.testing.assert_array_equal(codec.encode(grid.T, fmt, **options), expected.reshape(40, -1).T)
                np.testing.assert_array_equal(codec.encode(grid[::3, 1::2], fmt, **options),
                                              expected.reshape(40, -1)[::3, 1::2])


@pytest.mark.parametrize("name", ALL_FORMATS)
def test_codec_stochastic_rounding_on_the_random_bit_grid(name):
    """For x = v + (j / 2**k) * quantum (v representable, 0 <= j < 2**k), the discarded fraction is
    exactly j / 2**k, so by codec.encode's rule (round away iff fraction * 2**k + bits >= 2**k):
    bits 0 never round away (toward_zero), bits 2**(k-1) round away iff j >= 2**(k-1)
    (nearest_away), the result never decreases in |.| as the bits grow, and the average over all
    2**k bit patterns is x exactly (stochastic rounding is unbiased). Kept below max (no overflow).
    The same bits in a wider unsigned dtype, with the same random_bit_count, give the same result."""
    fmt = formats.get(name)
    rng = np.random.default_rng(SEED)
    k, n = 4, 3000
    table = fmt.values()
    grid = np.unique(np.abs(table[np.isfinite(table)]))[:-1]  # below max: rounding away stays finite
    v = rng.choice(grid, n)
    j = rng.integers(0, 1 << k, n)
    x = v + j / 2**k * quantum(np.where(v == 0, fmt.min_subnormal, v), fmt)
    if fmt.signed:
        x *= rng.choice([-1.0, 1.0], n)
    x = x.astype(np.float32)  # exact: at most M + 1 + k significant bits
    patterns = np.broadcast_to(np.arange(1 << k, dtype=np.uint8)[:, None], (1 << k, n))
    q = codec.quantize(np.broadcast_to(x, patterns.shape), fmt, rounding="stochastic",
                       random_bits=patterns, random_bit_count=k).astype(np.float64)
    assert_same_bits(q[0].astype(np.float32), codec.quantize(x, fmt, rounding="toward_zero"), "bits 0")
    assert_same_bits(q[1 << (k - 1)].astype(np.float32), codec.quantize(x, fmt, rounding="nearest_away"),
                     "bits 2**(k-1)")
    assert (np.diff(np.abs(q), axis=0) >= 0).all(), "|result| must not decrease as the random bits grow"
    np.testing.assert_array_equal(q.mean(axis=0), x.astype(np.float64))
    for dtype in (np.uint16, np.uint32, np.uint64):  # the bits' values count, not their dtype's width
        wider = codec.quantize(np.broadcast_to(x, patterns.shape), fmt, rounding="stochastic",
                               random_bits=patterns.astype(dtype), random_bit_count=k)
        assert_same_bits(wider, q.astype(np.float32), dtype.__name__)


@pytest.mark.parametrize("name", ALL_FORMATS)
def test_codec_stochastic_rounding_bias_is_at_most_half_a_random_bit(name):
    """For any x below max, the average over all 2**k random bit patterns is
    ``floor(x) + rint(fraction * 2**k) / 2**k`` quanta: the documented rule first rounds the
    discarded fraction to k bits (IEEE P3109), so the bias is at most quantum / 2**(k + 1)."""
    fmt = formats.get(name)
    rng = np.random.default_rng(SEED)
    k = 5
    x = sample_values(fmt, rng, specials=False)
    x = x[(np.abs(x) < fmt.max) & ((x > 0) | fmt.signed) & (np.abs(x) >= (fmt.min_normal if not fmt.signed else 0))]
    patterns = np.broadcast_to(np.arange(1 << k, dtype=np.uint8)[:, None], (1 << k, x.size))
    q = codec.quantize(np.broadcast_to(x, patterns.shape), fmt, rounding="stochastic",
                       random_bits=patterns, random_bit_count=k).astype(np.float64)
    error = np.abs(q.mean(axis=0) - x.astype(np.float64))
    bound = quantum(x, fmt) / 2 ** (k + 1)
    assert (error <= bound).all(), (x[error > bound][:5], error[error > bound][:5])


def test_codec_e8m0_scales_shift_codes():
    """E8M0 holds exactly the powers of two 2**-127..2**127 at code e + 127 (MX 5.4.1): encoding
    2**k * x adds k to the code of x while both stay in range, under every rounding mode."""
    rng = np.random.default_rng(SEED)
    exponent = rng.integers(-127, 100, 2000)
    x = np.ldexp(1 + rng.integers(0, 1 << 20, 2000) / 2**20, exponent)
    k = rng.integers(-127 - exponent, 127 - exponent)
    for rounding in DETERMINISTIC_ROUNDINGS:
        codes = codec.encode(x, "E8M0", rounding=rounding).astype(int)
        shifted = codec.encode(np.ldexp(x, k), "E8M0", rounding=rounding).astype(int)
        np.testing.assert_array_equal(shifted, codes + k)


# ================================================================================================
# MX
# ================================================================================================
def assert_same_mx(actual, expected, what=""):
    np.testing.assert_array_equal(actual.scales, expected.scales, err_msg=f"{what}: scales")
    np.testing.assert_array_equal(actual.codes, expected.codes, err_msg=f"{what}: codes")
    assert (actual.elem, actual.block_size, actual.axis, actual.shape) == \
        (expected.elem, expected.block_size, expected.axis, expected.shape), what


@pytest.mark.parametrize("elem", MX_ELEMENTS)
@pytest.mark.parametrize("mode", MX_MODES)
def test_mx_power_of_two_scaling_shifts_the_scales_only(elem, mode):
    """quantize(2**k * x) has x's element codes and scale codes shifted by k, and dequantizes to
    exactly 2**k times x's: every scale mode reads the shared exponent from amax's exponent and
    significand (mx docstring), so it moves by k, and the scaled elements x * 2**-shared_exp are
    the same numbers. Here no shared exponent reaches the clamp to [-127, 127]. NaN, Inf and
    all-zero blocks keep their scales (0xFF; rceil's 0xFE; 0x00) and codes."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng)[[0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11]], specials_row()])
    special = np.zeros((x.shape[0], 3), bool)
    special[0, 0] = special[-1, :] = True  # row 0's first block is zero; the specials row
    for k in (-40, -1, 1, 29, 40):
        q, q_shifted = mx.quantize(x, elem, scale_mode=mode), mx.quantize(np.ldexp(x, k), elem, scale_mode=mode)
        np.testing.assert_array_equal(q_shifted.codes, q.codes, err_msg=f"k={k}")
        expected = np.where(special, q.scales.astype(int), q.scales.astype(int) + k)
        np.testing.assert_array_equal(q_shifted.scales.astype(int), expected, err_msg=f"k={k}")
        values = q.dequantize()
        with np.errstate(over="ignore"):
            assert_same_bits(q_shifted.dequantize(), np.ldexp(values, k).astype(np.float32), f"k={k}")


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_negating_x_flips_element_sign_bits_only(elem):
    """quantize(-x): same scales (amax is a magnitude), element codes with the sign bit flipped
    (every MX element format has -0), for every scale mode and for stochastic rounding with the
    same bits (which acts on |x|). A NaN block's codes are all 0 either way (mx docstring)."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()])
    fmt = formats.get(elem)
    bits = rng.integers(0, 1 << 8, x.shape).astype(np.uint8)
    for mode in MX_MODES:
        for options in ({}, dict(rounding="stochastic", random_bits=bits)):
            q = mx.quantize(x, elem, scale_mode=mode, **options)
            q_negated = mx.quantize(-x, elem, scale_mode=mode, **options)
            np.testing.assert_array_equal(q_negated.scales, q.scales)
            nan_block = np.repeat(q.scales == mx.E8M0_NAN, 32, axis=-1)[:, : x.shape[1]]
            np.testing.assert_array_equal(q_negated.codes, np.where(nan_block, 0, q.codes ^ fmt.sign_mask))


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_is_equivariant_under_permutations_that_keep_blocks(elem):
    """Permuting the rows (the axis that is not blocked) permutes codes and scales alike; permuting
    elements inside each block permutes the codes and keeps the scales (a block's amax does not
    depend on the order); permuting whole blocks permutes both (each block is quantized alone)."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()])
    within = np.concatenate([start + rng.permutation(32) for start in range(0, 96, 32)])
    block_order = rng.permutation(3)
    across = np.concatenate([np.arange(32) + 32 * b for b in block_order])
    rows = rng.permutation(x.shape[0])
    for mode in MX_MODES:
        q = mx.quantize(x, elem, scale_mode=mode)
        permuted = mx.quantize(x[rows], elem, scale_mode=mode)
        np.testing.assert_array_equal(permuted.codes, q.codes[rows])
        np.testing.assert_array_equal(permuted.scales, q.scales[rows])
        permuted = mx.quantize(x[:, within], elem, scale_mode=mode)
        np.testing.assert_array_equal(permuted.codes, q.codes[:, within])
        np.testing.assert_array_equal(permuted.scales, q.scales)
        permuted = mx.quantize(x[:, across], elem, scale_mode=mode)
        np.testing.assert_array_equal(permuted.codes, q.codes[:, across])
        np.testing.assert_array_equal(permuted.scales, q.scales[:, block_order])


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_blocking_along_an_axis_is_the_same_as_blocking_the_transposed_array(elem):
    """quantize(x, axis=0) is quantize(x.T, axis=1) transposed, and on a 3-d array blocking along
    axis 1 is blocking along the last axis of np.moveaxis(x, 1, -1), moved back: blocks are runs of
    consecutive elements along ``axis``, wherever it is (mx docstring, Layout)."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()]).T.copy()  # (96, 13): blocks down the columns
    for mode in MX_MODES:
        q = mx.quantize(x, elem, axis=0, scale_mode=mode)
        q_t = mx.quantize(x.T, elem, axis=1, scale_mode=mode)
        np.testing.assert_array_equal(q.codes, q_t.codes.T)
        np.testing.assert_array_equal(q.scales, q_t.scales.T)
        assert_same_bits(q.dequantize(), q_t.dequantize().T)
    cube = x[:, :12].reshape(96, 3, 4).transpose(1, 0, 2)  # (3, 96, 4), a non-contiguous view
    q = mx.quantize(cube, elem, axis=1)
    q_moved = mx.quantize(np.moveaxis(cube, 1, -1), elem, axis=-1)
    np.testing.assert_array_equal(q.codes, np.moveaxis(q_moved.codes, -1, 1))
    np.testing.assert_array_equal(q.scales, np.moveaxis(q_moved.scales, -1, 1))
    assert_same_bits(q.dequantize(), np.moveaxis(q_moved.dequantize(), -1, 1))


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_padding_and_concatenation_change_nothing(elem):
    """A length that is not a multiple of the block size is zero-padded inside, and zeros never
    change an amax (mx docstring, Layout): quantizing x[:, :70] (or x[:, :20], shorter than a
    block) equals quantizing it padded with zeros and dropping the padding's codes; an axis of 20
    is one block under block_size 32 and 64 alike. Blocks are quantized independently: quantizing
    [a, b] (a's length a multiple of 32) equals quantizing a and b apart and concatenating."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()])
    for mode in MX_MODES:
        short = mx.quantize(x[:, :70], elem, scale_mode=mode)
        padded = mx.quantize(np.pad(x[:, :70], [(0, 0), (0, 26)]), elem, scale_mode=mode)
        np.testing.assert_array_equal(short.codes, padded.codes[:, :70])
        np.testing.assert_array_equal(short.scales, padded.scales)
        assert_same_bits(short.dequantize(), padded.dequantize()[:, :70])
        shorter_than_a_block = mx.quantize(x[:, :20], elem, scale_mode=mode)  # one block of 20
        padded = mx.quantize(np.pad(x[:, :20], [(0, 0), (0, 12)]), elem, scale_mode=mode)
        np.testing.assert_array_equal(shorter_than_a_block.codes, padded.codes[:, :20])
        np.testing.assert_array_equal(shorter_than_a_block.scales, padded.scales)
        assert_same_bits(mx.quantize(x[:, :20], elem, block_size=64, scale_mode=mode).dequantize(),
                         shorter_than_a_block.dequantize(), "block_size 64 on an axis of 20")
        whole = mx.quantize(x, elem, scale_mode=mode)
        left, right = mx.quantize(x[:, :64], elem, scale_mode=mode), mx.quantize(x[:, 64:], elem, scale_mode=mode)
        np.testing.assert_array_equal(whole.codes, np.concatenate([left.codes, right.codes], axis=1))
        np.testing.assert_array_equal(whole.scales, np.concatenate([left.scales, right.scales], axis=1))


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_is_invariant_to_exact_dtype_conversion_and_memory_layout(elem):
    """float16 -> float32 -> float64 are exact, so they give the same codes and scales, although
    float32 input is scaled in float32 and float64 in float64 (mx.quantize: exact either way; the
    row with amax 2**120 scales elements into float32's subnormals). So do a strided view, a
    big-endian copy and a Python list."""
    rng = np.random.default_rng(SEED)
    x32 = np.concatenate([mx_input(rng), specials_row()])
    big = np.concatenate([x32, x32], axis=1)[:, ::2]  # a strided view of other values
    bits = rng.integers(0, 1 << 16, x32.shape).astype(np.uint16)
    for mode in MX_MODES:
        for options in ({}, dict(rounding="toward_zero"), dict(rounding="stochastic", random_bits=bits)):
            expected = mx.quantize(x32.astype(np.float64), elem, scale_mode=mode, **options)
            assert_same_mx(mx.quantize(x32, elem, scale_mode=mode, **options), expected, f"{mode} {options}")
            assert_same_mx(mx.quantize(x32.astype(">f4"), elem, scale_mode=mode, **options), expected)
            if not options:
                assert_same_mx(mx.quantize(x32.tolist(), elem, scale_mode=mode), expected)
                assert_same_mx(mx.quantize(big, elem, scale_mode=mode),
                               mx.quantize(np.ascontiguousarray(big), elem, scale_mode=mode))
    with np.errstate(over="ignore"):
        x16 = x32.astype(np.float16)
    for mode in MX_MODES:
        assert_same_mx(mx.quantize(x16, elem, scale_mode=mode),
                       mx.quantize(x16.astype(np.float32), elem, scale_mode=mode))


@pytest.mark.parametrize("elem", MX_ELEMENTS)
@pytest.mark.parametrize("mode", MX_MODES)
def test_mx_quantize_dequantize_is_idempotent(elem, mode):
    """y = dequantize(quantize(x)) is a fixed point: quantize(y) dequantizes to y bitwise. Each
    element of y is a representable value times the block's scale 2**s, and y's amax gives a
    scale 2**s' with s' <= s (rounding keeps the largest element within the element range, and for
    floor/even at or above 2**emax), so y's elements lie on the new (finer or equal) grid. Under
    floor and even, s' == s, so codes and scales come back unchanged too."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()])
    x = x[~np.isinf(x).any(axis=1)]  # rceil's Inf blocks would overflow to Inf on the way back
    q = mx.quantize(x, elem, scale_mode=mode)
    y = q.dequantize()
    again = mx.quantize(y, elem, scale_mode=mode)
    assert_same_values_nan_unsigned(again.dequantize(), y)
    if mode in ("floor", "even"):
        np.testing.assert_array_equal(again.scales, q.scales)
        nan_block = np.repeat(q.scales == mx.E8M0_NAN, 32, axis=-1)[:, : x.shape[1]]
        np.testing.assert_array_equal(again.codes[~nan_block], q.codes[~nan_block])


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_scales_do_not_depend_on_the_element_rounding(elem):
    """The shared exponent comes from the block's amax alone (OCP MX 6.3 steps 1-2), so every
    element rounding mode gives the same scales; and stochastic rounding with all random bits zero
    on inputs whose scaled elements lie on the element grid is toward_zero (codec rule)."""
    rng = np.random.default_rng(SEED)
    x = np.concatenate([mx_input(rng), specials_row()])
    bits = rng.integers(0, 1 << 8, x.shape).astype(np.uint8)
    for mode in MX_MODES:
        expected = mx.quantize(x, elem, scale_mode=mode).scales
        for options in (dict(rounding="nearest_away"), dict(rounding="toward_zero"),
                        dict(rounding="stochastic", random_bits=bits)):
            np.testing.assert_array_equal(mx.quantize(x, elem, scale_mode=mode, **options).scales, expected)
    on_grid = mx.quantize(x, elem).dequantize()
    on_grid = on_grid[np.isfinite(on_grid).all(axis=1)]
    zero_bits = np.zeros(on_grid.shape, np.uint8)
    assert_same_mx(mx.quantize(on_grid, elem, rounding="stochastic", random_bits=zero_bits),
                   mx.quantize(on_grid, elem, rounding="toward_zero"))


@pytest.mark.parametrize("elem", MX_ELEMENTS)
def test_mx_stochastic_rounding_averages_to_x_up_to_the_documented_bias(elem):
    """Averaged over all 2**k random bit patterns, MX stochastic rounding is within
    2**s * quantum / 2**(k + 1) of x (the codec's rule on the exactly scaled element). ``ceil``
    never saturates (mx docstring), so no clamp biases the average."""
    rng = np.random.default_rng(SEED)
    fmt = formats.get(elem)
    x = mx_input(rng, rows=6, columns=64)[[1, 2, 4, 5]]
    k = 4
    patterns = np.broadcast_to(np.arange(1 << k, dtype=np.uint8)[:, None, None], (1 << k,) + x.shape)
    q = mx.quantize(np.broadcast_to(x, patterns.shape), elem, scale_mode="ceil", rounding="stochastic",
                    random_bits=patterns, random_bit_count=k)
    shared = q.scales[0].astype(int) - mx.E8M0_BIAS
    assert (q.scales == q.scales[0]).all()
    scale = np.ldexp(1.0, np.repeat(shared, 32, axis=-1))
    error = np.abs(q.dequantize().astype(np.float64).mean(axis=0) - x)
    bound = scale * quantum(x / scale, fmt) / 2 ** (k + 1)
    assert (error <= bound).all()


@pytest.mark.parametrize("mode", MX_MODES)
def test_mx_shared_exponents_read_the_value_not_its_dtype(mode):
    """shared_exponents reads the exponent from amax's bits, in float32 or float64 of either byte
    order, converting float16 and integers exactly (its docstring): the same amaxes in any of these
    dtypes and shapes (float32 subnormals, 0, -0.0, Inf, NaN, FLT_MAX included) give the same
    codes and exponents; block_amax likewise gives the same magnitudes in float32 and float64."""
    rng = np.random.default_rng(SEED)
    amax = np.concatenate([(1 + rng.random(500)) * 2.0 ** rng.integers(-149, 128, 500),
                           [0.0, -0.0, np.inf, np.nan, 2.0**-149, 3.4028235e38]]).astype(np.float32)
    small = np.abs(amax[np.abs(amax) < 60000]).astype(np.float16)
    integers = np.arange(0, 5000, 7)
    for elem in MX_ELEMENTS:
        codes, exponents = mx.shared_exponents(amax, elem, mode)
        for variant in (amax.astype(np.float64), amax.astype(">f4"), amax.astype(">f8")):
            variant_codes, variant_exponents = mx.shared_exponents(variant, elem, mode)
            np.testing.assert_array_equal(variant_codes, codes, err_msg=f"{elem} {variant.dtype}")
            np.testing.assert_array_equal(variant_exponents, exponents, err_msg=f"{elem} {variant.dtype}")
        grid_codes, grid_exponents = mx.shared_exponents(amax[:500].reshape(20, 25), elem, mode)
        np.testing.assert_array_equal(grid_codes, codes[:500].reshape(20, 25))
        for exact, as_float32 in ((small, small.astype(np.float32)), (integers, integers.astype(np.float32))):
            for got, expected in zip(mx.shared_exponents(exact, elem, mode),
                                     mx.shared_exponents(as_float32, elem, mode)):
                np.testing.assert_array_equal(got, expected)
    blocks = mx_input(rng)
    assert_same_bits(mx.block_amax(blocks.astype(np.float64)), mx.block_amax(blocks).astype(np.float64))
    assert_same_bits(mx.block_amax(blocks.astype(">f4")), mx.block_amax(blocks))


@pytest.mark.parametrize("elem", ["E2M1", "E4M3", "E5M2"])
def test_mx_packed_unpacks_to_the_codes(elem):
    """packed() holds two FP4 codes per byte along the last axis, the first in the low nibble, an
    odd axis padded with a zero nibble (MXArray.packed); FP8 codes are stored as they are."""
    rng = np.random.default_rng(SEED)
    x = mx_input(rng, rows=4, columns=77)
    q = mx.quantize(x, elem)
    packed = q.packed()
    if formats.get(elem).bits == 8:
        np.testing.assert_array_equal(packed, q.codes)
        return
    unpacked = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    np.testing.assert_array_equal(unpacked[:, :77], q.codes)
    assert (unpacked[:, 77:] == 0).all()


# ---- NVFP4 ---------------------------------------------------------------------------------------
def nvfp4_input(rng, rows=8, columns=64):
    """Blocks whose amaxes lie within 2**8 of the tensor amax (so no block scale underflows E4M3)."""
    x = rng.standard_normal((rows, columns)) * 2.0 ** rng.integers(-8, 0, (rows, 1))
    x[0, :16] = 0.0
    x[1, 3] = -0.0
    x[2] = rng.integers(-12, 13, columns) * 0.5
    return x.astype(np.float32)


def assert_same_nvfp4(actual, expected, what=""):
    np.testing.assert_array_equal(actual.scales, expected.scales, err_msg=f"{what}: scales")
    np.testing.assert_array_equal(actual.codes, expected.codes, err_msg=f"{what}: codes")
    assert_same_bits(actual.global_amax, expected.global_amax, f"{what}: global_amax")
    assert_same_bits(actual.encode_scale, expected.encode_scale, f"{what}: encode_scale")


def test_nvfp4_power_of_two_scaling_scales_the_tensor_scale_only():
    """quantize_nvfp4(2**k * x): same block-scale and element codes, global_amax times 2**k,
    S_enc times 2**-k and dequantize times 2**k, bitwise: every float32 step of quantize_nvfp4
    (2688 / amax, S_enc * float32(1/6), block_amax * that, 1 / (S_dec_b * S_dec), x * encode) and of
    dequantize is a product or quotient in which the 2**k cancels or carries through exactly, as
    long as nothing leaves float32's normal range and S_enc is not capped at FLT_MAX."""
    rng = np.random.default_rng(SEED)
    x = nvfp4_input(rng)
    q = mx.quantize_nvfp4(x)
    for k in (-100, -7, -1, 1, 5, 60, 120):  # 2**120: dequantize's path for global_amax > FLT_MAX / 448
        shifted = mx.quantize_nvfp4(np.ldexp(x, k))
        np.testing.assert_array_equal(shifted.scales, q.scales, err_msg=f"k={k}")
        np.testing.assert_array_equal(shifted.codes, q.codes, err_msg=f"k={k}")
        assert_same_bits(shifted.global_amax, np.ldexp(q.global_amax, k).astype(np.float32))
        assert_same_bits(shifted.encode_scale, np.ldexp(q.encode_scale, -k).astype(np.float32))
        assert_same_bits(shifted.dequantize(), np.ldexp(q.dequantize(), k).astype(np.float32), f"k={k}")


def test_nvfp4_sign_permutation_axis_and_layout_relations():
    """quantize_nvfp4 is sign-symmetric (E2M1 code ^ 0x8, same scales: amaxes are magnitudes;
    -0.0 kept), equivariant under row permutations (the axis that is not blocked) and under
    permutations inside each 16-element block, blocks along axis 0 equal blocks along axis 1 of
    the transpose, an explicit global_amax = max|x| changes nothing, and float16, float64, strided
    and big-endian inputs holding the same float32 values give the same result."""
    rng = np.random.default_rng(SEED)
    x = nvfp4_input(rng)
    q = mx.quantize_nvfp4(x)
    negated = mx.quantize_nvfp4(-x)
    np.testing.assert_array_equal(negated.scales, q.scales)
    np.testing.assert_array_equal(negated.codes, q.codes ^ 0x8)
    assert_same_bits(negated.dequantize(), -q.dequantize())
    rows = rng.permutation(x.shape[0])
    permuted = mx.quantize_nvfp4(x[rows])
    np.testing.assert_array_equal(permuted.codes, q.codes[rows])
    np.testing.assert_array_equal(permuted.scales, q.scales[rows])
    within = np.concatenate([start + rng.permutation(16) for start in range(0, x.shape[1], 16)])
    permuted = mx.quantize_nvfp4(x[:, within])
    np.testing.assert_array_equal(permuted.codes, q.codes[:, within])
    np.testing.assert_array_equal(permuted.scales, q.scales)
    transposed = mx.quantize_nvfp4(x.T.copy(), axis=0)
    np.testing.assert_array_equal(transposed.codes, q.codes.T)
    np.testing.assert_array_equal(transposed.scales, q.scales.T)
    assert_same_bits(transposed.dequantize(), q.dequantize().T)
    assert_same_nvfp4(mx.quantize_nvfp4(x, global_amax=float(np.max(np.abs(x)))), q)
    assert_same_nvfp4(mx.quantize_nvfp4(x.astype(np.float64)), q)
    assert_same_nvfp4(mx.quantize_nvfp4(x.astype(">f4")), q)
    assert_same_nvfp4(mx.quantize_nvfp4(np.asfortranarray(x)), q)
    wide = np.repeat(x, 2, axis=1)[:, ::2]  # a strided view of x's values
    assert_same_nvfp4(mx.quantize_nvfp4(wide), q)
    x16 = x.astype(np.float16)
    assert_same_nvfp4(mx.quantize_nvfp4(x16), mx.quantize_nvfp4(x16.astype(np.float32)))


def test_nvfp4_and_scaling_along_any_axis_of_a_3d_array_is_moving_that_axis_last():
    """quantize_nvfp4, quantize_rowwise and quantize_blockwise (1xn tiles) along axis a of a 3-d
    array equal the same along the last axis of np.moveaxis(x, a, -1), moved back: blocks, rows and
    tiles are runs along ``axis`` wherever it lies (mx docstring, Layout; scaling docstring)."""
    rng = np.random.default_rng(SEED)
    x = (rng.standard_normal((5, 40, 6)) * 2.0 ** rng.integers(-5, 5, (5, 1, 6))).astype(np.float32)
    for axis in (0, 1, 2):
        moved = np.moveaxis(x, axis, -1)
        q, q_moved = mx.quantize_nvfp4(x, axis=axis), mx.quantize_nvfp4(moved)
        np.testing.assert_array_equal(q.codes, np.moveaxis(q_moved.codes, -1, axis))
        np.testing.assert_array_equal(q.scales, np.moveaxis(q_moved.scales, -1, axis))
        assert_same_bits(q.dequantize(), np.moveaxis(q_moved.dequantize(), -1, axis))
        for quantize in (lambda v, **kw: scaling.quantize_rowwise(v, "E5M2", **kw),
                         lambda v, **kw: scaling.quantize_blockwise(v, block_shape=(1, 16), **kw)):
            q, q_moved = quantize(x, axis=axis), quantize(moved)
            np.testing.assert_array_equal(q.codes, np.moveaxis(q_moved.codes, -1, axis))
            assert_same_bits(q.scale, np.moveaxis(q_moved.scale, -1, axis))
            assert_same_bits(q.dequantize(), np.moveaxis(q_moved.dequantize(), -1, axis))


def test_nvfp4_packed_unpacks_to_the_codes():
    """NVFP4Array.packed(): two E2M1 codes per byte along the last axis, low nibble first."""
    rng = np.random.default_rng(SEED)
    q = mx.quantize_nvfp4(nvfp4_input(rng, columns=47))
    packed = q.packed()
    unpacked = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    np.testing.assert_array_equal(unpacked[:, :47], q.codes)
    assert (unpacked[:, 47:] == 0).all()


# ================================================================================================
# Scaling recipes
# ================================================================================================
def scaling_input(rng, rows=16, columns=300, dtype=np.float32):
    """Rows of magnitudes 2**-20..2**20, zeros, -0.0, an all-zero row and ties of the scaled grid."""
    x = rng.standard_normal((rows, columns)) * 2.0 ** rng.integers(-20, 20, (rows, 1))
    x[:, 7::11] = 0.0
    x[:, 8::13] = -0.0
    x[1] = 0.0
    x[2] = rng.integers(-40, 41, columns) * 2.0**-4
    return x.astype(dtype)


def assert_same_scaled(actual, expected, what=""):
    np.testing.assert_array_equal(actual.codes, expected.codes, err_msg=f"{what}: codes")
    for name in ("scale", "scale_inv", "amax"):
        assert_same_bits(getattr(actual, name), getattr(expected, name), f"{what}: {name}")
    assert_same_bits(actual.dequantize(), expected.dequantize(), f"{what}: dequantize")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("power_of_2", [True, False])
def test_current_scaling_is_invariant_under_powers_of_two(fmt, power_of_2):
    """quantize_current(2**k * x): same codes, scale times 2**-k, dequantize times 2**k, bitwise.
    scale = float32(fp8_max / amax) and scale_inv = float32(1 / scale) are single float32 divisions,
    so a 2**k on amax carries through their rounding exactly (and power_of_2's mantissa clearing
    commutes with it); x * scale is then the same float32. Holds with and without power_of_2 while
    amax, scale and x * scale stay normal float32 numbers (amax here within 2**+-80)."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng)
    q = scaling.quantize_current(x, fmt, power_of_2=power_of_2)
    for k in (-60, -3, -1, 1, 9, 60):
        shifted = scaling.quantize_current(np.ldexp(x, k), fmt, power_of_2=power_of_2)
        np.testing.assert_array_equal(shifted.codes, q.codes)
        assert_same_bits(shifted.scale, np.ldexp(q.scale, -k).astype(np.float32), f"k={k} scale")
        assert_same_bits(shifted.scale_inv, np.ldexp(q.scale_inv, k).astype(np.float32), f"k={k} scale_inv")
        assert_same_bits(shifted.dequantize(), np.ldexp(q.dequantize(), k).astype(np.float32), f"k={k}")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_scaling_recipes_are_sign_symmetric(fmt):
    """Every recipe's scales come from amaxes (magnitudes), and the saturating cast is
    sign-symmetric (codec), so x -> -x flips the code sign bits and negates dequantize bitwise
    (zeros included: -0.0 and +0.0 swap)."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng)
    sign = formats.get(fmt).sign_mask
    for name, quantize in [("current", lambda v: scaling.quantize_current(v, fmt)),
                           ("rowwise", lambda v: scaling.quantize_rowwise(v, fmt, axis=0)),
                           ("blockwise", lambda v: scaling.quantize_blockwise(v, fmt)),
                           ("blockwise 128x128", lambda v: scaling.quantize_blockwise(v, fmt, block_shape=(128, 128)))]:
        q, negated = quantize(x), quantize(-x)
        np.testing.assert_array_equal(negated.codes, q.codes ^ sign, err_msg=name)
        assert_same_bits(negated.scale, q.scale, name)
        assert_same_bits(negated.dequantize(), -q.dequantize(), name)


@pytest.mark.parametrize("power_of_2", [True, False])
def test_rowwise_scaling_is_per_tensor_scaling_of_each_row(power_of_2):
    """quantize_rowwise gives each slice along ``axis`` its own current scale (scaling docstring):
    row i of the result equals quantize_current of row i alone; hence permuting rows permutes the
    result, and permuting inside rows permutes the codes and keeps the scales."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng, rows=6, columns=50)
    q = scaling.quantize_rowwise(x, "E4M3", power_of_2=power_of_2)
    for i, row in enumerate(x):
        alone = scaling.quantize_current(row, "E4M3", power_of_2=power_of_2)
        np.testing.assert_array_equal(q.codes[i], alone.codes)
        assert_same_bits(q.scale[i, 0], alone.scale)
        assert_same_bits(q.dequantize()[i], alone.dequantize())
    rows, columns = rng.permutation(6), rng.permutation(50)
    assert_same_scaled(scaling.quantize_rowwise(x[rows], "E4M3", power_of_2=power_of_2),
                       scaling.ScaledTensor(q.codes[rows], q.scale[rows], q.scale_inv[rows], q.amax[rows], q.fmt,
                                            "row", 1))
    permuted = scaling.quantize_rowwise(x[:, columns], "E4M3", power_of_2=power_of_2)
    np.testing.assert_array_equal(permuted.codes, q.codes[:, columns])
    assert_same_bits(permuted.scale, q.scale)
    transposed = scaling.quantize_rowwise(x.T, "E4M3", axis=0, power_of_2=power_of_2)
    np.testing.assert_array_equal(transposed.codes, q.codes.T)
    assert_same_bits(transposed.dequantize(), q.dequantize().T)


@pytest.mark.parametrize("power_of_2", [True, False])
def test_blockwise_1x128_is_equivariant_under_row_tile_and_axis_moves(power_of_2):
    """1x128 tiles are 128 consecutive elements of one row along ``axis``: permuting rows, whole
    tiles, or elements inside tiles permutes the codes (and the tile scales with them); blocking
    x along axis 0 is blocking x.T along axis 1, transposed; a 3-d array is its 2-d reshape
    (every leading axis is a row: scaling._tiles)."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng, rows=6, columns=384)
    quantize = lambda v, **kw: scaling.quantize_blockwise(v, "E4M3", power_of_2=power_of_2, **kw)  # noqa: E731
    q = quantize(x)
    rows = rng.permutation(6)
    tile_order = rng.permutation(3)
    across = np.concatenate([np.arange(128) + 128 * t for t in tile_order])
    within = np.concatenate([s + rng.permutation(128) for s in range(0, 384, 128)])
    for index, scale_index in [((rows, slice(None)), (rows, slice(None))),
                               ((slice(None), across), (slice(None), tile_order)),
                               ((slice(None), within), (slice(None), slice(None)))]:
        permuted = quantize(x[index])
        np.testing.assert_array_equal(permuted.codes, q.codes[index])
        assert_same_bits(permuted.scale, q.scale[scale_index])
        assert_same_bits(permuted.dequantize(), q.dequantize()[index])
    transposed = quantize(x.T, axis=0)
    np.testing.assert_array_equal(transposed.codes, q.codes.T)
    assert_same_bits(transposed.scale, q.scale.T)
    assert_same_bits(transposed.dequantize(), q.dequantize().T)
    cube = quantize(x.reshape(2, 3, 384))
    np.testing.assert_array_equal(cube.codes, q.codes.reshape(2, 3, 384))
    assert_same_bits(cube.dequantize(), q.dequantize().reshape(2, 3, 384))


def test_blockwise_128x128_tiles_are_the_same_along_either_axis():
    """A 128x128 tile is the same set of elements whichever axis its columns run along, so
    quantize_blockwise with block_shape=(128, 128) dequantizes identically for axis=-1 and axis=0
    (fp8 docstring: blockwise reuses w for w_t) and is transposition-equivariant; permuting rows
    inside each 128-row band, or whole bands, permutes the result."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng, rows=200, columns=300)
    quantize = lambda v, **kw: scaling.quantize_blockwise(v, "E4M3", block_shape=(128, 128), **kw)  # noqa: E731
    q = quantize(x)
    values = q.dequantize()
    assert_same_bits(quantize(x, axis=0).dequantize(), values)
    assert_same_bits(quantize(x.T).dequantize(), values.T)
    inside_bands = np.concatenate([rng.permutation(128), 128 + rng.permutation(72)])
    assert_same_bits(quantize(x[inside_bands]).dequantize(), values[inside_bands])
    square = np.concatenate([x, -x[:56]])  # 256 rows: two whole bands
    bands = np.concatenate([np.arange(128, 256), np.arange(128)])
    assert_same_bits(quantize(square[bands]).dequantize(), quantize(square).dequantize()[bands])


@pytest.mark.parametrize("power_of_2", [True, False])
def test_scale_from_amax_array_and_scalar_paths_agree(power_of_2):
    """scale_from_amax computes a 0-d amax in Python floats and an array in float32 NumPy; both
    are TransformerEngine's float32 fp8_max / amax (a float64 quotient rounded once to float32 is
    the float32 quotient), so each array element equals the scale of that amax alone."""
    rng = np.random.default_rng(SEED)
    amax = np.concatenate([(1 + rng.random(300)) * 2.0 ** rng.integers(-149, 128, 300),
                           [0.0, np.inf, np.nan, 1e-45, 3.4028235e38, 448.0, 57344.0]]).astype(np.float32)
    for fmt in ("E4M3", "E5M2", "E2M1"):
        array = scaling.scale_from_amax(amax, fmt, power_of_2=power_of_2)
        scalars = np.array([scaling.scale_from_amax(float(a), fmt, power_of_2=power_of_2) for a in amax], np.float32)
        assert_same_bits(array, scalars, fmt)


def test_scaling_is_invariant_to_exact_dtype_conversion_and_memory_layout():
    """The recipes compute in float32 (scaling docstring): float16 input (converted exactly), a
    float64 copy of float32 values, a strided view and a big-endian copy give identical results."""
    rng = np.random.default_rng(SEED)
    x = scaling_input(rng, rows=8, columns=300)
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    x16 = (x * 2.0**-18).astype(np.float16)
    for name, quantize in [("current", lambda v: scaling.quantize_current(v, "E5M2")),
                           ("current pow2", lambda v: scaling.quantize_current(v, power_of_2=True)),
                           ("rowwise", lambda v: scaling.quantize_rowwise(v, axis=0)),
                           ("blockwise", lambda v: scaling.quantize_blockwise(v, power_of_2=False)),
                           ("blockwise 128x128", lambda v: scaling.quantize_blockwise(v, block_shape=(128, 128)))]:
        expected = quantize(x)
        for variant in (x.astype(np.float64), x.astype(">f4"), strided, np.asfortranarray(x)):
            assert_same_scaled(quantize(variant), expected, name)
        assert_same_scaled(quantize(x16), quantize(x16.astype(np.float32)), name + " float16")


# ================================================================================================
# fake_quantize, every recipe
# ================================================================================================
RECIPE_CASES = [
    ("fp32", {}), ("fp8", {}), ("unit", {}), ("current", {}), ("current", {"power_of_2": True}),
    ("delayed", {}), ("mxfp8", {}), ("mxfp8", {"scale_mode": "rceil"}), ("blockwise", {}),
    ("blockwise", {"power_of_2": False}), ("blockwise", {"weight": True}),
    ("fp8", {"saturate_gradients": True}), ("current", {"saturate_gradients": True}),
    ("blockwise", {"saturate_gradients": True}),
]
CASE_IDS = [recipe + "".join(f"-{k}={v}" for k, v in options.items()) for recipe, options in RECIPE_CASES]


def fake_quantize(x, recipe, fmt, axis=-1, **options):
    """fp8.fake_quantize with, for ``delayed``, a fresh scaler whose scale came from one earlier
    step (amax 3, so the scale 448/3 or 57344/3 is not a power of two and some elements saturate)."""
    scaler = None
    if recipe == "delayed":
        scaler = scaling.DelayedScaling(fmt, history_len=4)
        scaler.quantize(np.array([3.0, -1.0], np.float32))
    values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, scaler=scaler, **options)
    return values, stats


FLAVORS = ("moderate", "spiky", "specials", "tiny", "huge")


def fake_quantize_input(rng, rows=130, columns=160, flavor="moderate"):
    """A 130x160 array (not multiples of 32 or 128) with rows of magnitudes 2**-24..2**8, zeros, -0.0
    and values that saturate E4M3 under scale 1. Flavors that send fastcast down its other paths
    (fastcast docstring): "spiky" makes most elements of half the rows lie 2**14 below their
    block's amax (the dense path), "specials" adds a NaN and an Inf (the reference functions),
    "tiny" is spiky with rows of float32 subnormals and near 2**-126 (tiles whose bound is raised
    to 2**-126, cast again through the table), "huge" holds an element 2**110 (block casts decline
    and take the reference functions)."""
    x = rng.standard_normal((rows, columns)) * 2.0 ** rng.integers(-24, 8, (rows, 1))
    x[:, 5::9] = 0.0
    x[:, 6::17] = -0.0
    x[3, :] = rng.integers(-600, 600, columns)
    if flavor in ("spiky", "tiny"):
        quiet = np.ones(columns, bool)
        quiet[::16] = False
        x[rows // 2:, quiet] *= 2.0**-14
    if flavor == "specials":
        x[7, 40], x[rows - 30, columns - 10] = np.nan, -np.inf
    elif flavor == "tiny":
        x[10:13] *= 2.0 ** rng.integers(-125, -115, (3, 1))  # down to float32 subnormals
        x[20:22] = rng.standard_normal((2, columns)) * 2.0**-126
    elif flavor == "huge":
        x[25, 7] = 2.0**110
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", RECIPE_CASES, ids=CASE_IDS)
def test_fake_quantize_is_transposition_equivariant(recipe, options, fmt):
    """fake_quantize(x, axis=1) == fake_quantize(x.T, axis=0).T: the block recipes block along
    ``axis`` wherever it lies, and the per-tensor recipes ignore it (fp8.fake_quantize). With
    128x128 weight tiles the axis does not matter at all. The statistics are counts and an amax
    over the whole tensor, so they agree too."""
    if options.get("weight") and fmt == "E5M2":
        pytest.skip("weight tiles are for forward (E4M3) casts")
    rng = np.random.default_rng(SEED)
    for flavor in FLAVORS:
        x = fake_quantize_input(rng, flavor=flavor)
        values, stats = fake_quantize(x, recipe, fmt, axis=1, **options)
        values_t, stats_t = fake_quantize(x.T, recipe, fmt, axis=0, **options)
        assert_same_bits(values_t.T, values, flavor)
        assert (stats_t.size, stats_t.underflow_count, stats_t.saturation_count) == \
            (stats.size, stats.underflow_count, stats.saturation_count), flavor
        if options.get("weight"):
            assert_same_bits(fake_quantize(x, recipe, fmt, axis=0, **options)[0], values, flavor)
            assert_same_bits(fake_quantize(x.T, recipe, fmt, axis=1, **options)[0].T, values, flavor)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", RECIPE_CASES, ids=CASE_IDS)
def test_fake_quantize_is_invariant_to_exact_dtype_conversion_and_memory_layout(recipe, options, fmt):
    """float16 converts exactly to float32 (fp8.fake_quantize), and a strided view, a Fortran-order,
    big-endian or read-only copy hold the same values: all give the same result as the float32
    array, and none is written to.
    A float64 copy of float32 values does too (every recipe reads it as float32 or exactly; float64
    takes the reference functions where float32 takes fastcast's paths, for mxfp8 and fp8/unit)."""
    if options.get("weight") and fmt == "E5M2":
        pytest.skip("weight tiles are for forward (E4M3) casts")
    rng = np.random.default_rng(SEED)
    for flavor in FLAVORS:
        x = fake_quantize_input(rng, flavor=flavor)
        expected, stats = fake_quantize(x, recipe, fmt, **options)
        read_only = x.copy()
        read_only.flags.writeable = False
        variants = (np.repeat(x, 2, axis=1)[:, ::2], np.asfortranarray(x), x.astype(">f4"), x.astype(np.float64),
                    read_only)
        for variant in variants:
            unchanged = variant.copy()
            values, variant_stats = fake_quantize(variant, recipe, fmt, **options)
            assert_same_bits(variant, unchanged, "the input is never written to")
            assert_same_bits(values, expected, f"{variant.dtype} {variant.flags['C_CONTIGUOUS']} {flavor}")
            assert (variant_stats.underflow_count, variant_stats.saturation_count) == \
                (stats.underflow_count, stats.saturation_count)
    with np.errstate(over="ignore"):  # (Inf where float16 cannot hold x: the same input both ways)
        x16 = (x * 2.0**-12).astype(np.float16)
    assert_same_bits(fake_quantize(x16, recipe, fmt, **options)[0],
                     fake_quantize(x16.astype(np.float32), recipe, fmt, **options)[0], "float16")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", RECIPE_CASES, ids=CASE_IDS)
def test_fake_quantize_is_sign_symmetric_and_row_permutation_equivariant(recipe, options, fmt):
    """fake_quantize(-x) == -fake_quantize(x) bitwise (scales come from magnitudes; the casts are
    sign-symmetric), and permuting rows (the axis that is not contracted, in bands of 128 for
    weight tiles) permutes the result: blocks and tiles lie along the contracted axis."""
    if options.get("weight") and fmt == "E5M2":
        pytest.skip("weight tiles are for forward (E4M3) casts")
    rng = np.random.default_rng(SEED)
    for flavor in ("moderate", "spiky", "tiny", "huge"):
        x = fake_quantize_input(rng, flavor=flavor)
        values, _ = fake_quantize(x, recipe, fmt, **options)
        assert_same_bits(fake_quantize(-x, recipe, fmt, **options)[0], -values, f"negated, {flavor}")
        if options.get("weight"):
            rows = np.concatenate([rng.permutation(128), 128 + rng.permutation(2)])
        else:
            rows = rng.permutation(x.shape[0])
        assert_same_bits(fake_quantize(x[rows], recipe, fmt, **options)[0], values[rows], f"rows permuted, {flavor}")


SHIFT_CASES = [("current", {}), ("current", {"power_of_2": True}), ("mxfp8", {}), ("mxfp8", {"scale_mode": "even"}),
               ("blockwise", {}), ("blockwise", {"power_of_2": False}), ("blockwise", {"weight": True})]


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", SHIFT_CASES,
                         ids=[r + "".join(f"-{k}={v}" for k, v in o.items()) for r, o in SHIFT_CASES])
def test_fake_quantize_commutes_with_powers_of_two(recipe, options, fmt):
    """fake_quantize(2**k * x) == 2**k * fake_quantize(x) bitwise for the recipes whose scales come
    from the tensor itself (current, mxfp8, blockwise): the scale moves by 2**-k exactly (see
    test_current_scaling_is_invariant_under_powers_of_two and the MX shift test), so the scaled
    values, their rounding and the way back are the same up to 2**k. The range here keeps every
    input and scale a normal float32 and no MX exponent clamped."""
    rng = np.random.default_rng(SEED)
    for flavor in ("moderate", "spiky"):
        x = fake_quantize_input(rng, flavor=flavor)
        values, stats = fake_quantize(x, recipe, fmt, **options)
        for k in (-70, -30, -1, 1, 30, 95):  # 2**95: magnitudes past 2**100 take fastcast's other path
            shifted, shifted_stats = fake_quantize(np.ldexp(x, k), recipe, fmt, **options)
            assert_same_bits(shifted, np.ldexp(values, k).astype(np.float32), f"k={k}, {flavor}")
            assert (shifted_stats.underflow_count, shifted_stats.saturation_count) == \
                (stats.underflow_count, stats.saturation_count), f"k={k}, {flavor}"


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", [
    ("fp32", {}), ("fp8", {}), ("unit", {}), ("current", {"power_of_2": True}), ("mxfp8", {}),
    ("mxfp8", {"scale_mode": "ceil"}), ("blockwise", {}), ("blockwise", {"weight": True})])
def test_fake_quantize_is_idempotent(recipe, options, fmt):
    """Casting a cast result again changes nothing (bitwise) where the scales are powers of two:
    its values are grid values times the scale, and its amax gives the same or a finer grid (the
    largest value still rounds into the same binade band, see the MX idempotence test). fp8/unit
    are plain quantize (idempotent by the codec relation); fp32 is the identity."""
    if options.get("weight") and fmt == "E5M2":
        pytest.skip("weight tiles are for forward (E4M3) casts")
    rng = np.random.default_rng(SEED)
    for flavor in ("moderate", "spiky", "tiny", "huge"):
        once, _ = fake_quantize(fake_quantize_input(rng, flavor=flavor), recipe, fmt, **options)
        assert_same_bits(fake_quantize(once, recipe, fmt, **options)[0], once, flavor)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_fake_quantize_recipes_that_coincide(fmt):
    """``unit`` is ``fp8`` (both are codec.quantize with scale 1: fp8 docstring); ``delayed`` with a
    fresh scaler (scale 1) casts like ``fp8`` (E4M3 saturates in both; E5M2 clamps become Inf in
    delayed as overflow does in fp8); ``current`` on a tensor whose amax is fp8_max has scale 1 and
    casts like ``fp8`` too; and ``fp32`` returns x as float32."""
    rng = np.random.default_rng(SEED)
    x = fake_quantize_input(rng)
    expected, _ = fp8.fake_quantize(x, "fp8", fmt)
    assert_same_bits(fp8.fake_quantize(x, "unit", fmt)[0], expected, "unit")
    fresh = scaling.DelayedScaling(fmt)
    assert_same_bits(fp8.fake_quantize(x, "delayed", fmt, scaler=fresh)[0], expected, "delayed, scale 1")
    finite = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    finite = np.clip(finite, -formats.get(fmt).max, formats.get(fmt).max)
    finite[0, 0] = formats.get(fmt).max
    assert_same_bits(fp8.fake_quantize(finite, "current", fmt)[0], fp8.fake_quantize(finite, "fp8", fmt)[0], "current")
    assert_same_bits(fp8.fake_quantize(x.astype(np.float64), "fp32", fmt)[0], x, "fp32")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", [case for case in RECIPE_CASES if not case[1].get("weight")],
                         ids=[i for i, case in zip(CASE_IDS, RECIPE_CASES) if not case[1].get("weight")])
def test_fake_quantize_along_any_axis_of_a_3d_array_is_moving_that_axis_last(recipe, options, fmt):
    """Blocks and tiles run along ``axis`` wherever it lies (fp8.fake_quantize; fastcast describes
    them on a view and casts views in memory order): casting a 3-d array along axis a equals casting
    np.moveaxis(x, a, -1) (a view, and a contiguous copy) along the last axis and moving it back.
    Lengths 70 and 50 leave partial MX blocks and 1x128 tiles."""
    rng = np.random.default_rng(SEED)
    for flavor in FLAVORS:
        x = fake_quantize_input(rng, rows=280, columns=50, flavor=flavor).reshape(4, 70, 50)
        for axis in (0, 1, 2):
            values, stats = fake_quantize(x, recipe, fmt, axis=axis, **options)
            moved = np.moveaxis(x, axis, -1)
            for variant in (moved, np.ascontiguousarray(moved)):
                expected, moved_stats = fake_quantize(variant, recipe, fmt, axis=-1, **options)
                assert_same_bits(values, np.moveaxis(expected, -1, axis), f"axis {axis}, {flavor}")
                assert (stats.underflow_count, stats.saturation_count) == \
                    (moved_stats.underflow_count, moved_stats.saturation_count), f"axis {axis}, {flavor}"


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", [case for case in RECIPE_CASES if not case[1].get("weight")],
                         ids=[i for i, case in zip(CASE_IDS, RECIPE_CASES) if not case[1].get("weight")])
def test_fake_quantize_depends_on_the_shape_only_through_its_blocks(recipe, options, fmt):
    """Per-tensor recipes have one scale for the whole tensor, so any reshape (0-d included)
    commutes with the cast; block recipes block along the last axis only, so merging or splitting
    the leading axes commutes with it too (fp8 docstring, Recipes)."""
    rng = np.random.default_rng(SEED)
    for flavor in FLAVORS:
        x = fake_quantize_input(rng, rows=40, columns=160, flavor=flavor)
        values, _ = fake_quantize(x, recipe, fmt, **options)
        assert_same_bits(fake_quantize(x.reshape(2, 4, 5, 160), recipe, fmt, **options)[0],
                         values.reshape(2, 4, 5, 160), flavor)
        if recipe in ("fp8", "unit", "current", "delayed"):
            assert_same_bits(fake_quantize(x.reshape(-1), recipe, fmt, **options)[0], values.reshape(-1), flavor)
            assert_same_bits(fake_quantize(x.reshape(160, 40), recipe, fmt, **options)[0], values.reshape(160, 40),
                             flavor)
            one = np.float32(x[3, 7])
            assert_same_bits(fake_quantize(one, recipe, fmt, **options)[0],
                             fake_quantize(one.reshape(1), recipe, fmt, **options)[0].reshape(()), "0-d")


def test_delayed_scaling_records_a_running_max_whatever_the_order():
    """DelayedScaling.quantize(update=False) records the running max of this step's amaxes
    (scaling docstring), and under "max" the scale comes from the largest amax in the window
    (NaN skipped, as fmaxf): casting x and y in one step gives the scale of casting their
    concatenation, and feeding the same amaxes in any order (all within the window) ends with
    the same scale and scale_inv."""
    rng = np.random.default_rng(SEED)
    x, y = rng.standard_normal(50).astype(np.float32), 7 * rng.standard_normal(30).astype(np.float32)
    apart, together = scaling.DelayedScaling("E4M3", history_len=8), scaling.DelayedScaling("E4M3", history_len=8)
    apart.quantize(x, update=False)
    apart.quantize(y, update=False)
    apart.update()
    together.quantize(np.concatenate([x, y]))
    assert_same_bits(np.float32(apart.scale), np.float32(together.scale))
    assert_same_bits(apart.amax_history, together.amax_history)
    amaxes = np.float32([0.5, 3.0, 0.0, np.nan, 1e-3, 250.0, 2.0])
    scales = set()
    for _ in range(5):
        scaler = scaling.DelayedScaling("E5M2", history_len=16)
        for amax in rng.permutation(amaxes):
            scaler.record_amax(amax)
            scaler.update()
        scales.add((float(scaler.scale), float(scaler.scale_inv)))
    assert len(scales) == 1, scales


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_delayed_fake_quantize_records_the_same_history_for_any_layout(fmt):
    """fake_quantize under ``delayed`` records max|x| in the scaler's history (fp8.fake_quantize,
    scaling.DelayedScaling): x, its transpose, a strided view and a float16 copy of the same values
    leave the same history, and after update() the same scale."""
    rng = np.random.default_rng(SEED)
    x = (fake_quantize_input(rng, flavor="spiky") * 2.0**-10).astype(np.float16).astype(np.float32)  # float16 values
    scalers = []
    for variant in (x, x.T, np.repeat(x, 2, axis=1)[:, ::2], x.astype(np.float16)):
        scaler = scaling.DelayedScaling(fmt, history_len=4)
        scaler.quantize(np.array([3.0], np.float32))
        fp8.fake_quantize(variant, "delayed", fmt, scaler=scaler)
        scaler.update()
        scalers.append(scaler)
    for scaler in scalers[1:]:
        assert_same_bits(scaler.amax_history, scalers[0].amax_history)
        assert_same_bits(np.float32(scaler.scale), np.float32(scalers[0].scale))
