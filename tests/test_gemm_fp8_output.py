"""compare_matmul for outputs written as FP8 codes (``output="E4M3"``, ``output_scale``, ``saturate``).

A fused-epilogue kernel writes ``encode(float32(S * output_scale))`` of its hidden float32 result S.

- Soundness: simulated correct kernels (float32 sums in order, reversed, pairwise, per 32-block
  partial sums promoted with their scales, BLAS sgemm), per-tensor and MX (E8M0) scales, E4M3 and
  E5M2 (and FNUZ, FP6, FP4) outputs, saturating or not, pass. The output scales put outputs on FP8
  rounding midpoints (the kernels' results within a few float32 ulps of them), at the overflow
  threshold and beyond the format's max; operands built so that the exact product lies just off a
  midpoint make the kernels' codes differ from the cast of the exact product, or of its float32
  rounding, which they must pass anyway; as must a float32 result that overflowed to Inf.
- Sensitivity: a code one off where a single code is allowed, a sign flip, a wrong output scale, the
  other saturation rule, NaN and Inf outputs where they do not belong: each fails, with its class.
- The rule against brute force: every float32 value within the tolerance of the reference,
  scaled and cast, gives a code inside the allowed range, which is at most one code wider each side.
- Bad input: clear TypeErrors and ValueErrors.
"""
import re
import warnings

import numpy as np
import pytest

from minifp8 import codec, formats, gemm

SEED = 20260601
M, K, N = 8, 256, 16


# ---- simulated kernels: float32 results -----------------------------------------------------------
def expand(scales, shape):
    """Each scale over its block, by np.repeat (not gemm's broadcasting), as float32."""
    scales = np.asarray(scales, np.float32).reshape((1, 1) if np.ndim(scales) == 0 else np.shape(scales))
    return np.repeat(np.repeat(scales, shape[0] // scales.shape[0], 0), shape[1] // scales.shape[1], 1)


def elements(p):
    return codec.decode(p["a_codes"], p["a_format"]), codec.decode(p["b_codes"], p["b_format"])


def dequantized32(p):
    """Each operand dequantised in float32, one rounding per element."""
    a, b = elements(p)
    return a * expand(p["a_scales"], a.shape), b * expand(p["b_scales"], b.shape)


def sequential(a, b, order=None):
    accumulator = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]) if order is None else order:
        accumulator = accumulator + a[:, k, None] * b[None, k, :]
    return accumulator


def pairwise(a, b):
    terms = a.T[:, :, None] * b[:, None, :]  # K x M x N float32 products
    while len(terms) > 1:
        if len(terms) % 2:
            terms = np.concatenate([terms, np.zeros_like(terms[:1])])
        terms = terms[0::2] + terms[1::2]
    return terms[0]


def promoted(p, block=32):
    """Element products summed per K block in float32, each block's sum times its two scales (float32),
    added into float32 (DeepSeek-V3's promotion; an MX kernel's)."""
    a, b = elements(p)
    a_scales, b_scales = expand(p["a_scales"], a.shape), expand(p["b_scales"], b.shape)
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for start in range(0, a.shape[1], block):
        k = slice(start, start + block)
        total = total + sequential(a[:, k], b[k]) * a_scales[:, start, None] * b_scales[None, start, :]
    return total


KERNELS = {
    "sequential": lambda p: sequential(*dequantized32(p)),
    "reversed": lambda p: sequential(*dequantized32(p), order=range(p["a_codes"].shape[1] - 1, -1, -1)),
    "pairwise": lambda p: pairwise(*dequantized32(p)),
    "promoted": promoted,
    "sgemm": lambda p: np.matmul(*dequantized32(p)),
}


def fused(result, scale, fmt, saturate):
    """The epilogue: the float32 result times the output scale, in float32, cast to ``fmt``."""
    with np.errstate(over="ignore"):
        return codec.encode(result * np.float32(scale), fmt, saturate=saturate)


def e8m0(exponents):
    return np.ldexp(np.float32(1), np.asarray(exponents, np.int32)).astype(np.float32)


def problem(layout, seed=0, rows=M, inner=K, columns=N):
    rng = np.random.default_rng([SEED, seed])
    a_codes = codec.encode(rng.normal(0, 2, (rows, inner)), "E4M3", saturate=True)
    b_codes = codec.encode(rng.normal(0, 2, (inner, columns)), "E4M3", saturate=True)
    if layout == "per-tensor":  # float32 scales, not powers of two
        a_scales, b_scales = np.float32(rng.uniform(0.5, 2)), np.float32(rng.uniform(0.5, 2))
    else:  # MX: E8M0 scales per 32-block along K
        a_scales = e8m0(rng.integers(-3, 4, (rows, inner // 32)))
        b_scales = e8m0(rng.integers(-3, 4, (inner // 32, columns)))
    return dict(a_codes=a_codes, a_scales=a_scales, b_codes=b_codes, b_scales=b_scales, a_format="E4M3",
                b_format="E4M3")


def midpoints(fmt):
    """The midpoints between consecutive positive finite values of ``fmt``."""
    values = np.unique(formats.get(fmt).values()[np.isfinite(formats.get(fmt).values())])
    values = values[values >= 0]
    return (values[:-1] + values[1:]) / 2


def overflow_threshold(fmt):
    """max plus half its spacing: where nearest rounding leaves the format's range."""
    fmt = formats.get(fmt)
    return fmt.max + 2.0 ** (np.floor(np.log2(fmt.max)) - fmt.mantissa_bits - 1)


def output_scales(reference, fmt):
    """Per-tensor output scales, float32: TransformerEngine's max / amax; beyond the max; one that puts
    the largest output at the overflow threshold; and ones that put single outputs on FP8 midpoints."""
    magnitude = np.abs(reference[np.isfinite(reference)])
    amax = magnitude.max()
    largest = formats.get(fmt).max
    scales = [largest / amax, 1.5 * largest / amax, overflow_threshold(fmt) / amax]
    for value in magnitude[magnitude > amax / 64][:6]:  # (the first few that are not tiny)
        mids = midpoints(fmt)
        scales.append(mids[np.argmin(np.abs(mids - value * largest / amax))] / value)
    return [float(np.float32(scale)) for scale in scales]


def naive(reference, scale, fmt, saturate):
    """The cast of the exact product times the scale: no reference for a fused kernel."""
    with np.errstate(over="ignore"):
        return codec.encode(reference * scale, fmt, saturate=saturate)


# ---- soundness ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("layout", ["per-tensor", "MX"])
def test_correct_fused_kernels_pass(fmt, saturate, layout):
    p = problem(layout, seed=["per-tensor", "MX"].index(layout))
    reference = gemm.reference_matmul(**p).value
    results = {name: kernel(p) for name, kernel in KERNELS.items()}
    differs_from_naive = overflowed = 0
    for scale in output_scales(reference, fmt):
        for name, result in results.items():
            codes = fused(result, scale, fmt, saturate)
            report = gemm.compare_matmul(codes, **p, output=fmt, output_scale=scale, saturate=saturate)
            assert report.ok, f"{name}, output_scale {scale!r}:\n{report}"
            differs_from_naive += np.count_nonzero(codes != naive(reference, scale, fmt, saturate))
            overflowed += np.count_nonzero(np.abs(result * np.float32(scale)) > formats.get(fmt).max)
    assert overflowed > 0  # (the cases reach beyond the max)
    assert differs_from_naive > 0  # (and a kernel's code differs from the exact product's cast somewhere)


def straddling_operands(fmt):
    """Outputs whose exact value lies near an FP8 midpoint (within a few float32 ulps, or on it): row m
    of A is ``s_m [P_m, 1, e_m, ... e_m]`` and column n of B ``[1, H, f_n, ... f_n]`` (six e_m, f_n),
    with ``e_m = k_m 2**-9`` and ``f_n = j_n 2**-9``, so that ``R = s_m (P_m + H + 6 k_m j_n 2**-18)``:
    P_m an FP8 value in [256, 448] (448: E4M3's overflow threshold), H half the FP8 spacing there. A
    float32 ulp there is 8 * 2**-18: summed in order, each small term of up to 3 units rounds away,
    while together they move the exact product by up to 18 units, 2.25 ulps (and across the
    midpoint, in the cast). K = 32."""
    half = 2.0 ** (7 - formats.get(fmt).mantissa_bits)
    bases = np.arange(256, 449, 2 * half)
    rows = len(bases) * 2
    signs = np.tile([1.0, -1.0], len(bases))
    a = np.zeros((rows, 32))
    a[:, 0], a[:, 1] = signs * np.repeat(bases, 2), signs
    a[:, 2:8] = (signs * np.resize([1, 3, 2, 5, 7], rows) * 2.0**-9)[:, None]
    j = np.array([-8, -4, -3, -2, -1, 0, 1, 2, 3, 4, 8])
    b = np.zeros((32, len(j)))
    b[0], b[1], b[2:8] = 1.0, half, j * 2.0**-9
    a_codes, b_codes = codec.encode(a, "E4M3"), codec.encode(b, "E4M3")
    assert np.array_equal(codec.decode(a_codes, "E4M3"), a) and np.array_equal(codec.decode(b_codes, "E4M3"), b)
    return a_codes, b_codes


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("saturate", [True, False])
def test_kernels_whose_float32_result_straddles_a_midpoint_pass(fmt, saturate):
    """The float32 sum rounds the small terms away (or not, by order), so the kernel's float32 result
    lies on the other side of the midpoint from the exact product (or from its float32 rounding), or
    on it (a tie, to even): its code differs from their casts by one, and the check passes it."""
    a_codes, b_codes = straddling_operands(fmt)
    row_scales = e8m0(np.random.default_rng(SEED).integers(-2, 1, (a_codes.shape[0], 1)))
    for a_scales, b_scales in ((1.0, 1.0), (row_scales, e8m0(np.zeros((1, b_codes.shape[1]))))):
        p = dict(a_codes=a_codes, a_scales=a_scales, b_codes=b_codes, b_scales=b_scales, a_format="E4M3",
                 b_format="E4M3")
        reference = gemm.reference_matmul(**p).value
        differs = 0
        for scale in (1.0, 0.5, 2.0**-7):  # (powers of two keep the midpoints midpoints)
            for name, kernel in KERNELS.items():
                result = kernel(p)
                codes = fused(result, scale, fmt, saturate)
                report = gemm.compare_matmul(codes, **p, output=fmt, output_scale=scale, saturate=saturate)
                assert report.ok, f"{name}, output_scale {scale!r}:\n{report}"
                # (the cast of the float32 result differs from that of the exact product rounded to float32)
                differs += np.count_nonzero(codes != fused(reference.astype(np.float32), scale, fmt, saturate))
        assert differs >= 10


@pytest.mark.parametrize("fmt, saturate", [("E4M3FNUZ", False), ("E4M3FNUZ", True), ("E5M2FNUZ", False),
                                           ("E2M1", False), ("E3M2", True)])
def test_other_formats_pass(fmt, saturate):
    """The rule holds for any signed format: FNUZ (NaN at 0x80, no -0: an overflow's NaN has no sign),
    FP4 and FP6 (no NaN, no Inf: always saturating)."""
    p = problem("MX", seed=7)
    reference = gemm.reference_matmul(**p).value
    for scale in output_scales(reference, fmt):
        for name, kernel in KERNELS.items():
            codes = fused(kernel(p), scale, fmt, saturate)
            report = gemm.compare_matmul(codes, **p, output=fmt, output_scale=scale, saturate=saturate)
            assert report.ok, f"{name}, output_scale {scale!r}:\n{report}"


def test_the_tie_that_a_cast_of_the_exact_product_gets_wrong():
    """tests/test_gemm.py's case: 256 + 16 + 2**-18 sums to 272 in float32, an E4M3 tie that rounds to
    256, while the exact product rounds to 288. Both codes are allowed; 320 is not."""
    a = codec.encode(np.array([[256.0, 16.0, 2.0**-9]]), "E4M3")
    b = codec.encode(np.array([[1.0], [1.0], [2.0**-9]]), "E4M3")
    options = dict(a_scales=1.0, b_scales=1.0, a_format="E4M3", b_format="E4M3", output="E4M3")
    kernel = codec.encode(np.array([[np.float32(272)]]), "E4M3")
    assert codec.decode(kernel, "E4M3")[0, 0] == 256
    gemm.assert_matmul_close(kernel, a, b_codes=b, **options)
    report = gemm.compare_matmul(kernel, a, b_codes=b, **options)
    assert report.ok and report.allowed_codes.tolist() == [[[0x78]], [[0x79]]]  # 256 and 288
    report = gemm.compare_matmul(kernel + 2, a, b_codes=b, **options)  # 320
    assert str(report).splitlines()[1:] == [
        "worst: (0, 0), code 0x7a (320), allowed 0x78..0x79 (256..288), reference x output_scale 272.00000381469727",
        "", "  row column code      value    reference x scale               allowed  class",
        "    0      0 0x7a        320   272.00000381469727 0x78..0x79 (256..288)  other"]


# ---- sensitivity ----------------------------------------------------------------------------------
def passing_case(fmt="E4M3", saturate=True, layout="per-tensor"):
    p = problem(layout, seed=3)
    reference = gemm.reference_matmul(**p).value
    scale = float(np.float32(formats.get(fmt).max / np.abs(reference).max()))
    codes = fused(KERNELS["sgemm"](p), scale, fmt, saturate)
    options = dict(p, output=fmt, output_scale=scale, saturate=saturate)
    report = gemm.compare_matmul(codes, **options)
    assert report.ok, str(report)
    return codes, options, report


def ordinal(codes):
    codes = np.asarray(codes, np.int64)
    return np.where(codes & 0x80, -(codes & 0x7F), codes & 0x7F)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("step", [1, -1])
def test_a_code_one_off_where_one_code_is_allowed_fails(fmt, step):
    codes, options, report = passing_case(fmt)
    low, high = report.allowed_codes
    single = np.argwhere((low == high) & (codes & 0x7F > 1) & (codes & 0x7F < formats.get(fmt).max_code))
    assert len(single) > M * N // 2  # (most outputs allow one code)
    i, j = single[0]
    wrong = codes.copy()
    wrong[i, j] = int(codes[i, j]) + step  # (one step of magnitude: the neighbouring value)
    report = gemm.compare_matmul(wrong, **options)
    assert report.count == 1 and report.by_class["other"] == 1, str(report)
    row = report.mismatches[0]
    assert (row.row, row.column, row.code, row.allowed_codes) == (i, j, wrong[i, j], (codes[i, j], codes[i, j]))
    assert row.actual == codec.decode(wrong[i, j], fmt) and row.allowed_values[0] == codec.decode(codes[i, j], fmt)


def test_a_sign_flip_fails_as_sign():
    codes, options, report = passing_case()
    low, high = report.allowed_codes
    away_from_zero = np.argwhere((ordinal(low) > 0) | (ordinal(high) < 0))
    i, j = away_from_zero[0]
    wrong = codes.copy()
    wrong[i, j] ^= 0x80
    report = gemm.compare_matmul(wrong, **options)
    assert report.count == 1 and report.by_class["sign"] == 1, str(report)
    flipped = codes ^ 0x80  # (every output: all but those that may be 0 fail, as sign)
    report = gemm.compare_matmul(flipped, **options)
    assert report.count == report.by_class["sign"] == len(away_from_zero)


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_a_wrong_output_scale_fails(factor):
    """The kernel multiplied by twice (half) the output scale it was given, or was checked with the other."""
    codes, options, report = passing_case(layout="MX", saturate=False)
    p = {key: value for key, value in options.items() if key not in ("output", "output_scale", "saturate")}
    result = KERNELS["sgemm"](p)
    wrong = fused(result, options["output_scale"] * factor, "E4M3", False)
    nonzero = np.count_nonzero(np.abs(report.reference.value * options["output_scale"]) > 2.0**-8)
    assert gemm.compare_matmul(wrong, **options).count >= 0.9 * nonzero
    checked_wrong = dict(options, output_scale=options["output_scale"] * factor)
    assert gemm.compare_matmul(codes, **checked_wrong).count >= 0.9 * nonzero


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_the_other_saturation_rule_fails_where_the_product_overflows(fmt):
    """A kernel that does not saturate, checked as one that does, fails (class overflow) where its
    outputs lie beyond the max, and only there; and the other way round."""
    p = problem("per-tensor", seed=4)
    reference = gemm.reference_matmul(**p).value
    scale = float(np.float32(2 * formats.get(fmt).max / np.abs(reference).max()))
    result = KERNELS["sequential"](p)
    beyond = fused(result, scale, fmt, True) != fused(result, scale, fmt, False)  # (where the kernel overflowed)
    assert 0 < np.count_nonzero(beyond) < beyond.size
    assert (np.abs(reference[beyond] * scale) > 0.99 * overflow_threshold(fmt)).all()
    for written, declared in ((False, True), (True, False)):
        codes = fused(result, scale, fmt, written)
        assert gemm.compare_matmul(codes, **p, output=fmt, output_scale=scale, saturate=written).ok
        report = gemm.compare_matmul(codes, **p, output=fmt, output_scale=scale, saturate=declared)
        assert report.count == report.by_class["overflow"] == np.count_nonzero(beyond), str(report)
        assert {(m.row, m.column) for m in report.mismatches} <= set(map(tuple, np.argwhere(beyond)))


def test_nan_outputs():
    """A NaN operand code makes a NaN row: the kernel's NaN codes pass there; a number there fails, as
    does a NaN code where the product is finite (both NaN/Inf)."""
    p = problem("per-tensor", seed=5, inner=64)
    p["a_codes"][2, 7] = 0x7F  # E4M3 NaN
    reference = gemm.reference_matmul(**p).value
    assert np.isnan(reference[2]).all() and np.isfinite(np.delete(reference, 2, 0)).all()
    options = dict(p, output="E4M3", output_scale=0.25)
    codes = fused(KERNELS["sequential"](p), 0.25, "E4M3", True)
    assert (codes[2] & 0x7F == 0x7F).all()
    report = gemm.compare_matmul(codes, **options)
    assert report.ok and (report.allowed_codes[:, 2] == 0x7F).all()
    for i, j, code in ((2, 3, 0x38), (2, 4, 0x00), (5, 1, 0x7F), (5, 2, 0xFF)):
        wrong = codes.copy()
        wrong[i, j] = code
        report = gemm.compare_matmul(wrong, **options)
        assert report.count == report.by_class["NaN/Inf"] == 1, (i, j, code, str(report))
    both_nan_signs = codes.copy()
    both_nan_signs[2, ::2] = 0xFF
    assert gemm.compare_matmul(both_nan_signs, **options).ok


@pytest.mark.parametrize("fmt, saturate, expected", [("E4M3", True, 0x7E), ("E4M3", False, 0x7F),
                                                     ("E5M2", True, 0x7B), ("E5M2", False, 0x7C)])
def test_an_inf_product_is_the_cast_of_inf(fmt, saturate, expected):
    """E5M2 operands with an Inf code: those outputs are +Inf (or -Inf), and the kernel writes the cast of
    Inf, as minifp8.codec.encode casts it: +-max when saturating, else Inf (E5M2) or NaN (E4M3)."""
    a_codes = codec.encode(np.array([[1.0, 2.0], [np.inf, 1.0], [-np.inf, 1.0]]), "E5M2")
    b_codes = codec.encode(np.array([[1.0, 3.0], [1.0, 4.0]]), "E5M2")
    p = dict(a_codes=a_codes, a_scales=1.0, b_codes=b_codes, b_scales=1.0, a_format="E5M2", b_format="E5M2")
    assert np.array_equal(gemm.reference_matmul(**p).value, [[3.0, 11.0], [np.inf, np.inf], [-np.inf, -np.inf]])
    with np.errstate(invalid="ignore"):
        result = KERNELS["sequential"](p)
    codes = fused(result, 1.0, fmt, saturate)
    assert codes[1, 0] == expected and codes[2, 0] == expected | 0x80
    options = dict(p, output=fmt, saturate=saturate)
    assert gemm.compare_matmul(codes, **options).ok
    other = fused(result, 1.0, fmt, not saturate)  # (the other rule's code of Inf)
    report = gemm.compare_matmul(other, **options)
    assert report.count == report.by_class["NaN/Inf"] == 4, str(report)


@pytest.mark.parametrize("saturate, expected", [(True, 0x7E), (False, 0x7F)])
def test_a_float32_result_that_overflows_to_inf_is_allowed(saturate, expected):
    """The exact product, 1456 * 2**118, lies beyond float32's range, so a float32 kernel's sum is Inf,
    and Inf times the output scale 2**-120 casts to the overflow's code, though the product times it,
    364, is an E4M3 number: the range reaches that code. A code below 352 (the cast of 364) is wrong."""
    a_codes = codec.encode(np.array([[448.0, 448.0]]), "E4M3")
    b_codes = codec.encode(np.array([[1.5], [1.75]]), "E4M3")
    p = dict(a_codes=a_codes, a_scales=np.float32(2.0**118), b_codes=b_codes, b_scales=1.0, a_format="E4M3",
             b_format="E4M3")
    with np.errstate(over="ignore"):
        result = KERNELS["sequential"](p)
    assert np.isinf(result[0, 0]) and gemm.reference_matmul(**p).value[0, 0] == 1456 * 2.0**118
    options = dict(p, output="E4M3", output_scale=2.0**-120, saturate=saturate)
    codes = fused(result, 2.0**-120, "E4M3", saturate)
    assert codes[0, 0] == expected
    report = gemm.compare_matmul(codes, **options)
    assert report.ok and report.allowed_codes[:, 0, 0].tolist() == [0x7B, expected], str(report)  # (0x7B: 352)
    assert gemm.compare_matmul(np.array([[0x7A]], np.uint8), **options).by_class["other"] == 1  # (320)


# ---- the rule against brute force -------------------------------------------------------------------
def float32_range(low, high):
    """Every float32 in [low, high] (float64 bounds), stepping through their bit patterns in order (each
    the np.nextafter of the one before)."""
    with np.errstate(over="ignore"):
        first, last = np.float32(low), np.float32(high)
    first = np.nextafter(first, np.float32(np.inf)) if first < low else first
    last = np.nextafter(last, np.float32(-np.inf)) if last > high else last

    def key(x):  # float32 -> an integer in the order of the values
        bits = np.array(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    keys = np.arange(key(first), key(last) + 1)
    values = np.where(keys < 0, (-keys) | 0x80000000, keys).astype(np.uint32).view(np.float32)
    assert values[0] == first and values[-1] == last and low <= first and last <= high
    assert np.array_equal(np.nextafter(values[:-1], np.float32(np.inf)), values[1:])
    return values


@pytest.mark.parametrize("fmt, saturate", [("E4M3", True), ("E4M3", False), ("E5M2", True), ("E5M2", False)])
def test_every_code_a_float32_result_within_tolerance_casts_to_is_allowed(fmt, saturate):
    """For each output of a small GEMM (K = 4) and a few output scales (one puts an output on E4M3's
    overflow tie, 464, others on midpoints): step through every float32 v in [R - T, R + T] (T the
    float32 output's tolerance, which the check builds on), multiply by the scale in float32 and cast.
    Each code is within the allowed range, and the range is at most one code wider each side."""
    rng = np.random.default_rng(SEED + 1)
    a_codes = codec.encode(rng.normal(0, 4, (3, 4)), "E4M3")
    b_codes = codec.encode(rng.normal(0, 4, (4, 5)), "E4M3")
    p = dict(a_codes=a_codes, a_scales=np.float32(0.37), b_codes=b_codes, b_scales=np.float32(1.9), a_format="E4M3",
             b_format="E4M3")
    values = gemm.compare_matmul(np.zeros((3, 5), np.float32), **p)  # (output="float32": its tolerance)
    reference, tolerance = values.reference.value, values.tolerance
    wider = ranged = 0
    for scale in output_scales(reference, fmt) + [1.0]:
        report = gemm.compare_matmul(np.zeros((3, 5), np.uint8), **p, output=fmt, output_scale=scale,
                                     saturate=saturate)
        assert np.array_equal(report.tolerance, tolerance)
        low, high = ordinal(report.allowed_codes)
        for i, j in np.ndindex(3, 5):
            v = float32_range(reference[i, j] - tolerance[i, j], reference[i, j] + tolerance[i, j])
            assert 1 < v.size < 10_000
            codes = ordinal(codec.encode(v * np.float32(scale), fmt, saturate=saturate))
            assert low[i, j] <= codes.min() and codes.max() <= high[i, j], (scale, i, j)
            assert codes.min() - low[i, j] <= 1 and high[i, j] - codes.max() <= 1
            wider += codes.min() - low[i, j] + high[i, j] - codes.max()
            ranged += codes.max() > codes.min()
    assert wider <= 2 and ranged >= 5  # (the range is (nearly) always the brute force's; some hold two codes)


def test_the_epilogue_rounding_up_onto_a_tie_is_allowed():
    """The float32 rounding of v * output_scale can carry a product just below an FP8 midpoint onto it,
    a tie that rounds up: that code is allowed, though (R + T) * output_scale lies below the midpoint.
    Searched for among one-term GEMMs (R = a, exact; v the largest float32 within the tolerance T) and
    float32 output scales near midpoint / v."""
    fmt = formats.E4M3
    values = fmt.values()[:0x7F]
    values = values[values >= 1]
    a_codes, b_codes = codec.encode(values[:, None], fmt), np.full((1, 1), 0x38, np.uint8)  # B = [[1.0]]
    p = dict(a_codes=a_codes, a_scales=1.0, b_codes=b_codes, b_scales=1.0, a_format="E4M3", b_format="E4M3")
    float32_check = gemm.compare_matmul(np.zeros((len(values), 1), np.float32), **p)
    high = (float32_check.reference.value + float32_check.tolerance)[:, 0]
    largest = high.astype(np.float32)
    largest = np.where(largest > high, np.nextafter(largest, np.float32(0)), largest)  # (the largest v <= R + T)
    mids = midpoints(fmt)[3:]
    mids = mids[codec.decode(codec.encode(mids, fmt), fmt) > mids]  # (ties that round up)
    s0 = (mids[None, :] / largest[:, None]).astype(np.float32)
    found = []
    for step in (-2, -1, 0, 1, 2):
        scales = s0
        for _ in range(abs(step)):
            scales = np.nextafter(scales, np.float32(np.inf if step > 0 else 0))
        rounded_onto = largest[:, None] * scales == mids[None, :]  # (float32 arithmetic)
        below = high[:, None] * scales.astype(np.float64) * (1 + 2.0**-50) < mids[None, :]
        found += [(i, float(scales[i, j]), mids[j]) for i, j in np.argwhere(rounded_onto & below)]
    assert len(found) >= 5
    for i, scale, mid in found[::max(1, len(found) // 40)]:
        codes = fused(float32_check.reference.value.astype(np.float32), scale, fmt, True)  # (the kernel's v = R)
        codes[i] = codec.encode(mid, fmt)  # (v the largest float32 within tolerance: onto the tie, up)
        report = gemm.compare_matmul(codes, **p, output="E4M3", output_scale=scale)
        assert report.ok, str(report)
        assert report.allowed_codes[0, i, 0] < report.allowed_codes[1, i, 0] == codes[i, 0]


# ---- the report -----------------------------------------------------------------------------------
def test_the_report_shows_codes_values_and_the_codes_allowed():
    p = problem("per-tensor", seed=6, rows=2, inner=32, columns=3)
    codes = fused(KERNELS["sequential"](p), 0.5, "E4M3", False)
    wrong = codes.copy()
    wrong[0, 1] += 1
    wrong[1, 2] = 0x7F
    report = gemm.compare_matmul(wrong, **p, output="E4M3", output_scale=np.float32(0.5), saturate=False)
    assert str(report) == """\
E4M3 x E4M3 GEMM, 2x32 @ 32x3 (accumulator='float32', output='E4M3', output_scale=0.5, saturate=False): \
2 of 6 outputs beyond tolerance [NaN/Inf 1, other 1]
worst: (1, 2), code 0x7f (nan), allowed 0xdf (-30), reference x output_scale -30.128309732265258

  row column code      value    reference x scale          allowed  class
    0      1 0x4a          5    4.724675343787682       0x49 (4.5)  other
    1      2 0x7f        nan  -30.128309732265258       0xdf (-30)  NaN/Inf"""
    assert report.hints == []
    with pytest.raises(AssertionError, match=re.escape(str(report))):
        gemm.assert_matmul_close(wrong, **p, output="E4M3", output_scale=0.5, saturate=False)
    gemm.assert_matmul_close(codes, **p, output="E4M3", output_scale=0.5, saturate=False)


def test_an_output_of_zeros_gets_its_hint_and_nothing_else():
    """Of the hints, only the unwritten output's is given for codes (the others recompute float outputs)."""
    codes, options, _ = passing_case()
    report = gemm.compare_matmul(np.zeros_like(codes), **options)
    assert not report.ok and report.hints == [
        "every output is 0 and the product is not: an output left unwritten, or a kernel that did not run?"]
    doubled = fused(KERNELS["sgemm"](problem("per-tensor", seed=3)), options["output_scale"] * 2, "E4M3", True)
    report = gemm.compare_matmul(doubled, **options)
    assert not report.ok and report.hints == []


def test_codes_in_every_form():
    """uint8 codes, an ml_dtypes float8 array of the format, the format as a FloatFormat or an alias."""
    codes, options, report = passing_case()
    for output in ("E4M3", formats.E4M3, "float8_e4m3fn"):
        assert gemm.compare_matmul(codes, **dict(options, output=output)).ok
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert gemm.compare_matmul(codes.view(ml_dtypes.float8_e4m3fn), **options).ok
    wrong = codes.copy()
    wrong[0, 0] ^= 0x80
    assert not gemm.compare_matmul(wrong.view(ml_dtypes.float8_e4m3fn), **options).ok


def test_assert_matmul_close_warns_where_zeros_would_pass():
    """Where the output scale sends most outputs below half the smallest subnormal, an output of zeros
    passes as well: assert_matmul_close says the check checked little."""
    codes, options, _ = passing_case()
    tiny = dict(options, output_scale=2.0**-40)
    zeros = np.zeros_like(codes)
    assert gemm.compare_matmul(zeros, **tiny).zero_would_pass == M * N
    with pytest.warns(UserWarning, match="assert_matmul_close checked little"):
        gemm.assert_matmul_close(zeros, **tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gemm.assert_matmul_close(codes, **options)


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("change, error, message", [
    (dict(output_scale=0.0), ValueError, "output_scale must be positive and finite"),
    (dict(output_scale=-0.5), ValueError, "output_scale must be positive and finite"),
    (dict(output_scale=float("nan")), ValueError, "output_scale must be positive and finite"),
    (dict(output_scale=float("inf")), ValueError, "output_scale must be positive and finite"),
    (dict(output_scale=10**400), ValueError, "output_scale must be positive and finite"),
    (dict(output_scale="0.5"), TypeError, "output_scale must be a real number"),
    (dict(output_scale=True), TypeError, "output_scale must be a real number"),
    (dict(output_scale=np.ones(2)), TypeError, "output_scale must be a real number"),
    (dict(output_scale=np.longdouble(0.25) + np.longdouble(2.0) ** -62), ValueError,
     "output_scale must be a float32 value"),  # (a long double rounded to float64 first passed)
    (dict(output_scale=0.1), ValueError, r"output_scale must be a float32 value.*float\(np.float32\(s\)\)"),
    (dict(output_scale=1e39), ValueError, "output_scale must be a float32 value"),
    (dict(output_scale=2**53 + 1), ValueError, "output_scale must be a float32 value"),
    (dict(saturate=1), TypeError, "saturate must be a bool, got int 1"),
    (dict(saturate="yes"), TypeError, "saturate must be a bool"),
    (dict(output="float32", output_scale=0.5), ValueError,
     r"output_scale describes the cast of an output written as codes .*output='float32' is written as values"),
    (dict(output="bfloat16", saturate=False), ValueError, "saturate describes the cast"),
    (dict(output="float16", output_scale=1.0, saturate=True), ValueError, "output_scale and saturate describe"),
    (dict(output="E8M0"), ValueError, "output: E8M0 is unsigned"),
    (dict(output="E9M9"), ValueError, "output must be one of 'float32', 'bfloat16', 'float16' or, for an output "
                                      "written as codes, a signed format"),
    (dict(output=3), TypeError, "output must be one of"),
    (dict(actual=np.zeros((4, 8), np.float32)), TypeError,
     r"actual is a float32 array, but output='E4M3' declares an output written as E4M3 codes"),
    (dict(actual=np.zeros((4, 8), np.float16)), TypeError, "actual is a float16 array"),
    (dict(actual=np.zeros((8, 4), np.uint8)), ValueError, r"actual has shape \(8, 4\), but the product is 4 x 8"),
    (dict(actual=np.full((4, 8), 0x10, np.uint8), output="E2M1"), ValueError,
     r"E2M1 codes lie in \[0, 16\), got 16 in actual \(32 codes out of range"),
    (dict(actual=np.full((4, 8), 0x40, np.uint8), output="E3M2"), ValueError, r"E3M2 codes lie in \[0, 64\)"),
    (dict(actual=np.zeros((4, 8), np.int64)), TypeError, r"^actual must be the kernel's E4M3 codes as uint8 \(or its "
                                                         r"ml_dtypes array\), got dtype int64: .*astype\(np.uint8\)$"),
    (dict(actual=np.zeros((4, 8), bool)), TypeError, "actual must be uint8 codes"),
])
def test_bad_input_gets_a_clear_error(change, error, message):
    rng = np.random.default_rng(SEED)
    p = dict(a_codes=codec.encode(rng.normal(size=(4, 32)), "E4M3"), a_scales=1.0,
             b_codes=codec.encode(rng.normal(size=(32, 8)), "E4M3"), b_scales=1.0, a_format="E4M3",
             b_format="E4M3", output="E4M3")
    actual = change.pop("actual", np.zeros((4, 8), np.uint8))
    p.update(change)
    with pytest.raises(error, match=message):
        gemm.compare_matmul(actual, **p)
    with pytest.raises(error, match=message):
        gemm.assert_matmul_close(actual, **p)


def test_an_ml_dtypes_output_of_another_format_is_refused():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="actual has dtype float8_e5m2, which holds E5M2 codes, not the E4M3 codes"):
        gemm.compare_matmul(np.zeros((1, 1), ml_dtypes.float8_e5m2), np.zeros((1, 1), np.uint8), 1.0,
                            np.zeros((1, 1), np.uint8), 1.0, a_format="E4M3", b_format="E4M3", output="E4M3")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "float8_e4m3fn", "float8_e5m2"])
def test_codes_without_an_fp8_output_are_told_to_declare_it(dtype):
    """Codes passed with the default output="float32": the error names output='E4M3' (the dtype's
    format where it has one), output_scale and saturate."""
    if dtype.startswith("float8"):
        dtype = getattr(pytest.importorskip("ml_dtypes"), dtype)
    named = {"float8_e4m3fn": "output='E4M3'", "float8_e5m2": "output='E5M2'"}.get(
        np.dtype(dtype).name, "output='E4M3' or 'E5M2' (the format it wrote)")
    with pytest.raises(TypeError, match=re.escape(
            f"actual is a {np.dtype(dtype).name} array, codes, but output='float32' declares values (float16, "
            f"bfloat16, float32 or float64): for a kernel that writes its output as codes (a fused epilogue's "
            f"cast), pass {named}, with output_scale= (the scale that multiplied its float32 result before the "
            f"cast) and saturate= (whether the cast saturates)")):
        gemm.compare_matmul(np.zeros((1, 1), dtype), np.zeros((1, 1), np.uint8), 1.0, np.zeros((1, 1), np.uint8),
                            1.0, a_format="E4M3", b_format="E4M3")


# ---- found by an adversarial review of this mode --------------------------------------------------
def test_a_sum_that_overflows_a_float16_accumulator_is_allowed_its_inf():
    """A float16 accumulator's sum past 65504 is Inf, which the output scale's cast then writes as max
    (saturating): the result was allowed to be Inf only at float32's threshold, and a correct kernel
    failed. R = 448 * 96 + 448 * 64 = 71680."""
    a = codec.encode(np.array([[448.0, 448.0]]), "E4M3")
    b = codec.encode(np.array([[96.0], [64.0]]), "E4M3")
    with np.errstate(over="ignore"):
        total = np.float16(448 * 96) + np.float16(448 * 64)  # (the float16 kernel's sum)
    assert np.isinf(total)
    codes = codec.encode(np.array([[np.float32(total) * np.float32(2.0**-10)]]), "E4M3", saturate=True)  # 448
    options = dict(a_format="E4M3", b_format="E4M3", output="E4M3", output_scale=2.0**-10)
    assert gemm.compare_matmul(codes, a, 1.0, b, 1.0, accumulator="float16", **options).ok
    assert not gemm.compare_matmul(codes, a, 1.0, b, 1.0, **options).ok  # (float32's sum: 70)
    # the same in the float path: the float16 kernel's Inf, written as float32, failed as NaN/Inf
    inf = np.array([[np.inf]], np.float32)
    assert gemm.compare_matmul(inf, a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3", accumulator="float16").ok
    assert not gemm.compare_matmul(inf, a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").ok


def test_the_worst_row_is_the_code_furthest_outside_its_allowed_codes():
    """The ratio of a code row was its distance over a tolerance that is 0 where the one allowed code lies
    on the other side, about 1e307 for a code one step off, which outranked 448 written for 272. Now it
    counts the format's values between the code and the allowed ones."""
    a = codec.encode(np.array([[8.0, 0.125, 0.0], [256.0, 16.0, 2.0**-9]]), "E4M3")
    b = codec.encode(np.array([[1.0], [1.0], [2.0**-9]]), "E4M3")
    codes = np.array([[0x51], [0x7E]], np.uint8)  # 9 for 8.125 (0x50 allowed); 448 for 272 (0x78..0x79)
    report = gemm.compare_matmul(codes, a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3", output="E4M3")
    assert [m.ratio for m in report.mismatches] == [1.0, 5.0]  # 0x51 - 0x50; 0x7e - 0x79
    assert report.worst is not None and report.worst.row == 1
    nan = gemm.compare_matmul(np.array([[0x7F], [0x78]], np.uint8), a, 1.0, b, 1.0, a_format="E4M3",
                              b_format="E4M3", output="E4M3")
    assert nan.mismatches[0].ratio == np.inf


def test_an_output_of_zeros_that_passes_is_explained_for_codes():
    """Where zeros pass because the scaled product rounds to 0 in the format, the first line and the
    warning spoke of a tolerance reaching |reference| and advised a smaller K."""
    codes, options, _ = passing_case()
    tiny = dict(options, output_scale=2.0**-40)
    report = gemm.compare_matmul(np.zeros_like(codes), **tiny)
    assert f"the allowed codes include 0 (the scaled product rounds to 0 in {options['output']}" in report.head()
    assert "the tolerance reaches |reference|" not in report.head()
    with pytest.warns(UserWarning, match=r"test a larger output_scale, or a smaller K\)"):
        gemm.assert_matmul_close(np.zeros_like(codes), **tiny)


def test_between_max_and_the_overflow_threshold_is_no_overflow():
    """R = 455 in E4M3 rounds to 448 (the threshold is 464): a wrong code there was classed overflow,
    where the float output path calls the like of it other."""
    a = codec.encode(np.array([[448.0, 7.0]]), "E4M3")
    b = codec.encode(np.array([[1.0], [1.0]]), "E4M3")
    report = gemm.compare_matmul(np.array([[0x7D]], np.uint8), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3",
                                 output="E4M3")
    assert report.by_class["other"] == 1 and report.by_class["overflow"] == 0


def test_a_scale_tensor_of_one_element_is_taken_as_its_number():
    """TransformerEngine keeps a scale as a 1-element tensor: a 0-d or 1-element array was a TypeError."""
    codes, options, _ = passing_case()
    scale = np.float32(options["output_scale"])
    for given in (np.array(scale), np.array([scale]), scale):
        assert gemm.compare_matmul(codes, **dict(options, output_scale=given)).ok


def test_a_running_sum_that_overflows_the_accumulator_is_allowed_that_inf():
    """The final review's find: a float16 running sum can overflow though the final sum fits (57344 +
    57344 - 57344), and inside a promote_every group too: the kernel's Inf failed a correct kernel, in
    the float path and the code path. Only the Inf a partial sum can reach agrees (a partial sum lies
    between -N and P, the sums of the negative and positive products), NaN only where both can (a
    later review: any Inf or NaN had passed), and with promote_every only a group's sum counts."""
    a = codec.encode(np.array([[1.0, 1.0, 1.0]]), "E5M2")
    b = codec.encode(np.array([[57344.0], [57344.0], [-57344.0]]), "E5M2")  # R = 57344: P = 114688, N = 57344
    options = dict(a_format="E5M2", b_format="E5M2", accumulator="float16")
    for value, ok in ((np.inf, True), (-np.inf, False), (np.nan, False)):
        assert gemm.compare_matmul(np.array([[value]], np.float32), a, 1.0, b, 1.0, **options).ok == ok, value
        codes = codec.encode(np.array([[value]]), "E4M3", saturate=True)
        assert gemm.compare_matmul(codes, a, 1.0, b, 1.0, output="E4M3", output_scale=2.0**-10, **options).ok == ok
    assert not gemm.compare_matmul(np.array([[np.inf]], np.float32), a, 1.0, b, 1.0, a_format="E5M2",
                                   b_format="E5M2").ok  # (a float32 sum cannot overflow here)
    both = codec.encode(np.array([[57344.0], [57344.0], [-57344.0], [-57344.0], [-57344.0]]), "E5M2")
    a5 = codec.encode(np.ones((1, 5)), "E5M2")  # P = N = 114688: either Inf, or NaN
    for value in (np.inf, -np.inf, np.nan):
        assert gemm.compare_matmul(np.array([[value]], np.float32), a5, 1.0, both, 1.0, **options).ok
    small = codec.encode(np.array([[1.0], [2.0], [-1.0]]), "E5M2")
    assert not gemm.compare_matmul(np.array([[np.inf]], np.float32), a, 1.0, small, 1.0, **options).ok
    e4m3 = dict(options, a_format="E4M3", b_format="E4M3")
    a, b = codec.encode(np.array([[448.0, 448.0]]), "E4M3"), codec.encode(np.array([[96.0], [64.0]]), "E4M3")
    inf = np.array([[np.inf]], np.float32)
    assert gemm.compare_matmul(inf, a, 1.0, b, 1.0, **dict(e4m3, promote_every=2)).ok  # (one group: 71680)
    assert not gemm.compare_matmul(inf, a, 1.0, b, 1.0, **dict(e4m3, promote_every=1)).ok  # (43008, 28672 each fit)
    ones, many = codec.encode(np.ones((1, 1024)), "E4M3"), codec.encode(np.full((1024, 1), 96.0), "E4M3")
    assert not gemm.compare_matmul(np.array([[np.nan]], np.float32), ones, 1.0, many, 1.0,
                                   **dict(e4m3, promote_every=128)).ok  # (groups of 12288; 98304 in float32)


def test_the_report_counts_the_outputs_where_an_overflow_would_pass():
    """Where a running sum may overflow the accumulator, an Inf (or NaN) agrees: the check cannot tell a
    kernel that overflowed there, and the first line says where (a later review's find)."""
    a = codec.encode(np.ones((2, 3)), "E5M2")
    b = codec.encode(np.array([[57344.0, 1.0], [57344.0, 1.0], [-57344.0, 1.0]]), "E5M2")
    reference = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E5M2", b_format="E5M2").value
    report = gemm.compare_matmul(reference.astype(np.float32), a, 1.0, b, 1.0, a_format="E5M2", b_format="E5M2",
                                 accumulator="float16")
    assert report.ok and report.overflow_would_pass == 2  # (column 0 of both rows; column 1 sums to 3)
    assert "at 2 of the 4 a running sum may overflow the accumulator (its Inf would agree there)" in report.head()
    plain = gemm.compare_matmul(reference.astype(np.float32), a, 1.0, b, 1.0, a_format="E5M2", b_format="E5M2")
    assert plain.overflow_would_pass == 0 and "running sum" not in plain.head()


def test_an_inf_that_passes_by_the_running_overflow_allowance_is_counted_and_warned_about():
    """An Inf where the exact product is finite agrees where a running sum may overflow the accumulator,
    but assert_matmul_close passed it silently: the report counts those (overflow_passed), the first
    line says so, and the assertion warns, in the float path and the code path."""
    a = codec.encode(np.ones((2, 3)), "E5M2")
    b = codec.encode(np.array([[57344.0, 1.0], [57344.0, 1.0], [-57344.0, 1.0]]), "E5M2")
    options = dict(a_format="E5M2", b_format="E5M2", accumulator="float16")
    reference = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E5M2", b_format="E5M2").value
    overflowed = reference.astype(np.float32)
    overflowed[0, 0] = np.inf
    report = gemm.compare_matmul(overflowed, a, 1.0, b, 1.0, **options)
    assert report.ok and report.overflow_would_pass == 2 and report.overflow_passed == 1
    assert "(its Inf would agree there; the kernel wrote one at 1)" in report.head()
    with pytest.warns(UserWarning, match=r"passed 1 outputs as an overflowed .* where the exact product is finite"):
        gemm.assert_matmul_close(overflowed, a, 1.0, b, 1.0, **options)
    exact = gemm.compare_matmul(reference.astype(np.float32), a, 1.0, b, 1.0, **options)
    assert exact.overflow_passed == 0 and "the kernel wrote" not in exact.head()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gemm.assert_matmul_close(reference.astype(np.float32), a, 1.0, b, 1.0, **options)
    coded = dict(options, output="E4M3", output_scale=2.0**-10)
    codes = codec.encode(np.where(np.isinf(overflowed), np.inf, reference * 2.0**-10), "E4M3", saturate=True)
    assert gemm.compare_matmul(codes, a, 1.0, b, 1.0, **coded).overflow_passed == 1
    with pytest.warns(UserWarning, match=r"passed 1 outputs as an overflowed running sum"):
        gemm.assert_matmul_close(codes, a, 1.0, b, 1.0, **coded)


def test_wide_int_codes_out_of_range_are_not_told_to_cast():
    """The int message added for codes said .astype(np.uint8) even for values it would wrap (300 -> 44):
    out-of-range values get the range error, as testing.compare gives (a later review's find)."""
    codes, options, _ = passing_case()
    wide = codes.astype(np.int64)
    wide[0, 0] = 300
    with pytest.raises(ValueError, match=r"holds 300 .*\.astype\(np.uint8\) would hide that"):
        gemm.compare_matmul(wide, **options)


def test_many_promotion_groups_are_bounded_without_a_loop_over_them():
    """With groups of one product (promote_every=1; also over 256 groups) a group's sum is bounded by the
    group size times the largest product, not computed group by group (K matrix products, or K x M x N
    floats stacked, as a first version did): still an Inf only where a group can reach the threshold."""
    options = dict(a_format="E4M3", b_format="E4M3", accumulator="float16", promote_every=1)
    inf = np.array([[np.inf]], np.float32)
    a = codec.encode(np.full((1, 100), 448.0), "E4M3")
    fits = codec.encode(np.full((100, 1), 96.0), "E4M3")  # 43008 a product, 4300800 in float32
    assert not gemm.compare_matmul(inf, a, 1.0, fits, 1.0, **options).ok
    one_overflows = fits.copy()
    one_overflows[37, 0] = codec.encode(np.array([448.0]), "E4M3")[0]  # 448 * 448 = 200704: Inf in float16
    assert gemm.compare_matmul(inf, a, 1.0, one_overflows, 1.0, **options).ok


def test_promotion_groups_that_do_not_start_at_zero_are_allowed_their_overflow():
    """A review's find: a split-K kernel restarts its promotion groups at the split (here k = 192 of
    384, groups of 128), so a group [192, 320) of 128 products of 768 sums to 98304, Inf in float16,
    where the groups from k = 0 sum to at most 49152: the correct kernel failed. Any window of n
    products lies in two adjacent groups from k = 0, and those pairs are what count now."""
    a = np.full((1, 384), 0.0)
    b = np.full((384, 1), 0.0)
    a[0, 192:320], b[192:320, 0] = 32.0, 24.0
    a, b = codec.encode(a, "E4M3"), codec.encode(b, "E4M3")
    options = dict(a_format="E4M3", b_format="E4M3", accumulator="float16", promote_every=128)
    assert gemm.compare_matmul(np.array([[np.inf]], np.float32), a, 1.0, b, 1.0, **options).ok
    assert not gemm.compare_matmul(np.array([[-np.inf]], np.float32), a, 1.0, b, 1.0, **options).ok
