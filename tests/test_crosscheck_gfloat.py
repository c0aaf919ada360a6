"""Bit-for-bit cross-checks of minifp8's codec and MX quantization against gfloat.

gfloat (Graphcore, PyPI ``gfloat``, checked with 0.5.2) is an independent generic float codec:
a format is a ``FormatInfo`` (minifp8's ``FloatFormat`` was inspired by it; no code is shared).
Rounding is ``round_ndarray`` / ``round_float``, encoding of the rounded value is
``encode_ndarray`` / ``encode_float``; MX is ``compute_scale_amax`` + ``encode_block`` /
``quantize_block``. The test extra installs it (so CI runs these); skipped where it is absent.

Shared vocabulary: nearest_even = TiesToEven, nearest_away = TiesToAway, toward_zero = TowardZero,
stochastic = Stochastic with ``srbits = random_bits`` and ``srnumbits = random_bit_count``: both
round the discarded fraction to that many bits (ties to even), add the random integer and round
away on a carry (gfloat ``round_ndarray.py``, case ``RoundMode.Stochastic``; minifp8
``codec._encode_exact``), so the bits map one to one. The FNUZ formats are gfloat's
``format_info_p3109(8, p, Signed, Finite)``, whose fields coincide with E4M3FNUZ / E5M2FNUZ.

Where the libraries agree we assert equal codes; each difference is asserted explicitly:

1. NaN codes: gfloat writes ``fi.code_of_nan`` (0xFF for E4M3/E5M2, whatever the sign); minifp8
   keeps the sign and writes the quiet NaN 0x7E/0xFE for E5M2. Both decode to NaN (FNUZ: equal).
2. FP6/FP4 with saturate=False: gfloat raises ValueError on overflow or Inf ("No Infs or NaNs in
   format ..., and sat=False", round.py); minifp8 saturates (these formats cannot spell
   Inf/NaN), which equals gfloat's sat=True code.
3. (No longer a difference.) FNUZ +-Inf with saturate=True: both give +-max, as ONNX Cast-24 says
   (gfloat: the ``sat`` branch of its overflow test). minifp8 followed Cast-19's NaN 0x80 before.
4. E8M0 (precision 1) ties under nearest_even: gfloat takes the even code (``code_is_odd =
   isodd(expval + bias)`` when ``precision == 1``); minifp8 rounds up (ml_dtypes), i.e. gives
   gfloat's TiesToAway code. They differ where the lower neighbour's code is even.
5. E8M0 below 2**-127: gfloat's round_float leaves the value unclamped (no subnormals, no zero)
   and encode_float sends ``v < fi.min`` to NaN 0xFF; minifp8 gives 0x00 (2**-127, the nearest
   value). (gfloat's encode_ndarray skips that test for unsigned formats and returns wrapped
   codes, so the scalar path is used there.)
6. MX floor scale: gfloat computes ``floor(log2(amax))`` with a float log2 in the block's dtype,
   which rounds up to the integer k for amax just below 2**k; minifp8 reads the exponent bits.
   There gfloat's scale is one above, and with gfloat given the exact floor (from frexp) every
   scale and code agrees.
7. MX blocks holding NaN or Inf: minifp8 gives scale 0xFF and element codes 0; gfloat gives
   NaN scale and NaN codes for NaN, and the finite scale 2**127 (clipped log2 of Inf) for Inf.
"""
import warnings

import numpy as np
import pytest

from minifp8 import codec, formats, mx, testing

gfloat = pytest.importorskip("gfloat")
from gfloat import (  # noqa: E402
    RoundMode, compute_scale_amax, decode_ndarray, encode_block, encode_float, encode_ndarray,
    quantize_block, round_float, round_ndarray)
from gfloat import formats as gf  # noqa: E402

GFLOAT_FORMATS = {
    "E4M3": gf.format_info_ocp_e4m3,
    "E5M2": gf.format_info_ocp_e5m2,
    "E3M2": gf.format_info_ocp_e3m2,
    "E2M3": gf.format_info_ocp_e2m3,
    "E2M1": gf.format_info_ocp_e2m1,
    "E8M0": gf.format_info_ocp_e8m0,
    "E4M3FNUZ": gf.format_info_p3109(8, 4, gfloat.Signedness.Signed, gfloat.Domain.Finite),
    "E5M2FNUZ": gf.format_info_p3109(8, 3, gfloat.Signedness.Signed, gfloat.Domain.Finite),
}
SIGNED = [name for name in GFLOAT_FORMATS if name != "E8M0"]
MODES = {"nearest_even": RoundMode.TiesToEven, "nearest_away": RoundMode.TiesToAway,
         "toward_zero": RoundMode.TowardZero}
MX_FORMATS = {"MXFP8_E4M3": gf.format_info_mxfp8_e4m3, "MXFP8_E5M2": gf.format_info_mxfp8_e5m2,
              "MXFP6_E3M2": gf.format_info_mxfp6_e3m2, "MXFP6_E2M3": gf.format_info_mxfp6_e2m3,
              "MXFP4_E2M1": gf.format_info_mxfp4_e2m1}


@pytest.fixture(autouse=True)
def _quiet_gfloat():
    # gfloat's ldexp/cast steps overflow on Inf and huge inputs by design (then masked).
    with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def gfloat_codes(fi, x, rnd, sat, srbits=None, srnumbits=0):
    """gfloat's vectorised round-then-encode, as int64 codes."""
    return encode_ndarray(fi, round_ndarray(fi, x, rnd, sat, srbits, srnumbits)).astype(np.int64)


def gfloat_code_scalar(fi, v, rnd, sat):
    """gfloat's scalar path for one value."""
    return encode_float(fi, round_float(fi, float(v), rnd, sat))


def minifp8_codes(x, name, **options):
    return codec.encode(x, name, **options).astype(np.int64)


def is_nan_code(name, codes):
    return np.isnan(formats.get(name).values()[codes])


def float64_near_midpoints(name):
    """Every midpoint between neighbouring values (taken from gfloat's decode), the overflow
    threshold, and each +- one float64 ulp; both signs for signed formats."""
    fi = GFLOAT_FORMATS[name]
    values = decode_ndarray(fi, np.arange(2**fi.k))
    grid = np.unique(np.abs(values[np.isfinite(values)]))
    top_spacing = grid[-1] - grid[-2]
    points = np.concatenate([grid, (grid[1:] + grid[:-1]) / 2, [grid[-1] + top_spacing / 2]])
    points = np.concatenate([points, np.nextafter(points, np.inf), np.nextafter(points, 0)])
    points = points[points > 0]
    return np.concatenate([points, -points]) if fi.is_signed else points


# ---- formats and decode ------------------------------------------------------------------------
def test_fnuz_formats_are_gfloats_p3109_finite_formats():
    for name, precision, bias in (("E4M3FNUZ", 4, 8), ("E5M2FNUZ", 3, 16)):
        fi = GFLOAT_FORMATS[name]
        assert (fi.k, fi.precision, fi.bias, fi.has_nz, fi.num_high_nans, fi.domain) == \
            (8, precision, bias, False, 0, gfloat.Domain.Finite)
        assert fi.code_of_nan == 0x80


@pytest.mark.parametrize("name", GFLOAT_FORMATS)
def test_decode_every_code(name):
    fi = GFLOAT_FORMATS[name]
    codes = np.arange(2**fi.k)
    expected = decode_ndarray(fi, codes)
    got = codec.decode(codes.astype(np.uint8), name).astype(np.float64)
    # gfloat decodes every NaN code to +NaN; minifp8 keeps the sign bit: NaN is compared as NaN.
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(got[finite], expected[finite])
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(expected[finite]))  # -0.0
    fmt = formats.get(name)
    assert (fmt.max, fmt.emax, fmt.min_subnormal) == (fi.max, fi.emax, fi.smallest)


# ---- encode: nearest_even, nearest_away, toward_zero -------------------------------------------
def check_signed_encode(name, x, rounding, saturate):
    """minifp8 == gfloat on every finite input gfloat accepts, with differences 1 and 2 asserted (and 3,
    now an agreement)."""
    fi, fmt = GFLOAT_FORMATS[name], formats.get(name)
    rnd = MODES[rounding]
    got = minifp8_codes(x, name, rounding=rounding, saturate=saturate)
    nan_input = np.isnan(x)
    if not fmt.has_nan and not saturate:
        # 2. Beyond max, gfloat raises where the value rounds above max and gives max otherwise;
        # minifp8 saturates: gfloat's sat=True code. Within max the two settings coincide.
        beyond = np.abs(x) > fi.max
        expected = gfloat_codes(fi, x, rnd, True)
        expected[~beyond] = gfloat_codes(fi, x[~beyond], rnd, False)
        # gfloat's scalar sat=False path on every 7th value beyond max, and on +-Inf: it raises
        # for +-Inf, and (to nearest) from max + half the top spacing on, where the rounded value
        # exceeds max (max has an odd significand, so the tie rounds up); else it gives +-max.
        threshold = fi.max + 2.0 ** (fi.emax - fi.precision + 1) / 2
        for v in np.concatenate([x[beyond][::7], x[np.isinf(x)]]):
            should_raise = np.isinf(v) or (rounding != "toward_zero" and abs(v) >= threshold)
            try:
                code = gfloat_code_scalar(fi, v, rnd, False)
            except ValueError as error:
                assert should_raise and "No Infs or NaNs" in str(error)
            else:
                assert not should_raise and code == fmt.max_code | (fmt.sign_mask if v < 0 else 0)
        np.testing.assert_array_equal(np.abs(decode_ndarray(fi, expected[beyond])), fi.max)
    else:
        expected = gfloat_codes(fi, x, rnd, saturate)
    if fmt.nan_style == "negative_zero" and saturate:  # 3. FNUZ +-Inf saturating: +-max in both
        inf = np.isinf(x)
        np.testing.assert_array_equal(expected[inf], fmt.max_code | np.where(x[inf] < 0, 0x80, 0))
    # 1. NaN codes: both NaN (equal for FNUZ, whose only NaN is 0x80); a NaN input is NaN in gfloat too.
    nan_out = is_nan_code(name, expected)
    assert nan_out[nan_input].all()
    np.testing.assert_array_equal(is_nan_code(name, got), nan_out)
    if fmt.nan_style == "negative_zero":
        np.testing.assert_array_equal(got[nan_out], expected[nan_out])
    np.testing.assert_array_equal(got[~nan_out], expected[~nan_out])
    return int(x.size)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("rounding", MODES)
@pytest.mark.parametrize("name", SIGNED)
def test_encode_edge_and_float64_midpoints(name, rounding, saturate):
    edge = next(testing.sweep(name, kind="edge"))
    check_signed_encode(name, edge, rounding, saturate)
    check_signed_encode(name, float64_near_midpoints(name), rounding, saturate)
    # gfloat's scalar path agrees with its vectorised one on the edges (finite, in range)
    fi = GFLOAT_FORMATS[name]
    sample = edge[np.isfinite(edge) & (np.abs(edge) <= fi.max)][::5]
    scalar = [gfloat_code_scalar(fi, v, MODES[rounding], saturate) for v in sample]
    np.testing.assert_array_equal(minifp8_codes(sample, name, rounding=rounding, saturate=saturate), scalar)


STRUCTURED_STRIDE = 17  # every 17th of the 524,288 structured float32 values: 30,841 of them


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", SIGNED)
def test_encode_structured_slice(name, saturate):
    x = next(testing.sweep(kind="structured"))[::STRUCTURED_STRIDE]
    if not formats.get(name).has_nan:
        x = x[~np.isnan(x)]
    for rounding in MODES:
        check_signed_encode(name, x, rounding, saturate)


# ---- E8M0 --------------------------------------------------------------------------------------
def e8m0_inputs():
    edge = next(testing.sweep("E8M0", kind="edge")).astype(np.float64)
    structured = next(testing.sweep(kind="structured"))[::STRUCTURED_STRIDE].astype(np.float64)
    x = np.concatenate([edge, structured, float64_near_midpoints("E8M0")])
    return x[~np.isnan(x) & (x >= 2.0**-127)]  # positive, in range (or above: overflow, +Inf)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("rounding", MODES)
def test_encode_e8m0(rounding, saturate):
    fi = GFLOAT_FORMATS["E8M0"]
    x = e8m0_inputs()
    got = minifp8_codes(x, "E8M0", rounding=rounding, saturate=saturate)
    expected = gfloat_codes(fi, x, MODES[rounding], saturate)
    mantissa, _ = np.frexp(x)
    tie = mantissa == 0.75  # 1.5 * 2**e: halfway between 2**e and 2**(e+1)
    if rounding == "nearest_even":
        # 4. gfloat: the even code; minifp8 rounds up, which is gfloat's TiesToAway code.
        away = gfloat_codes(fi, x[tie], RoundMode.TiesToAway, saturate)
        assert np.all(expected[tie] % 2 == 0)
        np.testing.assert_array_equal(got[tie], away)
        assert np.count_nonzero(expected[tie] != away) >= 100  # the rule is exercised
        got, expected = got[~tie], expected[~tie]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("rounding", MODES)
def test_encode_e8m0_below_range_zero_and_negative(rounding, saturate):
    fi = GFLOAT_FORMATS["E8M0"]
    tiny = np.array([2.0**-149, 2.0**-128, 1.5 * 2.0**-128, np.nextafter(2.0**-127, 0)])
    # 5. gfloat (scalar path) rounds without a lower bound, then gives NaN where the result lies
    # below 2**-127: the exact 2**-149 and 2**-128 always, the last two only toward zero (to
    # nearest they round up to 2**-127). minifp8 gives 2**-127 for all: gfloat's code of 2**-127.
    nan_below = [0xFF, 0xFF] + ([0xFF, 0xFF] if rounding == "toward_zero" else [0x00, 0x00])
    assert [gfloat_code_scalar(fi, v, MODES[rounding], saturate) for v in tiny] == nan_below
    np.testing.assert_array_equal(minifp8_codes(tiny, "E8M0", rounding=rounding, saturate=saturate),
                                  gfloat_code_scalar(fi, 2.0**-127, MODES[rounding], saturate))
    # zero and finite negatives: NaN in both (gfloat: v < fi.min in encode_float)
    others = np.array([0.0, -0.0, -2.0**-130, -1.0, -3.0e38])
    assert [gfloat_code_scalar(fi, v, MODES[rounding], saturate) for v in others] == [0xFF] * 5
    np.testing.assert_array_equal(minifp8_codes(others, "E8M0", rounding=rounding, saturate=saturate), 0xFF)


# ---- stochastic --------------------------------------------------------------------------------
def stochastic_inputs(name, rng, n):
    """float64 values across the format's binades, fractions of all lengths, and exact ties at
    each random-bit resolution (k/2**c quanta for c up to 33)."""
    fi, fmt = GFLOAT_FORMATS[name], formats.get(name)
    lo = -fi.bias - fi.precision - 1 if fi.has_subnormals else -127
    exponents = rng.integers(lo, fi.emax + 2, n)
    x = np.ldexp(rng.uniform(1, 2, n), exponents)
    grid = decode_ndarray(fi, np.arange(2**fi.k))
    grid = np.unique(np.abs(grid[np.isfinite(grid)]))
    k = rng.integers(0, grid.size - 1, n)
    quantum = grid[k + 1] - grid[k]
    c = rng.integers(1, 34, n)
    ties = grid[k] + quantum * np.ldexp(rng.integers(0, 2**33, n) % np.ldexp(1, c), -c)
    x = np.concatenate([x, ties])
    if fmt.signed:
        x = np.where(rng.random(x.size) < 0.5, -x, x)
    else:
        x = x[x >= 2.0**-127]
    if not fmt.has_nan:
        x = np.clip(x, -fi.max, fi.max)  # gfloat raises on an FP6/FP4 overflow unless sat
    return x


@pytest.mark.parametrize("name", GFLOAT_FORMATS)
def test_stochastic_rounding(name):
    rng = np.random.default_rng(20240917)
    fi = GFLOAT_FORMATS[name]
    for bit_count in (1, 2, 3, 8, 13, 23, 32):
        for saturate in (False, True):
            x = stochastic_inputs(name, rng, 1500)
            bits = rng.integers(0, 2**bit_count, x.size, dtype=np.uint64)
            bits[:20] = 0
            bits[20:40] = 2**bit_count - 1
            for dtype in (np.float64, np.float32):
                xs = x.astype(dtype)
                got = minifp8_codes(xs, name, rounding="stochastic", saturate=saturate,
                                    random_bits=bits, random_bit_count=bit_count)
                expected = gfloat_codes(fi, xs, RoundMode.Stochastic, saturate,
                                        srbits=bits.astype(np.int64), srnumbits=bit_count)
                nan_out = is_nan_code(name, expected)
                np.testing.assert_array_equal(is_nan_code(name, got), nan_out)  # 1. NaN codes
                np.testing.assert_array_equal(got[~nan_out], expected[~nan_out])
    # gfloat's scalar stochastic path agrees on a sample
    x = stochastic_inputs(name, rng, 60)
    bits = rng.integers(0, 2**13, x.size, dtype=np.uint64)
    scalar = [encode_float(fi, round_float(fi, float(v), RoundMode.Stochastic, True, int(b), 13))
              for v, b in zip(x, bits)]
    np.testing.assert_array_equal(minifp8_codes(x, name, rounding="stochastic", saturate=True,
                                                random_bits=bits, random_bit_count=13), scalar)


# ---- MX ----------------------------------------------------------------------------------------
def exact_floor_scale(emax, block):
    """OCP MX floor rule with an exact floor(log2(amax)) (frexp), clipped as gfloat clips."""
    amax = float(np.max(np.abs(block)))
    if amax == 0:
        return 2.0**-127
    return 2.0 ** int(np.clip(np.frexp(amax)[1] - 1 - emax, -127, 127))


def mx_blocks(rng, dtype):
    n = 24  # 24 blocks of 32: gfloat's block functions are scalar Python
    blocks = rng.standard_normal((n, 32)) * np.ldexp(1.0, rng.integers(-140, 118, n))[:, None]
    blocks[0] = 0.0
    blocks[0, ::3] = -0.0                                 # all-zero block: scale 0x00
    blocks[1] = np.ldexp(rng.standard_normal(32), -145)  # scale clipped at 2**-127
    blocks[2] = rng.standard_normal(32)
    blocks[2, 4] = 2.0**20                                # amax a power of two
    blocks[3] = rng.integers(-8, 9, 32) * 56.0           # element ties and exact maxima
    blocks = blocks.astype(dtype)
    finfo = np.finfo(dtype)
    blocks[4, 0] = finfo.max                              # top of the dtype
    blocks[5] = blocks[6] = 1.0
    blocks[5, 7] = np.nextafter(dtype(2.0**20), dtype(0))  # 6. float log2 rounds up to 20
    blocks[6, 7] = np.nextafter(dtype(2.0**-100), dtype(0))
    return blocks


def gfloat_mx(fi, blocks, rnd, compute_scale, with_values=True):
    scales, codes, values = [], [], []
    for block in blocks:
        scale = compute_scale(fi.etype.emax, block)
        encoded = list(encode_block(fi, scale, block / scale, rnd))
        scales.append(encoded[0])
        codes.append(encoded[1:])
        if with_values:
            values.append(quantize_block(fi, block, compute_scale, rnd))
    return np.array(scales), np.array(codes), np.array(values)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mx_name", MX_FORMATS)
def test_mx_floor_scale_blocks(mx_name, dtype):
    rng = np.random.default_rng(7)
    fi = MX_FORMATS[mx_name]
    blocks = mx_blocks(rng, dtype)
    amax = np.abs(blocks).max(axis=1)
    positive = np.where(amax > 0, amax, 1)
    exact_exponent = np.clip(np.frexp(positive)[1] - 1 - fi.etype.emax, -127, 127)
    float_log2_exponent = np.clip(np.floor(np.log2(positive)) - fi.etype.emax, -127, 127)  # in dtype
    log2_rounds_up = (float_log2_exponent != exact_exponent) & (amax > 0)
    assert log2_rounds_up[5] and not log2_rounds_up[[0, 1, 2, 3]].any()
    for rounding, rnd in MODES.items():
        got = mx.quantize(blocks, mx_name, scale_mode="floor", rounding=rounding)
        got_scales = got.scales.ravel().astype(np.int64)
        # gfloat's own scale rule: equal except where its float log2 rounds up (6.)
        scales, codes, values = gfloat_mx(fi, blocks, rnd, compute_scale_amax)
        np.testing.assert_array_equal(scales[log2_rounds_up], float_log2_exponent[log2_rounds_up] + 127)
        np.testing.assert_array_equal(scales[log2_rounds_up], got_scales[log2_rounds_up] + 1)
        np.testing.assert_array_equal(scales[~log2_rounds_up], got_scales[~log2_rounds_up])
        np.testing.assert_array_equal(codes[~log2_rounds_up], got.codes[~log2_rounds_up])
        dequantized = got.dequantize()
        # minifp8 dequantizes to float32: gfloat's float64 values cast to float32 (exact, except
        # beyond float32's range, which only the float64 block of finfo.max reaches: Inf in both)
        values = values.astype(np.float32)
        np.testing.assert_array_equal(values[~log2_rounds_up], dequantized[~log2_rounds_up])
        np.testing.assert_array_equal(np.signbit(values[~log2_rounds_up]),
                                      np.signbit(dequantized[~log2_rounds_up]))
        # gfloat with the exact floor(log2(amax)): every block agrees
        scales, codes, _ = gfloat_mx(fi, blocks, rnd, exact_floor_scale, with_values=False)
        np.testing.assert_array_equal(scales, got_scales)
        np.testing.assert_array_equal(codes, got.codes)


@pytest.mark.parametrize("mx_name", MX_FORMATS)
def test_mx_blocks_with_nan_or_inf(mx_name):
    fi = MX_FORMATS[mx_name]
    block = np.linspace(-3, 3, 32)
    nan_block, inf_block = block.copy(), block.copy()
    nan_block[5], inf_block[9] = np.nan, -np.inf
    got = mx.quantize(np.stack([nan_block, inf_block]), mx_name)
    np.testing.assert_array_equal(got.scales.ravel(), [0xFF, 0xFF])  # 7. minifp8: NaN scale ...
    np.testing.assert_array_equal(got.codes, 0)                      # ... and zero codes
    # gfloat: NaN amax gives the NaN scale too; its elements are NaN codes, or a ValueError where
    # the element format has no NaN
    scale = compute_scale_amax(fi.etype.emax, nan_block)
    if fi.etype.num_nans:
        encoded = list(encode_block(fi, scale, nan_block / scale))
        assert encoded[0] == 0xFF and all(code == fi.etype.code_of_nan for code in encoded[1:])
    else:
        with pytest.raises(ValueError, match="No NaN"):
            list(encode_block(fi, scale, nan_block / scale))
    # gfloat: Inf amax gives the clipped finite scale 2**127 (0xFE); -Inf saturates to -max
    scale = compute_scale_amax(fi.etype.emax, inf_block)
    encoded = list(encode_block(fi, scale, inf_block / scale))
    assert scale == 2.0**127 and encoded[0] == 0xFE
    assert encoded[1 + 9] == fi.etype.code_of_min
