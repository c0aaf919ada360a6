"""The scaled-GEMM oracle (minifp8.gemm), against independent references.

- `reference_matmul` against exact rational dot products (fractions.Fraction), with element values
  decoded here from their bit fields (the OCP OFP8 rev 1.0 and OCP MX v1.0 encodings) and E8M0 /
  E4M3 scales decoded by the same rules, for every element format and scale layout; its error
  bound holds and is not vacuous.
- Simulated correct kernels (float32 accumulation in several orders, pairwise, DeepSeek-V3's
  per-128 partial sums, BLAS sgemm) pass `compare_matmul`, with float32, bfloat16 (rounded here
  from the bits) and float16 outputs.
- Simulated buggy kernels fail, each with the diagnosis its bug calls for.
- Bad input gets a TypeError or ValueError that names what was expected.
"""
import math
import re
import warnings
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest

from minifp8 import codec, formats, gemm, mx, scaling, testing

rng_seed = 20260511

# ---- independent decoding: the spec's bit fields ------------------------------------------------
# name: (exponent bits, mantissa bits, bias, whether a code is finite)
SPEC = {
    "E4M3": (4, 3, 7, lambda code: code & 0x7F != 0x7F),           # S.1111.111 is NaN
    "E5M2": (5, 2, 15, lambda code: (code >> 2) & 0x1F != 0x1F),   # exponent 11111: Inf, NaN
    "E2M3": (2, 3, 1, lambda code: True),
    "E3M2": (3, 2, 3, lambda code: True),
    "E2M1": (2, 1, 1, lambda code: True),
}


def spec_value(code: int, name: str) -> Fraction:
    """A finite code's value from its sign, exponent and mantissa fields."""
    return _spec_value(int(code), name)


@lru_cache(maxsize=None)
def _spec_value(code: int, name: str) -> Fraction:
    exponent_bits, mantissa_bits, bias, _ = SPEC[name]
    sign = -1 if code >> (exponent_bits + mantissa_bits) else 1
    exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = Fraction(code & ((1 << mantissa_bits) - 1), 1 << mantissa_bits)
    if exponent == 0:
        return sign * mantissa * Fraction(2) ** (1 - bias)
    return sign * (1 + mantissa) * Fraction(2) ** (exponent - bias)


def finite_codes(name: str) -> np.ndarray:
    exponent_bits, mantissa_bits, _, finite = SPEC[name]
    return np.array([c for c in range(1 << (1 + exponent_bits + mantissa_bits)) if finite(c)], np.uint8)


def random_codes(rng, name, shape):
    return rng.choice(finite_codes(name), size=shape).astype(np.uint8)


def values32(codes, name):
    """Decoded element values as float32 (exact: at most 4 significant bits), from the spec."""
    table = np.array([float(spec_value(c, name)) if SPEC[name][3](c) else np.nan
                      for c in range(1 << (1 + SPEC[name][0] + SPEC[name][1]))])
    return table[codes].astype(np.float32)


def e8m0(codes) -> np.ndarray:
    """E8M0 scale codes 0..254 -> 2**(code - 127) (OCP MX v1.0), float32."""
    return np.ldexp(np.float32(1), np.asarray(codes, np.int32) - 127).astype(np.float32)


def expand(scales, shape):
    """Each scale over its block, by np.repeat (not gemm's broadcasting)."""
    scales = np.asarray(scales).reshape((1, 1) if np.ndim(scales) == 0 else np.shape(scales))
    return np.repeat(np.repeat(scales, shape[0] // scales.shape[0], 0), shape[1] // scales.shape[1], 1)


# ---- reference_matmul against Fraction ----------------------------------------------------------
M, K, N = 3, 256, 256
LAYOUTS = {  # name: (A's scale shape, B's scale shape)
    "per-tensor": ((), ()),
    "rowwise": ((M, 1), (1, N)),
    "1x128 / 128x128": ((M, K // 128), (K // 128, N // 128)),
    "MX 32": ((M, K // 32), (K // 32, N)),
    "NVFP4 16": ((M, K // 16), (K // 16, N)),
}


def random_scales(rng, kind, shape):
    if kind == "float32":  # not powers of two: 24 significant bits
        return np.exp(rng.uniform(-12, 12, size=shape)).astype(np.float32)
    if kind == "E8M0 extremes":  # 2**-127 .. 2**-125 and 2**125 .. 2**127
        return e8m0(rng.choice([0, 1, 2, 252, 253, 254], size=shape))
    assert kind == "NVFP4 two-level"  # E4M3 block scale x float32 tensor scale, multiplied in float64
    block = np.array([float(spec_value(c, "E4M3")) for c in rng.integers(0x08, 0x7E, size=shape).reshape(-1)])
    return block.reshape(shape) * np.float64(np.float32(rng.uniform(1e-3, 1e3)))


CASES = [(a, b, layout, kind) for a, b in [("E4M3", "E4M3"), ("E5M2", "E4M3"), ("E2M3", "E3M2"), ("E2M1", "E2M1"),
                                           ("E4M3", "E2M1")]
         for layout in LAYOUTS for kind in ("float32", "E8M0 extremes")]
CASES += [("E2M1", "E2M1", "NVFP4 16", "NVFP4 two-level"), ("E4M3", "E5M2", "rowwise", "NVFP4 two-level")]


@pytest.mark.parametrize("a_name, b_name, layout, kind", CASES)
def test_reference_is_the_exact_product_within_its_bound(a_name, b_name, layout, kind):
    rng = np.random.default_rng([rng_seed, CASES.index((a_name, b_name, layout, kind))])
    a_codes, b_codes = random_codes(rng, a_name, (M, K)), random_codes(rng, b_name, (K, N))
    a_shape, b_shape = LAYOUTS[layout]
    a_scales, b_scales = random_scales(rng, kind, a_shape), random_scales(rng, kind, b_shape)
    reference = gemm.reference_matmul(a_codes, a_scales, b_codes, b_scales, a_format=a_name, b_format=b_name)

    # every dequantised element of A is exact
    a_expanded, b_expanded = expand(a_scales, (M, K)), expand(b_scales, (K, N))
    exact_a = [[spec_value(a_codes[m, k], a_name) * Fraction(float(a_expanded[m, k])) for k in range(K)]
               for m in range(M)]
    dequantized = gemm.dequantize(a_codes, a_scales, a_name)
    assert dequantized.dtype == np.float64
    assert all(Fraction(float(dequantized[m, k])) == exact_a[m][k] for m in range(M) for k in range(K))

    gamma = K * 2.0**-53 / (1 - K * 2.0**-53)
    for m, n in zip(rng.integers(0, M, 8), rng.integers(0, N, 8)):
        terms = [exact_a[m][k] * spec_value(b_codes[k, n], b_name) * Fraction(float(b_expanded[k, n]))
                 for k in range(K)]
        exact, magnitude = sum(terms), sum(map(abs, terms))
        assert abs(Fraction(float(reference.value[m, n])) - exact) <= Fraction(float(reference.error_bound[m, n]))
        # the bound is gamma_K * sum |a b| (to a relative 2**-40), not something vacuous
        assert abs(Fraction(float(reference.error_bound[m, n])) - gamma * magnitude) <= 2.0**-40 * gamma * magnitude


def test_reference_rounds_and_the_bound_is_tight():
    """With 24-bit float32 scales the float64 products round, so the bound is exercised; and in
    the worst case for K = 2 the error reaches (just under) half of it."""
    rng = np.random.default_rng(rng_seed)
    a_codes, b_codes = random_codes(rng, "E4M3", (4, 64)), random_codes(rng, "E4M3", (64, 4))
    a_scales, b_scales = random_scales(rng, "float32", (4, 2)), random_scales(rng, "float32", (2, 4))
    reference = gemm.reference_matmul(a_codes, a_scales, b_codes, b_scales, a_format="E4M3", b_format="E4M3")
    a = [[spec_value(a_codes[m, k], "E4M3") * Fraction(float(a_scales[m, k // 32])) for k in range(64)]
         for m in range(4)]
    b = [[spec_value(b_codes[k, n], "E4M3") * Fraction(float(b_scales[k // 32, n])) for n in range(4)]
         for k in range(64)]
    errors = [abs(Fraction(float(reference.value[m, n])) - sum(a[m][k] * b[k][n] for k in range(64)))
              for m in range(4) for n in range(4)]
    assert max(errors) > 0

    # 1 + 2**-53: float64 rounds it to 1 (a tie, to even), an error of 2**-53; the bound is
    # gamma_2 (1 + 2**-53) / (1 - gamma_2), just over 2 * 2**-53
    one = np.array([[0x38, 0x38]], np.uint8)  # E4M3 1.0, twice
    tiny_second = np.array([[1.0, 2.0**-53]], np.float32)
    reference = gemm.reference_matmul(one, tiny_second, one.T, 1.0, a_format="E4M3", b_format="E4M3")
    assert reference.value[0, 0] == 1.0
    error = Fraction(1) + Fraction(2) ** -53 - 1
    bound = Fraction(float(reference.error_bound[0, 0]))
    assert bound / 2 * (1 - Fraction(2) ** -40) <= error <= bound


def e5m2_value(code) -> float:
    """An E5M2 code's value as a Python float: exponent field 11111 is Inf (mantissa 0) or NaN."""
    if (code >> 2) & 0x1F == 0x1F:
        return (-1.0 if code & 0x80 else 1.0) * float("inf") if code & 0x03 == 0 else float("nan")
    return float(spec_value(code, "E5M2"))


def test_nan_and_inf_propagate_as_ieee_arithmetic():
    """NaN codes, MX's NaN scale, Inf * 0 and Inf - Inf, against Python float arithmetic."""
    a_codes = np.array([[0x3C, 0x40, 0x44], [0x7C, 0x00, 0x3C], [0x7C, 0xFC, 0x40], [0x7F, 0x3C, 0x3C],
                        [0x3C, 0x3C, 0x3C]], np.uint8)  # E5M2: 0x7C is +Inf, 0xFC -Inf, 0x7F NaN
    b_codes = np.array([[0x3C, 0x00, 0xBC, 0x3C], [0x3C, 0x40, 0x3C, 0x7C], [0x40, 0x3C, 0x3C, 0x3C]], np.uint8)
    a_scales = np.array([[1.0], [1.0], [1.0], [1.0], [np.nan]], np.float32)  # the last row's scale: NaN
    reference = gemm.reference_matmul(a_codes, a_scales, b_codes, 0.5, a_format="E5M2", b_format="E5M2")
    a = [[e5m2_value(code) * float(scale) for code in row] for row, scale in zip(a_codes, a_scales[:, 0])]
    b = [[e5m2_value(code) * 0.5 for code in row] for row in b_codes]
    expected = np.array([[sum(a[m][k] * b[k][n] for k in range(3)) for n in range(4)] for m in range(5)])
    assert np.array_equal(np.isnan(reference.value), np.isnan(expected))
    assert np.array_equal(reference.value[~np.isnan(expected)], expected[~np.isnan(expected)])
    assert np.isnan(reference.value[3:]).all()  # a NaN code; a NaN scale
    assert np.isnan(reference.value[1, 1]) and np.isnan(reference.value[2, 0])  # Inf * 0; Inf - Inf
    assert reference.value[0, 3] == reference.value[1, 0] == np.inf
    assert (reference.error_bound[~np.isfinite(reference.value)] == 0).all()


def test_reference_takes_codes_in_every_form_compare_takes():
    rng = np.random.default_rng(rng_seed)
    codes = random_codes(rng, "E4M3", (4, 32))
    expected = gemm.dequantize(codes, 2.0, "E4M3")
    assert np.array_equal(gemm.dequantize(values32(codes, "E4M3"), 2.0, "E4M3"), expected)  # decoded values
    assert np.array_equal(gemm.dequantize(codes.view(np.int8), np.float16(2.0), "float8_e4m3fn"), expected)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert np.array_equal(gemm.dequantize(codes.view(ml_dtypes.float8_e4m3fn), 2.0, "E4M3"), expected)


# ---- simulated kernels ----------------------------------------------------------------------------
def round_to_bfloat16(x):
    """float32 -> bfloat16 values (as float32), round to nearest even, from the bits."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


def round_to_bits(x, bits):
    """float64 values rounded to ``bits`` significant bits, to nearest even (no exponent limits)."""
    mantissa, exponent = np.frexp(x)
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)


def test_bfloat16_rounding_here_agrees_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.random.default_rng(rng_seed).normal(size=10_000).astype(np.float32)
    x = np.concatenate([x, np.float32([3.3961e38, 3.4e38, -0.0, 2.0**-130, 1 + 2.0**-8, 1 + 3 * 2.0**-8])])
    with np.errstate(over="ignore"):
        assert np.array_equal(round_to_bfloat16(x), x.astype(ml_dtypes.bfloat16).astype(np.float32))


def sequential(a32, b32, order=None, add_dtype=np.float32, rounding=None):
    """Products of dequantised float32 operands summed one at a time, in ``order``."""
    accumulator = np.zeros((a32.shape[0], b32.shape[1]), add_dtype)
    for k in (range(a32.shape[1]) if order is None else order):
        product = a32[:, k, None].astype(add_dtype) * b32[None, k, :].astype(add_dtype)
        accumulator = accumulator + product
        if rounding is not None:
            accumulator = rounding(accumulator)
    return accumulator.astype(np.float32)


def pairwise(a32, b32):
    terms = a32.T[:, :, None] * b32[:, None, :]  # K x M x N float32 products
    while len(terms) > 1:
        terms = terms[0::2] + terms[1::2]
    return terms[0]


def blockwise(a_elements, a_scales, b_elements, b_scales, group=128, narrow_bits=None, skip=None):
    """DeepSeek-V3's kernel (arXiv:2412.19437 section 3.3.2): products of element values summed in
    groups of ``group`` (float32, or ``narrow_bits`` rounding to nearest), each group's sum times its
    scales in float32, added into float32. Scales: A's (M, K / group), B's (K / group, N), float32."""
    total = np.zeros((a_elements.shape[0], b_elements.shape[1]), np.float32)
    for j in range(a_elements.shape[1] // group):
        if j == skip:
            continue
        partial = np.zeros_like(total, np.float64 if narrow_bits else np.float32)
        for k in range(j * group, (j + 1) * group):
            partial = partial + a_elements[:, k, None].astype(partial.dtype) * b_elements[None, k, :]
            if narrow_bits:
                partial = round_to_bits(partial, narrow_bits)
        total = total + partial.astype(np.float32) * a_scales[:, j, None] * b_scales[None, j, :]
    return total


def problem(layout="blockwise", inner=512, columns=128, seed=0, a_name="E4M3", b_name="E4M3", positive=False):
    """Random operands: codes, scales (float32) and float32 element values, for a layout."""
    rng = np.random.default_rng([rng_seed, seed])
    a_codes, b_codes = random_codes(rng, a_name, (8, inner)), random_codes(rng, b_name, (inner, columns))
    if positive:
        a_codes &= 0x7F
        b_codes &= 0x7F
    shapes = {"per-tensor": ((), ()), "rowwise": ((8, 1), (1, columns)),
              "blockwise": ((8, inner // 128), (inner // 128, columns // 128))}[layout]
    # float32 scales, not powers of two, in [2**-9, 2**-3]: outputs stay within float16's range
    a_scales, b_scales = (np.exp(rng.uniform(-2, 2, size=shape)).astype(np.float32) * np.float32(2.0**-6)
                          for shape in shapes)
    return dict(a_codes=a_codes, a_scales=np.asarray(a_scales, np.float32), b_codes=b_codes,
                b_scales=np.asarray(b_scales, np.float32), a_format=a_name, b_format=b_name)


def dequantized32(p):
    """Each operand dequantised in float32 (one rounding per element), as a simple kernel does."""
    a = values32(p["a_codes"], p["a_format"]) * expand(p["a_scales"], p["a_codes"].shape)
    b = values32(p["b_codes"], p["b_format"]) * expand(p["b_scales"], p["b_codes"].shape)
    return a.astype(np.float32), b.astype(np.float32)


def blockwise_of(p, **options):
    a_elements, b_elements = values32(p["a_codes"], p["a_format"]), values32(p["b_codes"], p["b_format"])
    b_scales = np.repeat(p["b_scales"], p["b_codes"].shape[1] // p["b_scales"].shape[1], axis=1)
    return blockwise(a_elements, p["a_scales"], b_elements, b_scales, **options)


CORRECT_KERNELS = {
    "sequential": lambda p: sequential(*dequantized32(p)),
    "reversed": lambda p: sequential(*dequantized32(p), order=range(p["a_codes"].shape[1] - 1, -1, -1)),
    "shuffled": lambda p: sequential(*dequantized32(p),
                                     order=np.random.default_rng(5).permutation(p["a_codes"].shape[1])),
    "pairwise": lambda p: pairwise(*dequantized32(p)),
    "sgemm": lambda p: np.matmul(*dequantized32(p)),
}


@pytest.mark.parametrize("kernel, layout", [(kernel, layout) for kernel in CORRECT_KERNELS
                                             for layout in ("per-tensor", "rowwise", "blockwise")]
                         + [("DeepSeek-V3 blockwise", "blockwise")])
def test_correct_kernels_pass(kernel, layout):
    p = problem(layout)
    out = blockwise_of(p) if kernel.startswith("DeepSeek") else CORRECT_KERNELS[kernel](p)
    assert out.dtype == np.float32
    for output, rounded in (("float32", out), ("bfloat16", round_to_bfloat16(out)),
                            ("float16", out.astype(np.float16))):
        report = gemm.compare_matmul(rounded, **p, output=output)
        assert report.ok, str(report)
        gemm.assert_matmul_close(rounded, **p, output=output)
    # the bound is not vacuous: the worst output uses a fair part of it (a float32 result rounded to
    # bfloat16 errs by up to u_bf16 |reference|, which the tolerance holds within a factor of ~1)
    report = gemm.compare_matmul(round_to_bfloat16(out), **p, output="bfloat16")
    error = np.abs(round_to_bfloat16(out) - report.reference.value)
    assert (error / report.tolerance).max() > 0.25


def test_a_correct_kernel_with_fp4_and_fp6_operands_passes():
    p = problem("rowwise", a_name="E2M1", b_name="E3M2")
    gemm.assert_matmul_close(sequential(*dequantized32(p)), **p)


def test_fourteen_bit_accumulator_fails_float32_and_passes_as_declared():
    """Hopper's FP8 tensor cores keep about 14 bits (DeepSeek-V3 section 3.3.2): a kernel summing
    128 products at 14 bits before promoting to float32 is beyond the float32 bound, within its own."""
    p = problem("blockwise", inner=256, positive=True)
    out = blockwise_of(p, narrow_bits=14)
    report = gemm.compare_matmul(out, **p)
    assert not report.ok and report.by_class["other"] == report.count
    assert "within the bound of an accumulator of" in only_hint(report)
    gemm.assert_matmul_close(out, **p, accumulator=14, promote_every=128)
    gemm.assert_matmul_close(out, **p, accumulator=14)  # no promotion: a looser bound, still met
    with pytest.raises(AssertionError, match="hint: the errors are within the bound of an accumulator of"):
        gemm.assert_matmul_close(out, **p)


def test_outputs_an_output_of_zero_would_pass_are_counted_and_named():
    """Found in a review: where a worst-case bound reaches |reference| (signs cancel: S grows as K,
    the reference as sqrt(K)), an output of zeros, or the negated product, passed without a word;
    bfloat16 accumulation over K = 100 passed them at every output. The report counts those
    outputs and its first line names them; where the bound is tighter it says nothing."""
    rng = np.random.default_rng(0)
    for inner, accumulator in ((100, "bfloat16"), (64, "bfloat16"), (2**14, "float32"), (512, "float32")):
        a = codec.encode(rng.standard_normal((4, inner)), "E4M3")
        b = codec.encode(rng.standard_normal((inner, 4)), "E4M3")
        options = dict(a_scales=1.0, b_scales=1.0, a_format="E4M3", b_format="E4M3", accumulator=accumulator)
        exact = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").value
        for actual in (np.zeros((4, 4), np.float32), exact.astype(np.float32), (-exact).astype(np.float32)):
            report = gemm.compare_matmul(actual, a, b_codes=b, **options)
            loose = (np.abs(exact) <= report.tolerance) & (exact != 0)  # (by hand: 0 lies within tolerance)
            assert report.zero_would_pass == np.count_nonzero(loose)
            assert report.count == np.count_nonzero(np.abs(actual - exact) > report.tolerance)  # (all finite)
            clause = f"; at {report.zero_would_pass} of the 16 the tolerance reaches |reference| (0 would agree there)"
            assert (clause in report.head()) == bool(loose.any()) and (clause in str(report)) == bool(loose.any())
        if inner == 100:
            assert loose.all()  # (every output: this declaration checks nothing)
        if inner == 512:
            assert not loose.any()
        # assert_matmul_close passes those outputs, and (a review's find) warns where they are most
        for actual in (np.zeros((4, 4), np.float32), exact.astype(np.float32)):
            report = gemm.compare_matmul(actual, a, b_codes=b, **options)
            if not report.ok:
                continue
            most = 2 * report.zero_would_pass > np.count_nonzero(exact)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gemm.assert_matmul_close(actual, a, b_codes=b, **options)
            assert [str(warning.message) for warning in caught] == (
                [f"assert_matmul_close checked little: {report.head()}; an output of zeros would pass at "
                 f"{report.zero_would_pass} of them (test a smaller K)"] if most else [])
            assert most == (inner in (100, 64))


def test_the_checked_little_warning_counts_finite_references_alone():
    """A review's find: the warning's denominator counted NaN references as nonzero, so two NaN rows of
    four (NaN scales: outputs that must be NaN) hid it while every finite output passed as zeros."""
    rng = np.random.default_rng(0)
    a = codec.encode(rng.standard_normal((4, 100)), "E4M3")
    b = codec.encode(rng.standard_normal((100, 4)), "E4M3")
    options = dict(a_format="E4M3", b_format="E4M3", accumulator="bfloat16")
    for nan_rows in (0, 2):
        a_scales = np.ones((4, 1))
        a_scales[4 - nan_rows:] = np.nan
        zeros = np.zeros((4, 4), np.float32)
        zeros[4 - nan_rows:] = np.nan
        report = gemm.compare_matmul(zeros, a, a_scales, b, 1.0, **options)
        assert report.ok and report.zero_would_pass == 4 * (4 - nan_rows)  # (every finite output: see above)
        with pytest.warns(UserWarning, match=f"assert_matmul_close checked little: .* an output of zeros would "
                                             f"pass at {4 * (4 - nan_rows)} of them"):
            gemm.assert_matmul_close(zeros, a, a_scales, b, 1.0, **options)


def test_an_output_of_zeros_is_named_as_left_unwritten():
    """A review's find: with K = 0 an unwritten output got a hint, but the same bug at K > 0 got none (no
    cause can be checked against zeros, which a negligible product matches too)."""
    rng = np.random.default_rng(1)
    a = codec.encode(rng.standard_normal((8, 128)), "E4M3")
    b = codec.encode(rng.standard_normal((128, 16)), "E4M3")
    report = gemm.compare_matmul(np.zeros((8, 16), np.float32), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3")
    assert not report.ok and report.hints == [
        "every output is 0 and the product is not: an output left unwritten, or a kernel that did not run?"]
    half = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").value.astype(np.float32)
    half[:4] = 0  # (some outputs written: not this hint)
    assert "left unwritten" not in " ".join(gemm.compare_matmul(half, a, 1.0, b, 1.0, a_format="E4M3",
                                                                b_format="E4M3").hints)


def test_a_quantized_tensor_or_a_bad_format_is_refused_naming_the_argument():
    """A review's find: an MXArray passed as codes read as a 0-d object array ("a 2-d array ..., got
    shape ()"), a ScaledTensor as scales as "dtype object", and a_format=None's error named no argument."""
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    quantized = mx.quantize(x, "MXFP8_E4M3")
    scaled = scaling.quantize_current(x, "E4M3")
    for call, message in (
            (lambda: gemm.dequantize(quantized, quantized.scale_values(), "E4M3"),
             "codes is a quantized tensor (MXArray), not an array: pass its .codes as codes and its .scale_values() "
             "as scales"),
            (lambda: gemm.dequantize(quantized.codes, quantized, "E4M3"),
             "scales is a quantized tensor (MXArray), not an array"),
            (lambda: gemm.reference_matmul(scaled.codes, scaled, scaled.codes.T, 1.0, a_format="E4M3",
                                           b_format="E4M3"),
             "a_scales is a quantized tensor (ScaledTensor), not an array: pass its .codes as a_codes and its "
             ".scale_inv as a_scales"),
            (lambda: gemm.reference_matmul(scaled.codes, 1.0, mx.quantize_nvfp4(x.T), 1.0, a_format="E4M3",
                                           b_format="E2M1"),
             "b_codes is a quantized tensor (NVFP4Array)")):
        with pytest.raises(TypeError, match=re.escape(message)):
            call()
    with pytest.raises(TypeError, match=r"^a_format: format must be a FloatFormat, a name \(str\) or an ml_dtypes dtype, "
                                        r"got NoneType"):
        gemm.reference_matmul(scaled.codes, 1.0, scaled.codes.T, 1.0, a_format=None, b_format="E4M3")
    with pytest.raises(ValueError, match=r"^b_format: unknown format 'E9M9'"):
        gemm.reference_matmul(scaled.codes, 1.0, scaled.codes.T, 1.0, a_format="E4M3", b_format="E9M9")
    ml_dtypes = pytest.importorskip("ml_dtypes")  # (its dtypes name their formats: the wording of the error)
    with pytest.raises(TypeError, match=r"^a_codes has dtype float8_e5m2, which holds E5M2 codes, not the E4M3 codes "
                                        r"that the format given names$"):
        gemm.reference_matmul(scaled.codes.view(ml_dtypes.float8_e5m2), 1.0, scaled.codes.T, 1.0, a_format="E4M3",
                              b_format="E4M3")


def test_the_first_line_says_how_loose_the_check_is_from_a_median_tolerance_of_one_percent():
    """A review's find: at K = 4096 with random signs the tolerance is a few percent of |reference| at
    most outputs (a float16 accumulator, or a 14-bit one never promoted, goes unseen there), short of
    zero_would_pass, and nothing said so. The median of tolerance / |reference| is a property, named in
    the first line from 1% up."""
    rng = np.random.default_rng(3)
    for inner, loose, documented in ((1024, False, (0.0015, 0.0025)), (4096, True, (0.01, 0.02))):
        a = codec.encode(rng.standard_normal((8, inner)), "E4M3")
        b = codec.encode(rng.standard_normal((inner, 8)), "E4M3")
        exact = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").value
        report = gemm.compare_matmul(exact.astype(np.float32), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3")
        by_hand = float(np.median(report.tolerance[exact != 0] / np.abs(exact[exact != 0])))
        assert report.ok and report.median_relative_tolerance == by_hand
        assert documented[0] < by_hand < documented[1]  # (the docstring's 0.19% and 1.4%)
        assert (by_hand >= gemm.LOOSE_RELATIVE_TOLERANCE) == loose
        clause = (f"; the median tolerance is {100 * by_hand:.3g}% of |reference| (a loose check: a smaller K, or "
                  f"operands of one sign, check more)")
        assert report.head().endswith(clause) == loose and (clause in report.head()) == loose
    empty = gemm.compare_matmul(np.zeros((1, 1)), np.zeros((1, 4), np.uint8), 1.0, np.zeros((4, 1), np.uint8), 1.0,
                                a_format="E4M3", b_format="E4M3")
    assert math.isnan(empty.median_relative_tolerance) and "median" not in empty.head()


def test_an_accumulator_with_no_useful_bound_is_refused():
    """gamma_(K+3)(2**-8) is Inf for K >= 253 and above 1 from K = 126 on: a bfloat16 accumulator
    over that many products bounds nothing, so every output passed, garbage and zeros included (a
    review's find). Such a declaration (a bound of S or more) is refused; with promotion every 32 products the bound is
    finite again, and a row of zero codes, whose exact product is 0, has a tolerance of subnormal
    spacings, not Inf * 0 = NaN."""
    a_codes = np.full((2, 300), 0x38, np.uint8)  # E4M3 1.0
    a_codes[1] = 0
    b_codes = np.full((300, 2), 0x38, np.uint8)
    options = dict(a_scales=1.0, b_scales=1.0, a_format="E4M3", b_format="E4M3")
    garbage = np.full((2, 2), 1e30, np.float32)
    for accumulator, inner, bound in (("bfloat16", 300, "none: K u >= 1"), (8, 300, "none: K u >= 1"),
                                      ("bfloat16", 126, "1.02 of S"), ("float16", 4096, "none: K u >= 1")):
        with pytest.raises(ValueError, match=rf"compare_matmul: an accumulator of {8 if accumulator != 'float16' else 11} "
                                             rf"bits summing K = {inner} products has no useful error bound "
                                             rf"\({bound}\), so any output would pass; declare promote_every"):
            gemm.compare_matmul(garbage, np.ones((2, inner), np.uint8) * 0x38, b_codes=np.full((inner, 2), 0x38, np.uint8),
                                accumulator=accumulator, **options)
        with pytest.raises(ValueError, match="no useful error bound"):
            gemm.assert_matmul_close(garbage, np.ones((2, inner), np.uint8) * 0x38,
                                     b_codes=np.full((inner, 2), 0x38, np.uint8), accumulator=accumulator, **options)
    assert gemm.compare_matmul(garbage[:1, :1], np.ones((1, 124), np.uint8) * 0x38, b_codes=np.full((124, 1), 0x38, np.uint8),
                               accumulator="bfloat16", **options).ok is False   # 124 products: 0.98 S, judged
    report = gemm.compare_matmul(np.array([[300.0, 300.0], [0.0, 0.0]]), a_codes, b_codes=b_codes,
                                 accumulator="bfloat16", promote_every=32, **options)
    assert report.ok and not np.isnan(report.tolerance).any() and (report.tolerance[1] < 1e-36).all(), str(report)
    assert not gemm.compare_matmul(np.zeros((2, 2)), a_codes, b_codes=b_codes, accumulator="bfloat16",
                                   promote_every=32, **options).ok


def scale_product_first(p, group):
    """A blockwise kernel that multiplies the two blocks' scales first, in float32 (a cuBLAS-style
    alpha), then scales each block's float32 sum of element products by it."""
    a_elements, b_elements = values32(p["a_codes"], p["a_format"]), values32(p["b_codes"], p["b_format"])
    a_scales = expand(p["a_scales"], p["a_codes"].shape).astype(np.float32)
    b_scales = expand(p["b_scales"], p["b_codes"].shape).astype(np.float32)
    total = np.zeros((a_elements.shape[0], b_elements.shape[1]), np.float32)
    for start in range(0, a_elements.shape[1], group):
        k = slice(start, start + group)
        alpha = a_scales[:, start, None] * b_scales[None, start, :]  # float32: may round into subnormals
        total = total + (a_elements[:, k] @ b_elements[k]) * alpha
    return total


@pytest.mark.parametrize("case", ["MX 2**-127 x 2**-23, scales multiplied first", "MX 2**-127 x 2**-26",
                                  "float32 subnormal scale, dequantised first"])
def test_correct_kernels_whose_intermediates_underflow_pass(case):
    """Correct float32 kernels whose intermediate products round into float32's subnormals: the
    rounding error there (up to 2**-150) is carried by a large later factor (a block's sum, a scale
    of 2**30), far beyond (4K + 4) spacings; the tolerance carries it too. A real bug still fails."""
    rng = np.random.default_rng(rng_seed)
    p = dict(a_codes=random_codes(rng, "E4M3", (4, 64)), b_codes=random_codes(rng, "E4M3", (64, 8)), a_format="E4M3",
             b_format="E4M3")
    if case.startswith("MX"):  # 2**-127 * 2**-23 = 2**-150 rounds to 0 (a tie, to even); 2**-153 too
        p.update(a_scales=e8m0(np.zeros((4, 2))), b_scales=e8m0(np.full((2, 8), 104 if "23" in case else 101)))
        out = scale_product_first(p, 32)
    else:  # 2**-140 * 1.375: 24 bits of float64, 10 of float32's subnormals; A dequantised into float32 rounds
        p.update(a_scales=np.float32(2.0**-140 * 1.375), b_scales=np.float32(2.0**30))
        out = sequential(*dequantized32(p))
    with np.errstate(under="ignore"):
        exact = [[sum(spec_value(p["a_codes"][m, k], "E4M3") * spec_value(p["b_codes"][k, n], "E4M3")
                      * Fraction(float(expand(p["a_scales"], (4, 64))[m, k])) * Fraction(float(expand(p["b_scales"], (64, 8))[k, n]))
                      for k in range(64)) for n in range(8)] for m in range(4)]
    error = max(abs(Fraction(float(out[m, n])) - exact[m][n]) for m in range(4) for n in range(8))
    assert error > 260 * 2.0**-149  # beyond the old (4K + 4) subnormal spacings (K = 64)
    report = gemm.compare_matmul(out, **p)
    assert report.ok, str(report)
    wrong = out.copy()
    wrong[1, 2] = -wrong[1, 2] if wrong[1, 2] != 0 else np.float32(2.0**-120)
    assert gemm.compare_matmul(wrong, **p).count >= 1


def test_a_correct_kernel_that_folds_both_scales_into_one_operand_passes():
    """A review's find: ``(x fl(alpha beta)) y``, both scales folded into A before the product, was not
    among the groupings the tolerance carries: where ``x alpha beta`` lands among float32's subnormals
    its rounding error, times y = 448, failed all 32 outputs ("the reference times 0.99999614: a wrong
    scale?"), while ``(x y) fl(alpha beta)`` passed. An extra factor of 1.001 still fails."""
    a_codes, b_codes = np.full((4, 32), 0x02, np.uint8), np.full((32, 8), 0x7E, np.uint8)  # E4M3 2**-8, 448
    a_scale, b_scale = np.float32(1.3 * 2.0**-63), np.float32(1.7 * 2.0**-63)
    a_values, b_values = codec.decode(a_codes, "E4M3"), codec.decode(b_codes, "E4M3")
    options = dict(a_format="E4M3", b_format="E4M3")
    with np.errstate(under="ignore"):
        folded = (a_values * (a_scale * b_scale)) @ b_values
        epilogue = (a_values @ b_values) * (a_scale * b_scale)
    assert not np.array_equal(folded, epilogue)
    for out in (folded, epilogue):
        assert gemm.compare_matmul(out, a_codes, a_scale, b_codes, b_scale, **options).ok
    assert gemm.compare_matmul(epilogue * np.float32(1.001), a_codes, a_scale, b_codes, b_scale, **options).count == 32


@pytest.mark.parametrize("shape", [(4, 0, 8), (0, 4, 8), (4, 4, 0), (0, 0, 0)], ids=["K=0", "M=0", "N=0", "all"])
def test_empty_gemms_are_compared(shape):
    """A review's find: an empty M or K was refused ("non-empty 2-d array"), where testing.compare and
    compare_mx take empty inputs, and K = 0, whose outputs must be 0 (an empty sum), is where a kernel
    that leaves its output unwritten shows. Scales: one for an empty axis, or none; two are refused."""
    rows, inner, columns = shape
    a, b = np.zeros((rows, inner), np.uint8), np.zeros((inner, columns), np.uint8)
    options = dict(a_format="E4M3", b_format="E4M3")
    for a_scales, b_scales in ((1.0, 1.0), (np.ones((rows, min(inner, 1))), np.ones((min(inner, 1), columns)))):
        reference = gemm.reference_matmul(a, a_scales, b, b_scales, **options)
        assert reference.value.shape == (rows, columns) and not reference.value.any()
        gemm.assert_matmul_close(np.zeros((rows, columns), np.float32), a, a_scales, b, b_scales, **options)
    if rows and columns:  # (K = 0: an output left unwritten)
        report = gemm.compare_matmul(np.full((rows, columns), np.float32(1e-3)), a, 1.0, b, 1.0, **options)
        assert report.count == rows * columns and report.hints == [
            "K = 0: every output is an empty sum, 0, and the kernel wrote other values: an output left unwritten "
            "(uninitialised memory), or K taken from another dimension?"]
    if inner == 0:
        with pytest.raises(ValueError, match="along axis 1, 2 scales for 0 elements"):
            gemm.reference_matmul(a, np.ones((max(rows, 1), 2)), b, 1.0, **options)


# ---- buggy kernels: each fails, with its diagnosis --------------------------------------------------
def hints_of(report):
    assert not report.ok
    return "\n".join(report.hints)


def only_hint(report):
    """The report's one hint: a second (another cause firing for this bug) fails the test."""
    assert not report.ok and len(report.hints) == 1, report.hints
    return report.hints[0]


def test_scale_block_off_by_one():
    p = problem("blockwise")
    shifted = dict(p, a_scales=np.roll(p["a_scales"], -1, axis=1))  # block j reads block j+1's scale
    report = gemm.compare_matmul(blockwise_of(shifted), **p)
    hints = only_hint(report)
    assert ("a_scales shifted by one block along K (block i used block i+1's scale, the last block the first's)"
            in hints), hints
    assert "transposed" not in hints and "twice" not in hints and "dropped" not in hints
    clamped = dict(p, a_scales=np.concatenate([p["a_scales"][:, 1:], p["a_scales"][:, -1:]], axis=1))
    assert "the last block its own" in only_hint(gemm.compare_matmul(blockwise_of(clamped), **p))


@pytest.mark.parametrize("rows, columns", [(16, 16), (8, 16), (16, 8)])
def test_an_output_written_column_major_is_named_at_any_shape(rows, columns):
    """An (M, N) output written column-major holds the reference's transpose read row by row. Found
    in a review: only a square output got the hint; an 8 x 16 one came back as 126 "other" rows."""
    rng = np.random.default_rng(2)
    a = codec.encode(rng.normal(size=(rows, 64)).astype(np.float32), "E4M3")
    b = codec.encode(rng.normal(size=(64, columns)).astype(np.float32), "E4M3")
    exact = codec.decode(a, "E4M3").astype(np.float64) @ codec.decode(b, "E4M3").astype(np.float64)
    column_major = np.ascontiguousarray(exact.astype(np.float32).T).reshape(rows, columns)
    report = gemm.compare_matmul(column_major, a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3")
    assert report.count > 0 and report.hints == [
        "the output is the reference transposed: a transposed or column-major output?"]


def test_transposed_scale_layout():
    p = problem("blockwise", inner=256, columns=256)  # B's scales are 2 x 2
    transposed = dict(p, b_scales=np.ascontiguousarray(p["b_scales"].T))
    hints = only_hint(gemm.compare_matmul(blockwise_of(transposed), **p))
    assert "b_scales read in transposed (column-major) order, b_scales.T" in hints, hints
    assert "shifted" not in hints and "a_scales" not in hints


@pytest.mark.parametrize("operand", ["a", "b"])
def test_scales_applied_along_the_wrong_axis(operand):
    """Rowwise scales indexed by their operand's other axis, of the same length: B's (1, N) scales
    applied per row k of B (K = N), A's (M, 1) per column k of A (M = K). The product with the
    transposed array taken as the layout, (N, 1) over K x N or (1, M) over M x K, is the output."""
    if operand == "b":
        p = problem("rowwise", inner=128, columns=128)
        a32 = dequantized32(p)[0]
        b32 = values32(p["b_codes"], "E4M3") * p["b_scales"].reshape(128, 1)  # row k times b_scales[0, k]
        expected = "b_scales.T as the layout (shape (128, 1) over K x N)"
    else:
        p = problem("rowwise", inner=8, columns=64)  # M = K = 8
        b32 = dequantized32(p)[1]
        a32 = values32(p["a_codes"], "E4M3") * p["a_scales"].reshape(1, 8)  # column k times a_scales[k, 0]
        expected = "a_scales.T as the layout (shape (1, 8) over M x K)"
    assert gemm.compare_matmul(sequential(*dequantized32(p)), **p).ok  # the correct kernel: no hint
    hint = only_hint(gemm.compare_matmul(sequential(a32, b32), **p))
    assert hint == f"the output matches the product with {expected}: scales applied along the wrong axis?"


@pytest.mark.parametrize("bug", ["an A tile doubled", "a B block quartered", "an MX scale code one low"])
def test_one_block_scale_wrong(bug):
    """One scale wrong: the hint names it, the outputs and k its block spans (from the layout, by
    hand) and the power of two it is off by."""
    if bug == "an A tile doubled":  # 1x128 tiles, a_scales (8, 4): [2, 1] is row 2, k = 128 to 255
        p = problem("blockwise")
        scales = p["a_scales"].copy()
        scales[2, 1] *= 2
        out, correct = blockwise_of(dict(p, a_scales=scales)), blockwise_of(p)
        expected = ("a_scales[2, 1] alone times 2**1 (m = 2, k = 128 to 255): one block's scale wrong "
                    "(an exponent off by 1)?")
    elif bug == "a B block quartered":  # 128x128 blocks, b_scales (4, 2): [3, 1] is k = 384 to 511, n = 128 to 255
        p = problem("blockwise", columns=256)
        scales = p["b_scales"].copy()
        scales[3, 1] /= 4
        out, correct = blockwise_of(dict(p, b_scales=scales)), blockwise_of(p)
        expected = ("b_scales[3, 1] alone times 2**-2 (n = 128 to 255, k = 384 to 511): one block's scale wrong "
                    "(an exponent off by -2)?")
    else:  # MX 32-blocks along K, a_scales (8, 8) of E8M0 codes; the kernel reads [5, 3] one low: k = 96 to 127
        rng = np.random.default_rng(rng_seed)
        codes = rng.integers(120, 135, size=(8, 8))
        p = dict(problem("per-tensor", inner=256, columns=64), a_scales=e8m0(codes),
                 b_scales=e8m0(rng.integers(120, 135, size=(8, 64))))
        low = codes.copy()
        low[5, 3] -= 1
        out, correct = sequential(*dequantized32(dict(p, a_scales=e8m0(low)))), sequential(*dequantized32(p))
        expected = ("a_scales[5, 3] alone times 2**-1 (m = 5, k = 96 to 127): one block's scale wrong "
                    "(an exponent off by -1)?")
    assert gemm.compare_matmul(correct, **p).ok
    assert only_hint(gemm.compare_matmul(out, **p)) == "the output matches the product with " + expected


@pytest.mark.parametrize("exponent", [-135, -145])
def test_no_block_hint_that_zeros_would_match(exponent):
    """Row 0 of A scaled by 2**e: its outputs are 4 * 2**e (K = 4 products of 1.0), and the kernel
    gives a quarter of them, as if a_scales[0, 0] were 2**(e - 2). For e = -145 that product, 2**-145,
    is within its own tolerance (float32 accumulation's (4K + 4) subnormal spacings alone are
    20 * 2**-149), so an output of zeros matches it as well: no block hint."""
    ones_a, ones_b = np.full((2, 4), 0x38, np.uint8), np.full((4, 4), 0x38, np.uint8)  # E4M3 1.0
    scales = np.array([[2.0**exponent], [1.0]], np.float32)
    out = np.array([[2.0**exponent] * 4, [4.0] * 4], np.float32)
    report = gemm.compare_matmul(out, ones_a, scales, ones_b, 1.0, a_format="E4M3", b_format="E4M3")
    assert report.count == 4
    named = [hint for hint in report.hints if "alone times" in hint]
    if exponent == -145:
        assert named == [], report.hints
    else:
        assert named == ["the output matches the product with a_scales[0, 0] alone times 2**-2 (m = 0, k = 0 to 3): "
                         "one block's scale wrong (an exponent off by -2)?"], report.hints


@pytest.mark.parametrize("layout", ["per-tensor", "rowwise"])
def test_scale_applied_twice_or_omitted(layout):
    p = problem(layout)
    a32, b32 = dequantized32(p)
    twice = a32 * expand(p["a_scales"], a32.shape)  # the scale applied again
    hints = only_hint(gemm.compare_matmul(sequential(twice, b32), **p))
    assert "a_scales applied twice (each scale squared)" in hints and "b_scales" not in hints, hints
    omitted = values32(p["b_codes"], "E4M3")
    hints = only_hint(gemm.compare_matmul(sequential(a32, omitted), **p))
    assert "b_scales all ones: a scale omitted?" in hints and "a_scales" not in hints, hints


@pytest.mark.parametrize("bug, hint", [
    (lambda s: s * s, "a_scales and b_scales both applied twice (each scale squared): the epilogue's product of "
                      "scales applied twice?"),
    (np.ones_like, "a_scales and b_scales both all ones: both scales omitted?"),
    (lambda s: 1 / s, "1 / a_scales and 1 / b_scales: the scales and their inverses confused?")])
def test_a_bug_in_both_scales_is_named(bug, hint):
    """Found in a review by a kernel author: both scales omitted, or their product (an epilogue's alpha)
    applied twice, the commonest scaled-GEMM bugs, gave no hint: only one operand's variants were tried."""
    p = problem("blockwise", inner=256, columns=64)
    powers = np.random.default_rng(rng_seed).integers(-5, 5, size=(2, 8, 8))
    p.update(a_scales=np.ldexp(np.float32(1), powers[0]), b_scales=np.ldexp(np.float32(1), powers[1]))  # 32-blocks
    used = dict(p, a_scales=bug(p["a_scales"]), b_scales=bug(p["b_scales"]))
    assert gemm.compare_matmul(sequential(*dequantized32(p)), **p).ok
    assert only_hint(gemm.compare_matmul(sequential(*dequantized32(used)), **p)) == (
        "the output matches the product with " + hint)


def test_per_tensor_scales_both_omitted_are_named_by_their_product():
    """Per-tensor scales omitted on both sides left only "times 162.6...: a wrong scale, or an extra
    factor" (found in a review by a kernel author): 1 / (a_scale * b_scale) is a candidate now."""
    p = dict(problem("per-tensor", inner=256, columns=64), a_scales=np.float32(0.375), b_scales=np.float32(5.0))
    a32, b32 = dequantized32(dict(p, a_scales=1.0, b_scales=1.0))
    assert only_hint(gemm.compare_matmul(sequential(a32, b32), **p)) == (
        "every mismatched output is the reference times 0.5333333333333333 (the inverse of a_scales times "
        "b_scales): both scales omitted?")


def test_scales_written_column_major_and_read_row_by_row_are_named():
    """The other permutation of a non-square scale array (its transpose's bytes read in its shape) gave
    no hint (found in a review by a kernel author); scales.reshape(columns, rows).T had one."""
    p = problem("per-tensor", inner=256, columns=64)
    p.update(a_scales=np.ldexp(np.float32(1), np.random.default_rng(rng_seed).integers(-5, 5, size=(8, 4))))
    used = dict(p, a_scales=p["a_scales"].T.reshape(8, 4))
    assert only_hint(gemm.compare_matmul(sequential(*dequantized32(used)), **p)) == (
        "the output matches the product with a_scales written in column-major order and read row by row, "
        "a_scales.T.reshape(8, 4): a transposed scale layout?")


def test_an_output_factor_is_named():
    p = dict(problem("per-tensor"), a_scales=1.0, b_scales=1.0)
    out = sequential(*dequantized32(p)) * np.float32(2.0**-3)  # e.g. an epilogue alpha applied again
    report = gemm.compare_matmul(out, **p)
    assert report.hints == ["every mismatched output is the reference times 2**-3: a scale exponent off by -3 (an E8M0 "
                            "bias?), or a scale applied twice or omitted?"]


def test_dropped_k_block():
    p = problem("blockwise")
    hints = hints_of(gemm.compare_matmul(blockwise_of(p, skip=2), **p))
    assert hints == "the output matches the product without K block 2 of 128 (k = 256 to 383): a dropped K block?"


def test_an_e8m0_exponent_off_by_one_is_named():
    """Every A scale read as twice its value (an E8M0 bias of 126 for 127): the factor 2 and its cause."""
    p = dict(problem("per-tensor"), a_scales=e8m0(np.full((8, 4), 125)), b_scales=e8m0(np.full((4, 128), 130)))
    a32, b32 = dequantized32(p)
    hints = hints_of(gemm.compare_matmul(sequential(a32 * np.float32(2), b32), **p))
    assert hints == ("every mismatched output is the reference times 2**1: a scale exponent off by 1 (an E8M0 bias?), "
                     "or a scale applied twice or omitted?"), hints


@pytest.mark.parametrize("bug", ["one block's scale doubled", "both scales inverted", "E5M2 codes read as E4M3"])
def test_no_accumulator_hint_for_scale_and_format_bugs(bug):
    """Bugs whose errors fit only a vacuous accumulator bound (gamma_(K+3)(2**-8) is Inf for K = 256,
    gamma_(259)(2**-9) > 1) or lie in one row get no "narrower accumulator" hint: it would mislead."""
    p = problem("per-tensor", inner=256, columns=64)
    powers = np.random.default_rng(rng_seed).integers(-5, 5, size=(2, 8, 8))
    p.update(a_scales=np.ldexp(np.float32(1), powers[0]), b_scales=np.ldexp(np.float32(1), powers[1]))  # 32-blocks
    if bug == "one block's scale doubled":
        used = dict(p, a_scales=p["a_scales"] * np.where(np.arange(64).reshape(8, 8) == 13, 2, 1).astype(np.float32))
    elif bug == "both scales inverted":
        used = dict(p, a_scales=1 / p["a_scales"], b_scales=1 / p["b_scales"])
    else:
        p.update(a_codes=random_codes(np.random.default_rng(1), "E5M2", (8, 256)), a_format="E5M2")
        used = dict(p, a_codes=np.where(values32(p["a_codes"], "E4M3") == values32(p["a_codes"], "E4M3"),
                                         p["a_codes"], 0).astype(np.uint8), a_format="E4M3")  # (E4M3 NaN codes: 0)
    report = gemm.compare_matmul(sequential(*dequantized32(used)), **p)
    assert not report.ok
    assert not any("accumulator" in hint for hint in report.hints), report.hints


@pytest.mark.parametrize("bug", ["row 0's scales for every row", "rows pair-swapped", "K block 0's for every block",
                                 "b_scales' K block 0's for every block"])
def test_scales_read_from_other_entries_are_named_not_a_narrower_accumulator(bug):
    """Found in a review: a kernel that read its scales from the wrong entries (an M stride of 0,
    rows swapped, one K block's scale for all) was told "the errors are within the bound of an
    accumulator of 13 significand bits": that bound, S/16 at K = 512, fits such bugs too. The
    operands are tutorial 8's DeepSeek-V3 ones (1x128 activation blocks, 128x128 weight blocks)."""
    rng = np.random.default_rng(2)
    activations = rng.normal(0.0, 1.0, size=(16, 512)).astype(np.float32)
    weights = rng.normal(0.0, 0.05, size=(512, 256)).astype(np.float32)
    weights[:, 128:] *= 10
    a = scaling.quantize_blockwise(activations, "E4M3", block_shape=(1, 128), axis=1, power_of_2=False)
    b = scaling.quantize_blockwise(weights, "E4M3", block_shape=(128, 128), axis=0, power_of_2=False)
    a_scales, b_scales = a.scale_inv.copy(), b.scale_inv.copy()
    if bug == "row 0's scales for every row":
        a_scales = np.repeat(a_scales[:1], 16, axis=0)
    elif bug == "rows pair-swapped":
        a_scales = a_scales[np.arange(16) ^ 1]
    elif bug == "K block 0's for every block":
        a_scales = np.repeat(a_scales[:, :1], 4, axis=1)
    else:
        b_scales = np.repeat(b_scales[:1], 4, axis=0)
    a_values = codec.decode(a.codes, "E4M3").astype(np.float64) * np.repeat(a_scales, 128, axis=1)
    b_values = codec.decode(b.codes, "E4M3").astype(np.float64) * np.repeat(np.repeat(b_scales, 128, 0), 128, 1)
    report = gemm.compare_matmul((a_values @ b_values).astype(np.float32), a.codes, a.scale_inv, b.codes,
                                 b.scale_inv, a_format="E4M3", b_format="E4M3")
    assert report.count > 1000 and len(report.hints) == 1, report.hints
    name, changed = ("b_scales", b_scales != b.scale_inv) if bug.startswith("b_") else ("a_scales",
                                                                                         a_scales != a.scale_inv)
    assert report.hints[0].startswith(f"the output matches the product with {changed.sum()} of {changed.size} "
                                      f"entries of {name} replaced by values it holds elsewhere (")
    assert report.hints[0].endswith("scales read from the wrong index (a stride, offset or layout bug)?")
    if bug == "row 0's scales for every row":
        assert "a_scales[1, 0] read as a_scales[0, 0]; a_scales[1, 1] read as a_scales[0, 1];" in report.hints[0]
    if bug != "rows pair-swapped":
        return
    # a kernel that is right but for its accumulator still gets that hint, not this one
    def round_to_13_bits(x):
        mantissa, exponent = np.frexp(x)
        return np.ldexp(np.round(np.ldexp(mantissa, 13)), exponent - 13)

    a_true = codec.decode(a.codes, "E4M3").astype(np.float64) * np.repeat(a.scale_inv, 128, axis=1)
    b_true = codec.decode(b.codes, "E4M3").astype(np.float64) * np.repeat(np.repeat(b.scale_inv, 128, 0), 128, 1)
    total = np.zeros((16, 256))
    for k in range(512):
        total = round_to_13_bits(total + a_true[:, k, None] * b_true[k])
    narrow = gemm.compare_matmul(total.astype(np.float32), a.codes, a.scale_inv, b.codes, b.scale_inv,
                                 a_format="E4M3", b_format="E4M3")
    assert len(narrow.hints) == 1 and "accumulator" in narrow.hints[0], narrow.hints


def test_a_hint_needs_a_product_that_zeros_would_not_match():
    """MX scales 2**-60: the outputs are near 2**-110, the product with either scale squared near
    2**-170, ~0, which an output of zeros (a kernel that forgot to write it) matches as well as any:
    "applied twice" would be a false lead."""
    p = dict(problem("per-tensor", inner=64, columns=8), a_scales=e8m0(np.full((8, 2), 67)),
             b_scales=e8m0(np.full((2, 8), 67)))
    report = gemm.compare_matmul(np.zeros((8, 8), np.float32), **p)
    assert report.count > 0 and report.hints == [  # (the observation alone: no cause)
        "every output is 0 and the product is not: an output left unwritten, or a kernel that did not run?"]


@pytest.mark.parametrize("narrow", ["float16", "bfloat16"])
def test_narrow_accumulation(narrow):
    p = problem("per-tensor", positive=True)
    a32, b32 = dequantized32(p)
    if narrow == "float16":
        out = sequential(a32, b32, add_dtype=np.float16)
    else:
        out = sequential(a32, b32, rounding=round_to_bfloat16)
    report = gemm.compare_matmul(out, **p)
    assert report.by_class["other"] == report.count > 0
    hints = only_hint(report)
    assert "within the bound of an accumulator of" in hints and "not of 24 bits" in hints, hints
    bits = int(hints.split("an accumulator of ")[1].split()[0])
    assert 8 <= bits < 24
    if narrow == "float16":
        gemm.assert_matmul_close(out, **p, accumulator=narrow)  # as declared, it passes
    else:  # K = 512 products in 8 bits: no bound at all (it "passed" as any output did)
        with pytest.raises(ValueError, match="no useful error bound"):
            gemm.assert_matmul_close(out, **p, accumulator=narrow)


def test_sign_flip_in_one_element():
    p = problem("rowwise")
    out = sequential(*dequantized32(p))
    reference = gemm.reference_matmul(**p).value
    i, j = np.unravel_index(np.argmax(np.abs(reference)), reference.shape)
    out[i, j] = -out[i, j]
    report = gemm.compare_matmul(out, **p)
    assert (report.count, report.by_class["sign"], report.hints) == (1, 1, [])
    assert (report.mismatches[0].row, report.mismatches[0].column) == (i, j) == (report.worst.row, report.worst.column)
    with pytest.raises(AssertionError, match=r"1 of 1024 outputs beyond tolerance \[sign 1\]"):
        gemm.assert_matmul_close(out, **p)


def test_a_negated_output_within_its_tolerance_is_other_not_sign():
    """A mutation test's find: "sign" (the negated reference) is named only where |reference| exceeds
    the tolerance, so that a sign is told from rounding; nothing pinned that. K = 5 with a 13-bit
    accumulator: S = 4 * 448 + 1 = 1793, tolerance about gamma_8(2**-13) S = 1.75, reference 1: its
    negation, 2 away, lies beyond the tolerance but |reference| does not, so it is "other"."""
    a = codec.encode(np.array([[448.0, -448.0, 448.0, -448.0, 1.0]]), "E4M3")
    b = codec.encode(np.ones((5, 1)), "E4M3")
    options = dict(a_format="E4M3", b_format="E4M3", accumulator=13)
    reference = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").value
    report = gemm.compare_matmul(-reference, a, 1.0, b, 1.0, **options)
    assert reference[0, 0] == 1.0 and 1.0 < report.tolerance[0, 0] < 2.0
    assert report.count == 1 and report.by_class["other"] == 1 and report.by_class["sign"] == 0


def test_report_table_rows():
    p = problem("rowwise")
    out = sequential(*dequantized32(p))
    out[0, 1] += np.float32(1.0)
    out[2, 3] = np.nan
    report = gemm.compare_matmul(out, **p, max_rows=1)
    text = str(report)
    assert report.count == 2 and len(report.mismatches) == 1 and "... and 1 more" in text
    row = report.mismatches[0]
    assert (row.row, row.column, row.kind) == (0, 1, "other")
    assert row.error == abs(row.actual - row.reference) and row.ratio == row.error / row.tolerance > 1
    assert report.worst.kind == "NaN/Inf" and report.worst.ratio == np.inf
    assert "row column" in text and "error/tol" in text


def test_non_finite_outputs_and_overflow():
    # all-positive E4M3 operands with 448 * 448 products: float16's 65504 overflows
    a_codes = np.full((2, 4), 0x7E, np.uint8)  # 448
    b_codes = np.full((4, 2), 0x7E, np.uint8)
    b_codes[:, 1] = 0x38  # 1.0: column 1 sums to 4 * 448 = 1792, within float16
    expected = np.array([[np.inf, 1792.0], [np.inf, 1792.0]])
    options = dict(a_codes=a_codes, a_scales=1.0, b_codes=b_codes, b_scales=1.0, a_format="E4M3", b_format="E4M3")
    assert gemm.compare_matmul(expected, **options, output="float16").ok
    saturated = np.where(np.isinf(expected), 65504.0, expected)
    report = gemm.compare_matmul(saturated, **options, output="float16")
    assert report.by_class["overflow"] == 2 and report.count == 2
    assert gemm.compare_matmul(np.array([[4 * 448.0**2, 1792], [4 * 448.0**2, 1792]]), **options).ok  # float32
    report = gemm.compare_matmul(np.array([[np.inf, np.inf], [-np.inf, np.nan]]), **options)
    assert (report.count, report.by_class["NaN/Inf"]) == (4, 4)
    nan_operand = dict(options, a_codes=np.where(np.arange(4) == 1, 0x7F, a_codes).astype(np.uint8))  # NaN codes
    assert gemm.compare_matmul(np.full((2, 2), np.nan), **nan_operand).ok
    report = gemm.compare_matmul(np.full((2, 2), 1.0), **nan_operand)
    assert report.by_class["NaN/Inf"] == 4


def test_an_inf_output_is_accepted_only_where_the_product_can_round_to_inf():
    """The output's overflow threshold is max plus half a spacing (float16: 65504 + 16 = 65520,
    IEEE 754 round to nearest), not max: a one-term product of 65476, exact in any accumulator,
    rounds to float16's 65472, never to Inf, so an Inf output is wrong there; from 65520 on it
    rounds to Inf. NumPy's own float16 rounding is the oracle."""
    one = np.array([[0x38]], np.uint8)  # E4M3 1.0
    options = dict(a_codes=one, b_codes=one, b_scales=1.0, a_format="E4M3", b_format="E4M3", output="float16")
    for value in (65476.0, 65520.0, 65536.0):
        with np.errstate(over="ignore"):
            rounded = np.float16(value)
        assert gemm.compare_matmul(np.array([[rounded]]), a_scales=value, **options).ok
        report = gemm.compare_matmul(np.array([[np.inf]], np.float16), a_scales=value, **options)
        assert report.ok == bool(np.isinf(rounded)), value


def test_an_inf_of_the_wrong_sign_fails_where_the_product_can_round_to_inf():
    """A mutation audit's gap: a verdict that took an Inf of either sign where the output can overflow
    passed every test (the only -Inf tested lay where nothing overflows). A one-term product of 65504
    may round to float16's +Inf within its tolerance, never to -Inf; 65536, beyond E5M2's 61440
    without saturation, is E5M2's +Inf code 0x7C, never -Inf's 0xFC."""
    one = np.array([[0x38]], np.uint8)  # E4M3 1.0
    options = dict(a_codes=one, b_codes=one, b_scales=1.0, a_format="E4M3", b_format="E4M3")
    for infinity, ok in ((np.inf, True), (-np.inf, False)):
        report = gemm.compare_matmul(np.array([[infinity]], np.float16), a_scales=np.float32(65504), output="float16",
                                     **options)
        assert report.ok == ok, infinity
    for code, ok in ((0x7C, True), (0xFC, False)):
        report = gemm.compare_matmul(np.array([[code]], np.uint8), a_scales=np.float32(65536), output="E5M2",
                                     saturate=False, **options)
        assert report.ok == ok, hex(code)


@pytest.mark.parametrize("groups", [150, 500])
def test_a_kernel_promoting_into_a_narrow_register_instead_of_float32_fails(groups):
    """A mutation audit's gap: every promote_every test passed a correct kernel or failed one far
    beyond the bound, so a bound whose promoted float32 sum rounded with the narrow accumulator's unit
    (or was 1.25x looser) passed them all. This kernel promotes every 128 products into a 14-bit
    register, not float32: 128 * 128 = 2**14 first, then each later group's 1.0 is a tie at 2**14
    that rounds to even, so it writes 16384 where the product is 16384 + groups. Declared with a
    14-bit accumulator promoted every 128 (the sum in float32), it fails: at 150 groups its error is
    just beyond the tolerance (about 1.15 times it when the audit ran), so a looser bound passes it;
    the exact sum passes."""
    a = np.zeros((1, 128 * (groups + 1)))
    a[0, :128], a[0, 128::128] = 128.0, 1.0
    report = gemm.compare_matmul(np.array([[16384.0]], np.float32), codec.encode(a, "E4M3"), 1.0,
                                 codec.encode(np.ones((a.shape[1], 1)), "E4M3"), 1.0, a_format="E4M3",
                                 b_format="E4M3", accumulator=14, promote_every=128)
    assert not report.ok and report.count == 1
    assert gemm.compare_matmul(np.array([[16384.0 + groups]], np.float32), codec.encode(a, "E4M3"), 1.0,
                               codec.encode(np.ones((a.shape[1], 1)), "E4M3"), 1.0, a_format="E4M3",
                               b_format="E4M3", accumulator=14, promote_every=128).ok


def test_an_output_that_a_float16_accumulator_could_not_hold_is_classed_overflow():
    """A mutation audit's gap: the class of an output beyond what the declared accumulator can hold
    read "other" under a mutant that took float32's threshold for float16's. 448 * 448 = 200704 is
    beyond float16's 65520: a float32 output of 65504 is a saturated float16 sum."""
    a = codec.encode(np.array([[448.0]]), "E4M3")
    report = gemm.compare_matmul(np.array([[65504.0]], np.float32), a, 1.0, a, 1.0, a_format="E4M3",
                                 b_format="E4M3", accumulator="float16")
    assert report.count == 1 and report.by_class["overflow"] == 1


# ---- bad input ------------------------------------------------------------------------------------
def good():
    return problem("rowwise", inner=128, columns=16)


@pytest.mark.parametrize("change, error, message", [
    (dict(a_scales=np.full((8, 1), 127, np.uint8)), TypeError, "decode scale codes first"),
    (dict(a_scales=np.ones(8, np.float32)), ValueError, r"rowwise scales of A are \(M, 1\)"),
    (dict(a_scales=np.ones((8, 3), np.float32)), ValueError, "along axis 1, 3 scales for 128 elements"),
    (dict(b_scales=np.ones((1, 16), bool)), TypeError, "got dtype bool"),
    (dict(a_scales=np.array(0.1)), ValueError, r"has more than 49 significant bits"),
    (dict(a_scales=np.float32(1e-38) * np.float32(1e-7)), None, None),  # a float32 subnormal scale is fine
    (dict(a_scales=2.0**-600), ValueError, r"outside \[2\*\*-500, 2\*\*500\]"),
    (dict(a_codes=np.zeros((8, 64), np.uint8)), ValueError, "inner dimensions"),
    (dict(a_codes=np.zeros(128, np.uint8)), ValueError, "must be a 2-d array of E4M3 codes"),
    (dict(a_codes=np.zeros((8, 128), np.int64)), TypeError, r"astype\(np.uint8\)"),
    (dict(a_codes=np.full((8, 128), 16, np.uint8), a_format="E2M1"), ValueError, r"codes lie in \[0, 16\)"),
    (dict(a_format="E9M9"), ValueError, "unknown format"),
    # (an MX format: "format must be a FloatFormat or a name", or "unknown format 'MXFP8_E4M3'")
    (dict(a_format=mx.MXFP8_E4M3), TypeError,
     r"a_format: MXFP8_E4M3 is a block format; pass its element format, 'E4M3' \(MXFP8_E4M3's .elem\)"),
    (dict(b_format="mxfp4_e2m1"), ValueError, "b_format: MXFP4_E2M1 is a block format; pass its element format, 'E2M1'"),
    (dict(accumulator="float64"), ValueError, "accumulator must be one of"),
    (dict(accumulator=1), ValueError, r"in \[2, 24\]"),
    (dict(accumulator=2.5), TypeError, "accumulator must be a type name"),
    (dict(accumulator=True), TypeError, "accumulator must be a type name"),
    (dict(promote_every=0), ValueError, "promote_every must be >= 1"),
    (dict(output="fp32"), ValueError, "output must be one of"),
    (dict(output=None), TypeError, "output must be one of"),
    (dict(max_rows=-1), ValueError, "max_rows"),
    (dict(actual=np.zeros((16, 8), np.float32)), ValueError, "the product is 8 x 16"),
    (dict(actual=np.zeros((8, 16), np.int32)), TypeError, "float16, float32 or float64 values"),
    (dict(actual=np.full((8, 16), 1 + 2.0**-10, np.float32), output="bfloat16"), ValueError, "not a bfloat16 value"),
])
def test_bad_input_gets_a_clear_error(change, error, message):
    p = good()
    actual = change.pop("actual", np.zeros((8, 16), np.float32))
    p.update(change)
    if error is None:
        gemm.compare_matmul(actual, **p)
        return
    with pytest.raises(error, match=message):
        gemm.compare_matmul(actual, **p)


def test_ml_dtypes_outputs_and_scales_are_their_float32_values():
    """A bfloat16 output and float8_e8m0fnu scales (as torchao gives MX scales) read as float32 values."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = good()
    zeros = np.zeros((8, 16))
    assert str(gemm.compare_matmul(zeros.astype(ml_dtypes.bfloat16), **p)) == str(gemm.compare_matmul(zeros, **p))
    scales = np.array([[2.0**-3], [1.0], [4.0], [2.0**-127], [2.0**127], [0.5], [8.0], [1.0]])
    typed = gemm.reference_matmul(p["a_codes"], scales.astype(ml_dtypes.float8_e8m0fnu), p["b_codes"], 1.0,
                                  a_format="E4M3", b_format="E4M3")
    plain = gemm.reference_matmul(p["a_codes"], scales, p["b_codes"], 1.0, a_format="E4M3", b_format="E4M3")
    assert np.array_equal(typed.value, plain.value) and np.array_equal(typed.error_bound, plain.error_bound)


@pytest.mark.parametrize("output", ["bfloat16", "float16"])
def test_an_undeclared_16_bit_output_is_named_not_blamed_on_the_accumulator(output):
    """A correct kernel (float32 accumulation) that writes a bfloat16 or float16 output, tested with
    the default output="float32": the hint says to declare the output, where it blamed a 13-15 bit
    accumulator (and sent its reader to rework correct accumulation code)."""
    p = problem("per-tensor")
    out = sequential(*dequantized32(p))
    out = round_to_bfloat16(out) if output == "bfloat16" else out.astype(np.float16)
    report = gemm.compare_matmul(out, **p)
    assert not report.ok
    assert only_hint(report) == (f"every output is a {output} value, and all are within tolerance judged as a "
                                 f"{output} output (accumulator of 24 bits): pass output={output!r}, the type the "
                                 f"kernel wrote?")
    gemm.assert_matmul_close(out, **p, output=output)  # as declared, it passes


def test_a_narrow_accumulator_with_a_16_bit_output_is_still_the_accumulator():
    """Every output of a float16 accumulation is a float16 value too, but not within the float32
    accumulator's bound as a float16 output: the accumulator hint stands."""
    p = problem("per-tensor", positive=True)
    out = sequential(*dequantized32(p), add_dtype=np.float16)
    hint = only_hint(gemm.compare_matmul(out, **p))
    assert hint.startswith("the errors are within the bound of an accumulator of"), hint


@pytest.mark.parametrize("seed", range(40))
def test_nvfp4_operands_as_the_docs_pass_them(seed):
    """compare_matmul's docstring and tutorial 8: an NVFP4 array's scale_values() (the float32 factor
    its dequantize multiplies each block by); an NVFP4 GEMM of the dequantized operands then passes,
    and one taking encode_scale as the tensor scale does not. The docs once gave the exact float64
    product of the E4M3 scale and global_amax * float32(1 / 2688): up to 52 significant bits, which
    the exactness check refused for about a quarter of tensors (seed 0, the one tested, passed)."""
    import minifp8
    from minifp8 import mx

    rng = np.random.default_rng(seed)
    qa = mx.quantize_nvfp4(rng.normal(0, 1, (8, 64)).astype(np.float32))
    qb = mx.quantize_nvfp4(rng.normal(0, 3, (8, 64)).astype(np.float32))  # B stored N x K: pass its transpose
    out = qa.dequantize() @ qb.dequantize().T
    gemm.assert_matmul_close(out, qa.codes, qa.scale_values(), qb.codes.T, qb.scale_values().T,
                             a_format="E2M1", b_format="E2M1")

    def scales(q, tensor_scale):
        return minifp8.decode(q.scales, "E4M3").astype(np.float64) * tensor_scale

    wrong = gemm.compare_matmul(out, qa.codes, scales(qa, qa.encode_scale), qb.codes.T,
                                scales(qb, qb.encode_scale).T, a_format="E2M1", b_format="E2M1")
    assert not wrong.ok


def test_nvfp4_scale_values_are_the_factors_dequantize_multiplies_by():
    from minifp8 import mx

    x = np.random.default_rng(3).normal(0, 1, (6, 48)).astype(np.float32)
    huge = x * np.float32(1e36)  # S_dec_b * global_amax overflows float32: dequantize's rescaled steps
    for q in (mx.quantize_nvfp4(x), mx.quantize_nvfp4(x.T, axis=0), mx.quantize_nvfp4(huge)):
        factors = q.scale_values()
        assert factors.dtype == np.float32 and factors.shape == q.scales.shape
        blocked = np.moveaxis(q.codes, q.axis, -1).reshape(-1, 16)  # (the blocked axis is 48 long: 3 blocks)
        values = (formats.E2M1.values()[blocked].astype(np.float32)
                  * np.moveaxis(factors, q.axis, -1).reshape(-1, 1)).reshape(np.moveaxis(q.codes, q.axis, -1).shape)
        np.testing.assert_array_equal(np.moveaxis(values, -1, q.axis), q.dequantize())
    huge_factors = mx.quantize_nvfp4(huge).scale_values()
    assert np.isfinite(huge_factors).all() and (huge_factors > 1e30).any()
    mxq = mx.quantize(x, "MXFP8_E4M3")
    np.testing.assert_array_equal(mxq.scale_values(), 2.0 ** (mxq.scales.astype(np.float64) - 127))


def test_block_scales_that_would_tile_k_in_blocks_of_no_power_of_two_are_refused():
    """mx.quantize gives ceil(48 / 32) = 2 scales over K = 48 (blocks of 32 and 16); read as two
    blocks of 24 they made a correct kernel fail on every output, with no hint (a code review)."""
    from minifp8 import mx

    rng = np.random.default_rng(4)
    qa = mx.quantize(rng.normal(0, 1, (4, 48)).astype(np.float32), "MXFP8_E4M3")
    qb = mx.quantize(rng.normal(0, 1, (48, 8)).astype(np.float32), "MXFP8_E4M3", axis=0)
    out = qa.dequantize() @ qb.dequantize()
    with pytest.raises(ValueError, match=r"a_scales has shape \(4, 2\): along axis 1, 2 scales for 48 elements would "
                                         r"be blocks of 24, but block scales cover power-of-two blocks"):
        gemm.compare_matmul(out, qa.codes, qa.scale_values(), qb.codes, qb.scale_values(), a_format="E4M3",
                            b_format="E4M3")
    padded_a = np.pad(qa.codes, ((0, 0), (0, 16)))  # zero codes to K = 64: the same product
    padded_b = np.pad(qb.codes, ((0, 16), (0, 0)))
    gemm.assert_matmul_close(out, padded_a, qa.scale_values(), padded_b, qb.scale_values(), a_format="E4M3",
                             b_format="E4M3")


def test_an_fp8_output_is_refused_with_the_way_to_check_it():
    """A review's find: the message said to compare an FP8 output with a cast of the exact product, which
    fails a correct kernel wherever its float32 sum and the exact product straddle a rounding boundary.
    Here 256 + 16 + 2**-18 sums to 272 in float32 (2**-18 is below half its spacing there), an E4M3 tie
    that rounds to 256, while the exact product rounds to 288. The message names the check that holds:
    output="E4M3" (tests/test_gemm_fp8_output.py passes this very output that way)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = codec.encode(np.array([[256.0, 16.0, 2.0**-9]]), "E4M3")
    b = codec.encode(np.array([[1.0], [1.0], [2.0**-9]]), "E4M3")
    products = (codec.decode(a, "E4M3")[0] * codec.decode(b, "E4M3")[:, 0]).astype(np.float32)
    float32_result = np.float32(0)
    for product in products:  # (a float32 kernel's sum, in order)
        float32_result = np.float32(float32_result + product)
    assert float32_result == 272
    gemm.assert_matmul_close(np.array([[float32_result]]), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3")
    output = codec.encode(np.array([[float32_result]]), "E4M3")  # the kernel's E4M3 output: 256
    exact = gemm.reference_matmul(a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3").value
    assert not testing.compare(output, exact, "E4M3").ok  # (the old message's check: a false failure)
    assert testing.compare(output, np.array([[float32_result]]), "E4M3").ok  # (the float32 result's cast)
    with pytest.raises(TypeError, match=r"actual is a float8_e4m3fn array, codes, but output='float32' declares "
                                        r"values .*: for a kernel that writes its output as codes \(a fused "
                                        r"epilogue's cast\), pass output='E4M3', with output_scale="):
        gemm.compare_matmul(output.view(ml_dtypes.float8_e4m3fn), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3")


def test_a_float64_output_is_told_to_round_to_float32():
    """A review's find: a float64 kernel's output was refused with "pass output= the type the kernel
    wrote", though no output type fits it. The error now says so and what to do, and that works."""
    a = codec.encode(np.array([[1.0, 2.0**-9]]), "E4M3")
    b = codec.encode(np.array([[1.0], [1.5]]), "E4M3")
    scale = 1 + 2.0**-30
    output = (codec.decode(a, "E4M3").astype(np.float64) * scale) @ codec.decode(b, "E4M3")  # exact in float64
    assert output[0, 0] != np.float32(output[0, 0])
    with pytest.raises(ValueError, match=r"is not a float32 value: pass output= .*; no output type holds it \(a "
                                         r"float64 kernel's output\?\): round it with \.astype\(np\.float32\)"):
        gemm.compare_matmul(output, a, scale, b, 1.0, a_format="E4M3", b_format="E4M3")
    gemm.assert_matmul_close(output.astype(np.float32), a, scale, b, 1.0, a_format="E4M3", b_format="E4M3")
    bfloat16_miss = np.array([[1.0 + 2.0**-10]])  # (a float32 value, not a bfloat16 one: no float64 advice)
    with pytest.raises(ValueError, match=r"is not a bfloat16 value: pass output= [^;]*$"):
        gemm.compare_matmul(bfloat16_miss, a, scale, b, 1.0, a_format="E4M3", b_format="E4M3", output="bfloat16")


def test_a_python_int_scale_is_taken_wherever_float64_holds_it_exactly():
    """A review's find: every int above 2**53 was refused as "not exact in float64", 2**60 included."""
    codes = codec.encode(np.array([[1.0, 2.0]]), "E4M3")
    assert np.array_equal(gemm.dequantize(codes, 2**60, "E4M3"), gemm.dequantize(codes, 2.0**60, "E4M3"))
    for scale in (2**53 + 1, 2**1024, -(3**700)):
        with pytest.raises(ValueError, match="exact in float64, got the int"):
            gemm.dequantize(codes, scale, "E4M3")


def bfloat16_bits(values):
    """float32 ``values`` rounded to bfloat16 (to nearest even) on their bits, as a kernel's cast does."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_operand_rounding_for_the_hints_is_bfloat16s_and_tf32s():
    """gemm's bfloat16 rounding of operands equals a bit-level round to nearest even (and ml_dtypes',
    where installed) over float32's binades, its subnormals and its top, where it becomes Inf."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(50_000) * np.exp(rng.uniform(-100, 87, 50_000))).astype(np.float32)
    ties = (np.arange(1, 4000, dtype=np.uint32) << 15).view(np.float32)  # (exact ties among the subnormals)
    x = np.concatenate([x, ties, -ties, np.float32(2.0**-130) * np.arange(1, 2000, dtype=np.float32),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.3963897e38], np.float32)])
    with np.errstate(over="ignore"):
        expected = bfloat16_bits(x).astype(np.float64)
    got = gemm._to_significand_bits(x.astype(np.float64), 8)
    np.testing.assert_array_equal(got, expected)
    try:
        import ml_dtypes
    except ImportError:  # (the bit-level rounding above is the independent reference then)
        ml_dtypes = None
    if ml_dtypes is not None:
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float64))
    tf32 = gemm._to_significand_bits(np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 100_003.0, 3 * 2.0**-137]), 11)
    assert tf32.tolist() == [1.0, 1 + 2.0**-9, 100_032.0, 2.0**-135]  # (ties to even; spacing 64, and 2**-136
    #                                                                     among TF32's subnormals)


@pytest.mark.parametrize("rounding, named", [
    (bfloat16_bits, "bfloat16"),
    (lambda v: v.astype(np.float16).astype(np.float32), "float16 (or TF32"),
    (lambda v: gemm._to_significand_bits(v.astype(np.float64), 11).astype(np.float32), "float16 (or TF32"),
    (lambda v: gemm._to_significand_bits(v.astype(np.float64) * 2.0**20, 11).astype(np.float32) / 2**20,
     "TF32 (11 significant bits)")], ids=["bfloat16", "float16", "tf32", "tf32-small"])
def test_operands_rounded_before_the_product_are_named_as_such_not_as_a_narrower_accumulator(rounding, named):
    """A review's find: a kernel that dequantizes in float32, rounds the operands to bfloat16 (or float16,
    or takes TF32 inputs) and accumulates correctly in float32 was told "accumulation narrower than
    declared?". The product of the rounded operands is now recomputed and named; a float16 accumulator is
    still named as one. (tf32-small: values below float16's normals, where only TF32 keeps 11 bits.)"""
    rng = np.random.default_rng(1)
    a = codec.encode(rng.normal(0, 100, (16, 256)), "E4M3", saturate=True)
    b = codec.encode(rng.normal(0, 100, (256, 64)), "E4M3", saturate=True)
    small = named.startswith("TF32")
    a_scale, b_scale = np.float32(0.0123 * (2.0**-20 if small else 1)), np.float32(0.0456)
    a_values, b_values = codec.decode(a, "E4M3") * a_scale, codec.decode(b, "E4M3") * b_scale
    if small:  # (scale a's rounding into the small range, b's in the normal one)
        out = rounding(a_values) @ gemm._to_significand_bits(b_values.astype(np.float64), 11).astype(np.float32)
    else:
        out = rounding(a_values) @ rounding(b_values)
    report = gemm.compare_matmul(out, a, a_scale, b, b_scale, a_format="E4M3", b_format="E4M3")
    assert report.count > 100
    assert report.hints == [f"the output matches the product of the dequantized operands each rounded to {named}"
                            + report.hints[0].split(named, 1)[1]]
    accumulated = np.zeros((16, 64), np.float16)
    for k in range(256):
        accumulated += (a_values[:, k:k + 1] * b_values[k:k + 1, :]).astype(np.float16)
    hints = gemm.compare_matmul(accumulated.astype(np.float32), a, a_scale, b, b_scale, a_format="E4M3",
                                b_format="E4M3").hints
    assert len(hints) == 1 and "accumulation narrower than declared?" in hints[0]


def test_a_narrow_accumulator_promoted_every_128_products_is_named_as_hopper_s_model():
    """Same-sign products summed at 14 bits and added into float32 every 128 products (DeepSeek-V3's
    model of Hopper's FP8 tensor cores, section 3.3.2, which cuBLAS's FP8 GEMM passed on an H200),
    checked as float32: the hint names a narrower accumulator and says the errors fit
    ``accumulator=14, promote_every=128`` too. A kernel that truncates a 14-bit running sum of all
    1024 products (as Hopper's fast accumulation errs: 1.5% of the sum at K = 1024) also fits a
    narrower accumulator, and is told nothing of that model: its errors exceed it."""
    rng = np.random.default_rng(5)
    a = codec.encode(rng.uniform(16, 448, (16, 1024)), "E4M3")
    b = codec.encode(rng.uniform(16, 448, (1024, 32)), "E4M3")
    a_values, b_values = codec.decode(a, "E4M3"), codec.decode(b, "E4M3")

    def kernel(promote_every, to_14_bits):
        out = np.zeros((16, 32))
        for start in range(0, 1024, promote_every):
            partial = np.zeros_like(out)
            for k in range(start, start + promote_every):
                partial = to_14_bits(partial + a_values[:, k, None] * b_values[k])
            out += partial
        return out.astype(np.float32)

    def nearest(x):
        mantissa, exponent = np.frexp(x)
        return np.ldexp(np.round(np.ldexp(mantissa, 14)), exponent - 14)

    def toward_zero(x):
        mantissa, exponent = np.frexp(x)
        return np.ldexp(np.trunc(np.ldexp(mantissa, 14)), exponent - 14)

    operands = dict(a_codes=a, a_scales=1.0, b_codes=b, b_scales=1.0, a_format="E4M3", b_format="E4M3")
    promoted = gemm.compare_matmul(kernel(128, nearest), **operands)
    assert not promoted.ok and len(promoted.hints) == 1
    assert "narrower than declared?" in promoted.hints[0]
    assert promoted.hints[0].endswith("they also fit 14-bit sums promoted to float32 every 128 products "
                                      "(accumulator=14, promote_every=128), which cuBLAS's FP8 GEMM passed on an H200")
    assert gemm.compare_matmul(kernel(128, nearest), **operands, accumulator=14, promote_every=128).ok
    fast = gemm.compare_matmul(kernel(1024, toward_zero), **operands)
    assert len(fast.hints) == 1 and "narrower than declared?" in fast.hints[0]
    assert "promote_every" not in fast.hints[0]
    assert not gemm.compare_matmul(kernel(1024, toward_zero), **operands, accumulator=14, promote_every=128).ok


def test_an_output_rounded_in_one_direction_is_named_as_rounding_not_as_a_scale():
    """A review's find: a kernel that truncates its float32 sums to bfloat16 (drops the low 16 bits)
    was told "the reference times 0.9941...: a wrong scale, or an epilogue's alpha?", and declared
    float32, "accumulation narrower than declared?"; it accumulates in float32 and rounds toward zero."""
    rng = np.random.default_rng(2)
    a = codec.encode(rng.normal(0, 1, (16, 256)).astype(np.float32), "E4M3")
    b = codec.encode(rng.normal(0, 1, (256, 64)).astype(np.float32), "E4M3")
    operands = dict(a_codes=a, a_scales=0.5, b_codes=b, b_scales=0.25, a_format="E4M3", b_format="E4M3")
    exact = (codec.decode(a, "E4M3") @ codec.decode(b, "E4M3")) * np.float32(0.125)
    truncated = (exact.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    report = gemm.compare_matmul(truncated, **operands, output="bfloat16")
    assert report.count > 100 and report.hints == [
        "every mismatched output lies between the reference and zero, within one bfloat16 spacing: the output "
        "rounded toward zero (truncated) to bfloat16, not to nearest?"]
    assert gemm.compare_matmul(truncated, **operands).hints[0].endswith(
        "not to nearest? (every output is a bfloat16 value: pass output='bfloat16')")
    nearest = exact.astype(np.float16)   # float16 rounded away from zero where it was not exact
    away = np.where(nearest.astype(np.float32) == exact, nearest,
                    np.where(np.abs(nearest.astype(np.float32)) > np.abs(exact), nearest,
                             np.nextafter(nearest, np.copysign(np.float16(np.inf), nearest))))
    assert "rounded away from zero to float16" in gemm.compare_matmul(away, **operands, output="float16").hints[0]
    # a factor beyond the output's rounding is still a factor
    hint, = gemm.compare_matmul(exact * np.float32(1.02), **operands).hints
    assert hint.startswith("every mismatched output is the reference times 1.0200") and "a wrong scale" in hint


def test_a_minus_zero_operand_value_of_a_format_without_minus_zero_is_a_zero():
    """testing.compare refuses a -0.0 value of FNUZ (no code holds it); a GEMM operand negated in NumPy
    holds -0.0 for its zeros, which is just a zero (the shared check refused it for a while)."""
    b = -np.float32([[0.0], [1.0]])
    product = gemm.reference_matmul(np.float32([[1.0, 2.0]]), 1.0, b, 1.0, a_format="E4M3FNUZ", b_format="E4M3FNUZ")
    assert product.value.tolist() == [[-2.0]]


def test_dequantize_names_the_element_format_for_an_mx_one():
    """``gemm.dequantize(codes, scales, mx.MXFP8_E4M3)`` said only that a format must be a FloatFormat."""
    codes = np.ones((1, 32), np.uint8)
    with pytest.raises(TypeError, match="fmt: MXFP8_E4M3 is a block format; pass its element format, 'E4M3'"):
        gemm.dequantize(codes, 1.0, mx.MXFP8_E4M3)
    with pytest.raises(ValueError, match="fmt: MXFP6_E3M2 is a block format; pass its element format, 'E3M2'"):
        gemm.dequantize(codes, 1.0, "MXFP6_E3M2")
    np.testing.assert_array_equal(gemm.dequantize(codes, 1.0, mx.MXFP8_E4M3.elem), gemm.dequantize(codes, 1.0, "E4M3"))
    # NVFP4, which tutorial 8 lists among the layouts, got "unknown format 'NVFP4'" (a review's find)
    with pytest.raises(ValueError, match=r"a_format: NVFP4 is a block format; pass its element format, 'E2M1', "
                                         r"and its block scales as values \(NVFP4Array.scale_values\(\)"):
        gemm.compare_matmul(np.zeros((1, 1), np.float32), codes[:, :16], 1.0, codes[:, :16].T, 1.0,
                            a_format="nvfp4", b_format="E2M1")
