"""Contracts of minifp8.unit, minifp8.uu and minifp8.gemm that mutation testing found unchecked.

Mutation testing of minifp8/unit.py, uu.py and gemm.py (121 AST mutants run against the tests that import
them) left 27 survivors; 4 are equivalent and the tests here kill the other 23:

* unit.py (5): a comparison flip in `logarithmic_interpolation`'s "> 0" check (upper = 0); a constant change in
  ``MULT_RANGE`` (2**-30); a constant change in `linear`'s empty-batch guard (``max(batch, 1)``); a swapped
  keyword default (attention's ``causal=False``); a comparison flip in `cross_entropy`'s "V >= 2" check.
* gemm.py (18), mostly in `compare_matmul`'s tolerance: constant changes (bfloat16 and integer accumulators'
  emin, float32's promoted unit roundoff, the underflow threshold lambda, the overflow threshold, the 2**26
  hint limit, the 2**53 int-scale limit, the NaN element's stand-in in the underflow minima, the
  factor hint's zero test); operator swaps and dropped factors (the reference bound's ``/ (1 - gamma)``, the
  ceil of ``K / promote_every``, ``+ error_bound`` in the output rounding, lambda's ``bits - 1``, a
  ``lambda / min y`` condition, the accumulator hint's S/8 limit); comparison flips (the hint work limit,
  the accumulator hint's one-column rule); ``or -> and`` in the integer-scale dtype check.

Every expected value is worked out here, independently of minifp8's own output: the unit-scaling
rules of Blake et al. 2023 (arXiv:2303.11257) and u-muP (arXiv:2407.17465) as the minifp8.unit
docstrings state them, computed with plain NumPy, or the tolerance formula that the
minifp8.gemm.compare_matmul docstring gives, evaluated by hand.
"""
import math

import numpy as np
import pytest

import minifp8.unit as U
from minifp8 import gemm
from minifp8.autograd import Tensor, default_dtype


def normal(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(seed, *shape):
    return Tensor(normal(seed, *shape), requires_grad=True)


def softmax_rows(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ================================================================================================
# minifp8.unit
# ================================================================================================

@pytest.mark.parametrize("lower, upper", [(0.0, 2.0), (2.0, 0.0)])
def test_logarithmic_interpolation_rejects_a_zero_limit_with_its_own_message(lower, upper):
    """A zero limit has no logarithm: the documented "> 0 and finite" error, not math's domain error."""
    with pytest.raises(ValueError, match="logarithmic_interpolation: lower and upper must be > 0 and finite"):
        U.logarithmic_interpolation(0.5, lower, upper)


@pytest.mark.parametrize("op", [
    lambda x, mult: U.gelu(x, mult=mult),
    lambda x, mult: U.softmax(x, mult=mult),
    lambda x, mult: U.cross_entropy(x, np.zeros(2, np.int64), mult=mult),
])
def test_mult_range_is_exactly_two_to_the_plus_minus_30(op):
    """``MULT_RANGE`` is [2**-30, 2**30]: both ends are accepted, one power of two beyond either is not."""
    x = normal(0, 2, 3)
    assert U.MULT_RANGE == (2.0**-30, 2.0**30)
    for mult in (2.0**-30, 2.0**30):
        assert np.isfinite(op(x, mult).data).all()
    for mult in (2.0**-31, 2.0**31):
        with pytest.raises(ValueError, match=r"must be in \[2\*\*-30, 2\*\*30\]"):
            op(x, mult)


@pytest.mark.parametrize("linear", [U.linear, U.linear_readout])
def test_linear_with_an_empty_batch_has_zero_gradients(linear):
    """No rows: the output is (0, fan_out) and the weight gradient is zero (any finite scale will do)."""
    x, weight, bias = leaf(0, 0, 3), leaf(1, 4, 3), leaf(2, 4)
    out = linear(x, weight, bias)
    assert out.shape == (0, 4)
    out.backward(np.ones((0, 4)))
    np.testing.assert_array_equal(weight.grad, np.zeros((4, 3)))
    np.testing.assert_array_equal(bias.grad, np.zeros(4))
    assert x.grad.shape == (0, 3)


def test_attention_is_not_causal_by_default():
    """Omitting ``causal`` gives full (bidirectional) attention: checked against NumPy with the u-muP scale."""
    seq, d_head, mult = 5, 4, 1.0
    q, k, v = (normal(seed, 2, seq, d_head) for seed in (0, 1, 2))
    weights = softmax_rows(q @ np.swapaxes(k, -1, -2) * mult / d_head)  # every key, no mask
    alpha = 1.0 / (1.0 + 4.0 * d_head / mult**2)
    flat = math.sqrt(1.0 / seq)  # the non-causal flat limit
    scale = 1.0 / (flat ** (1.0 - alpha) * 1.0**alpha)
    expected = scale * (weights @ v)
    with default_dtype(np.float64):
        out = U.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out.data, expected, rtol=1e-10, atol=1e-12)


def test_cross_entropy_with_two_classes():
    """V = 2 is allowed: loss is the mean NLL and the logit gradient is ``(softmax - onehot) * V / sqrt(V - 1)``."""
    logits_data = normal(0, 6, 2)
    targets = np.array([0, 1, 1, 0, 1, 0])
    p = softmax_rows(logits_data)
    onehot = np.eye(2)[targets]
    with default_dtype(np.float64):
        logits = Tensor(logits_data, requires_grad=True)
        loss = U.cross_entropy(logits, targets)
        assert float(loss.data) == pytest.approx(float(-np.mean(np.log(p[np.arange(6), targets]))), rel=1e-12)
        loss.backward()
    np.testing.assert_allclose(logits.grad, (p - onehot) * 2 / math.sqrt(1), rtol=1e-10, atol=1e-12)


# ================================================================================================
# minifp8.gemm: the tolerance of compare_matmul, evaluated from its docstring by hand
# ================================================================================================
# E4M3 codes (OCP OFP8: sign, 4 exponent bits with bias 7, 3 mantissa bits)
E4M3_ZERO, E4M3_HALF, E4M3_ONE, E4M3_ONE_AND_HALF, E4M3_TWO, E4M3_THREE, E4M3_FOUR, E4M3_NAN = (
    0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x7F)
IEEE = {"float32": (24, -126), "bfloat16": (8, -126), "float16": (11, -14)}  # significand bits, emin
FLOAT64_U = 2.0**-53


def gamma(n, u):
    """Higham's gamma_n = n u / (1 - n u); Inf where n u >= 1."""
    return n * u / (1 - n * u) if n * u < 1 else math.inf


def documented_tolerance(value, magnitude, inner, *, accumulator_bits, accumulator_emin=-126, promote_every=None,
                         output="float32", carried=0.0):
    """`compare_matmul`'s documented tolerance for one output with reference ``value`` and S = ``magnitude``.

    ``acc * S + (4K + 4) s_acc + (1 + acc) C + u_out (|reference| + error bound + accumulation) + s_out / 2
    + error bound``, with the reference's error bound ``gamma_K(2**-53) S / (1 - gamma_K(2**-53))``.
    """
    g = gamma(inner, FLOAT64_U)
    error_bound = g * magnitude / (1 - g)
    if promote_every is None or promote_every >= inner:
        relative = gamma(inner + 3, 2.0**-accumulator_bits)
    else:
        grouped = gamma(promote_every, 2.0**-accumulator_bits)
        promoted = gamma(math.ceil(inner / promote_every) + 3, 2.0**-24)
        relative = grouped + promoted + grouped * promoted
    spacing = 2.0 ** (accumulator_emin + 1 - accumulator_bits)
    accumulated = (relative * magnitude / (1 - g) if magnitude > 0 else 0.0) + (4 * inner + 4) * spacing
    if carried:  # (C = 0: no term, even where acc is Inf)
        accumulated += (1 + relative) * carried
    bits, emin = IEEE[output]
    before_output = abs(value) + error_bound + accumulated
    return 2.0**-bits * before_output + 2.0 ** (emin - bits) + accumulated + error_bound


TOLERANCE_CASES = {
    # name: (A codes 1 x K, B codes K x 1, exact value, S, compare_matmul options, accumulator bits, promote_every)
    "float32": ([E4M3_ONE, E4M3_TWO], [E4M3_THREE, E4M3_HALF], 4.0, 4.0, {}, 24, None),
    "zero product, bfloat16 output": ([E4M3_ZERO] * 3, [E4M3_ONE] * 3, 0.0, 0.0, {"output": "bfloat16"}, 24, None),
    "zero product, float16 output, 24-bit int accumulator": (
        [E4M3_ZERO] * 2, [E4M3_TWO] * 2, 0.0, 0.0, {"accumulator": 24, "output": "float16"}, 24, None),
    "14 bits promoted every 4": ([E4M3_ONE] * 10, [E4M3_ONE] * 10, 10.0, 10.0,
                                 {"accumulator": 14, "promote_every": 4}, 14, 4),
    "bfloat16 accumulator": ([E4M3_ONE, E4M3_TWO, E4M3_HALF], [E4M3_FOUR, E4M3_ONE, E4M3_ONE], 6.5, 6.5,
                             {"accumulator": "bfloat16"}, 8, None),
}


def test_an_accumulator_without_a_relative_bound_is_refused_even_for_a_zero_product():
    """A 2-bit accumulator over 2 products has gamma_5(2**-2) = Inf: no bound. Its zero product once
    got tolerance 0 (not Inf * 0 = NaN); any declaration whose bound reaches S is now refused, as it
    would pass any output (`compare_matmul`)."""
    with pytest.raises(ValueError, match=r"accumulator of 2 bits summing K = 2 products has no useful error bound"):
        gemm.compare_matmul(np.zeros((1, 1), np.float32), np.array([[E4M3_ZERO] * 2], np.uint8), 1.0,
                            np.array([[E4M3_ONE] * 2], np.uint8).T, 1.0, a_format="E4M3", b_format="E4M3",
                            accumulator=2)


@pytest.mark.parametrize("case", list(TOLERANCE_CASES))
def test_tolerance_is_the_documented_formula(case):
    """report.tolerance and reference.error_bound are the docstring's formulas, term by term."""
    a, b, value, magnitude, options, bits, promote_every = TOLERANCE_CASES[case]
    inner = len(a)
    a_codes, b_codes = np.array([a], np.uint8), np.array([b], np.uint8).T
    report = gemm.compare_matmul(np.array([[value]], np.float32), a_codes, 1.0, b_codes, 1.0,
                                 a_format="E4M3", b_format="E4M3", **options)
    expected = documented_tolerance(value, magnitude, inner, accumulator_bits=bits, promote_every=promote_every,
                                    output=options.get("output", "float32"))
    assert report.ok
    assert report.reference.value[0, 0] == value and report.reference.magnitude[0, 0] == magnitude
    g = gamma(inner, FLOAT64_U)
    assert report.reference.error_bound[0, 0] == pytest.approx(g * magnitude / (1 - g), rel=1e-12, abs=0)
    assert math.isfinite(expected)
    assert report.tolerance[0, 0] == pytest.approx(expected, rel=1e-12, abs=0)


def test_reference_error_bound_divides_by_one_minus_gamma_at_large_k():
    """At K = 2**20 the bound's ``1 / (1 - gamma_K)`` factor (1 + 2**-33) is visible: bound = gamma S / (1 - gamma)."""
    inner = 2**20
    report = gemm.reference_matmul(np.full((1, inner), E4M3_ONE, np.uint8), 1.0,
                                   np.full((inner, 1), E4M3_ONE, np.uint8), 1.0, a_format="E4M3", b_format="E4M3")
    g = inner * FLOAT64_U / (1 - inner * FLOAT64_U)
    assert report.value[0, 0] == inner and report.magnitude[0, 0] == inner
    assert report.error_bound[0, 0] == pytest.approx(g * inner / (1 - g), rel=1e-14, abs=0)
    assert report.error_bound[0, 0] != pytest.approx(g * inner, rel=1e-12, abs=0)


def test_tolerance_carries_intermediate_underflow_as_documented():
    """Tiny block scales: the carried term C is the docstring's sum, worked out by hand for three K terms.

    A = [1, 1, 0] with block scales alpha = [2**-130, 2**-125, 1]; B = [4, 4, 4] with beta = 1. In float32,
    lambda = 2**-126 and s = 2**-149. ``C = s/2 sum_k (|b| [|a| < lambda] + |a| [|b| < lambda]
    + |x y| [alpha beta < lambda] + beta [|a| y < lambda] + alpha [x |b| < lambda] + y [|a| beta < lambda]
    + x [alpha |b| < lambda])``, with ``alpha beta < lambda`` widened to ``alpha < lambda / min beta`` and
    ``beta < lambda / min alpha``, ``|a| y`` to ``|a| < lambda / min y``, ``x |b|`` to ``|b| < lambda / min x``,
    ``|a| beta`` to ``|a| < lambda / min beta`` and ``alpha |b|`` to ``|b| < lambda / min alpha`` (minima over
    non-zero terms; min alpha = 2**-130):

    * k = 0 (|a| = 2**-130): |b| = 4, plus |x y| = 4, plus beta = 1 (|a| < lambda / 4), plus y = 4
      (|a| < lambda), plus x = 1 (|b| = 4 < lambda / 2**-130 = 16): 14;
    * k = 1 (|a| = 2**-125, not below lambda, nor lambda / 4; alpha not below lambda): x = 1 (|b| < 16): 1;
    * k = 2 (x = 0): 0.

    So C = 15 * 2**-150.
    """
    a_codes = np.array([[E4M3_ONE, E4M3_ONE, E4M3_ZERO]], np.uint8)
    a_scales = np.array([[2.0**-130, 2.0**-125, 1.0]])
    b_codes = np.full((3, 1), E4M3_FOUR, np.uint8)
    value = 4 * 2.0**-130 + 4 * 2.0**-125
    report = gemm.compare_matmul(np.array([[value]], np.float32), a_codes, a_scales, b_codes, 1.0,
                                 a_format="E4M3", b_format="E4M3")
    expected = documented_tolerance(value, value, 3, accumulator_bits=24, carried=15 * 2.0**-150)
    assert report.ok
    assert report.tolerance[0, 0] == pytest.approx(expected, rel=1e-12, abs=0)


def test_tolerance_counts_the_reference_error_bound_inside_the_output_rounding():
    """K = 2**16 ones, bfloat16 output: ``u_out (|reference| + error bound + ...)`` adds the bound, visibly (2**-36)."""
    inner = 2**16
    a_codes, b_codes = np.full((1, inner), E4M3_ONE, np.uint8), np.full((inner, 1), E4M3_ONE, np.uint8)
    report = gemm.compare_matmul(np.array([[float(inner)]], np.float32), a_codes, 1.0, b_codes, 1.0,
                                 a_format="E4M3", b_format="E4M3", output="bfloat16")
    expected = documented_tolerance(float(inner), float(inner), inner, accumulator_bits=24, output="bfloat16")
    assert report.ok
    assert report.tolerance[0, 0] == pytest.approx(expected, rel=1e-13, abs=0)


def test_nan_elements_do_not_widen_the_underflow_conditions():
    """A NaN element counts as no element in C's minima (min x over the finite non-zero elements).

    A = [[NaN, 4], [4, 4]] and B = [1, 1] * 2**-127 (lambda = 2**-126, s = 2**-149). For row 1, each k has
    |a| = 4, |b| = 2**-127, x = 4, y = 1, alpha = 1, beta = 2**-127 (min x = 4, min beta = 2**-127):
    |a| [|b| < lambda] = 4, plus |x y| [alpha < lambda / min beta = 2] [beta < lambda / min alpha] = 4,
    alpha [|b| < lambda / min x = 2**-128] = 0, y [|a| < lambda / min beta = 2] = 0 and
    x [|b| < lambda / min alpha] = 4: 12 per k, so C = 24 * 2**-150 (a NaN counted as x = 1 would add
    alpha = 1 per k). Row 0 is NaN, with zero tolerance.
    """
    a_codes = np.array([[E4M3_NAN, E4M3_FOUR], [E4M3_FOUR, E4M3_FOUR]], np.uint8)
    b_codes = np.full((2, 1), E4M3_ONE, np.uint8)
    value = 2.0**-124  # 4 * 2**-127 + 4 * 2**-127
    report = gemm.compare_matmul(np.array([[np.nan], [value]], np.float32), a_codes, 1.0, b_codes, 2.0**-127,
                                 a_format="E4M3", b_format="E4M3")
    expected = documented_tolerance(value, value, 2, accumulator_bits=24, carried=24 * 2.0**-150)
    assert report.ok
    assert report.tolerance[1, 0] == pytest.approx(expected, rel=1e-12, abs=0)


def test_outputs_that_must_be_nan_have_zero_tolerance():
    """Where the reference is NaN (a NaN code) the tolerance is 0: only NaN agrees."""
    a_codes = np.array([[E4M3_NAN, E4M3_ONE], [E4M3_ONE, E4M3_ONE]], np.uint8)
    b_codes = np.full((2, 1), E4M3_ONE, np.uint8)
    report = gemm.compare_matmul(np.array([[np.nan], [2.0]], np.float32), a_codes, 1.0, b_codes, 1.0,
                                 a_format="E4M3", b_format="E4M3")
    assert report.ok
    assert report.tolerance[0, 0] == 0.0 and report.tolerance[1, 0] > 0.0


def test_overflow_threshold_is_max_plus_half_a_spacing():
    """float32 overflows at (2 - 2**-24) 2**127: a reference of 1.5 * 2**128 must be Inf, and Inf is accepted."""
    a_codes, b_codes = np.array([[E4M3_ONE_AND_HALF]], np.uint8), np.array([[E4M3_ONE]], np.uint8)
    kwargs = dict(a_format="E4M3", b_format="E4M3")
    assert gemm.compare_matmul(np.array([[np.inf]], np.float32), a_codes, 2.0**128, b_codes, 1.0, **kwargs).ok
    finite = gemm.compare_matmul(np.array([[np.finfo(np.float32).max]], np.float32), a_codes, 2.0**128,
                                 b_codes, 1.0, **kwargs)
    assert not finite.ok and finite.by_class["overflow"] == 1
    # 1.75 * 2**127 is a float32 value, below the threshold: Inf is wrong there
    a_codes = np.array([[0x3E]], np.uint8)  # 1.75
    below = gemm.compare_matmul(np.array([[np.inf]], np.float32), a_codes, 2.0**127, b_codes, 1.0, **kwargs)
    assert not below.ok


@pytest.mark.parametrize("rows, hinted", [(256, True), (512, False)])
def test_hints_are_computed_up_to_two_to_the_26_multiply_adds(rows, hinted):
    """Hints are computed when M K N <= 2**26 (here 256 x 1024 x 256 = 2**26) and not above (2**27)."""
    inner, columns = 1024, 256
    a_codes = np.full((rows, inner), E4M3_ONE, np.uint8)
    b_codes = np.full((inner, columns), E4M3_ONE, np.uint8)
    actual = np.full((rows, columns), 2.0 * inner, np.float32)  # every output twice the product
    report = gemm.compare_matmul(actual, a_codes, 1.0, b_codes, 1.0, a_format="E4M3", b_format="E4M3", max_rows=1)
    skipped = [hint for hint in report.hints if hint.startswith("none computed")]
    assert report.count == rows * columns
    assert (not skipped) if hinted else (len(skipped) == 1 and "above 2**26" in skipped[0])


def test_the_dropped_block_hints_judge_many_blocks_at_once(monkeypatch):
    """A thin, deep GEMM (1 x 2**16 x 1) with one wrong output: the dropped-K-block search judged its
    4,096 + 2,048 + ... candidates one by one (a failing 1 x 2**20 x 1 took 45 s to report, against
    0.4 s to pass); now in a few calls, and a dropped block is still named."""
    rng = np.random.default_rng(0)
    inner = 2**16
    a_codes = rng.integers(0, 0x7E, (1, inner)).astype(np.uint8)
    b_codes = rng.integers(0, 0x7E, (inner, 1)).astype(np.uint8)
    kwargs = dict(a_format="E4M3", b_format="E4M3")
    wrong = 2 * gemm.reference_matmul(a_codes, 1.0, b_codes, 1.0, **kwargs).value.astype(np.float32)
    calls = []
    judge = gemm._judge
    monkeypatch.setattr(gemm, "_judge", lambda *args: calls.append(1) or judge(*args))
    report = gemm.compare_matmul(wrong, a_codes, 1.0, b_codes, 1.0, **kwargs)
    assert report.count == 1 and len(calls) < 100
    small = 512  # a dropped block of 32 is found where K is small enough for it to show
    dropped = gemm.reference_matmul(a_codes[:, 32:small], 1.0, b_codes[32:small], 1.0, **kwargs).value
    hints = gemm.compare_matmul(dropped.astype(np.float32), a_codes[:, :small], 1.0, b_codes[:small], 1.0,
                                **kwargs).hints
    assert hints == ["the output matches the product without K block 0 of 32 (k = 0 to 31): a dropped K block?"]


def test_an_int_scale_beyond_two_to_the_53_is_refused():
    """A Python int scale must be exact in float64: 2**53 + 1 is not (it would round to 2**53)."""
    codes = np.array([[E4M3_ONE]], np.uint8)
    assert gemm.dequantize(codes, 2**53, "E4M3")[0, 0] == 2.0**53
    with pytest.raises(ValueError, match="exact in float64"):
        gemm.dequantize(codes, 2**53 + 1, "E4M3")


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint16, np.uint32])
def test_numpy_integer_scale_arrays_are_refused_whatever_their_width(dtype):
    """Integer scale arrays are scale codes, not values: TypeError for every width, not only for 8-bit ones."""
    codes = np.array([[E4M3_ONE, E4M3_TWO]], np.uint8)
    with pytest.raises(TypeError, match="decode scale codes first"):
        gemm.dequantize(codes, np.array([[2]], dtype), "E4M3")


# ---- hints --------------------------------------------------------------------------------------
POSITIVE_E4M3 = np.array([E4M3_HALF, E4M3_ONE, E4M3_TWO, E4M3_THREE], np.uint8)  # 0.5, 1, 2, 3


def positive_problem(seed, rows, inner, columns):
    """Codes of positive E4M3 values and their exact product (so S = the product: no cancellation)."""
    rng = np.random.default_rng(seed)
    a_codes = rng.choice(POSITIVE_E4M3, size=(rows, inner))
    b_codes = rng.choice(POSITIVE_E4M3, size=(inner, columns))
    values = {E4M3_HALF: 0.5, E4M3_ONE: 1.0, E4M3_TWO: 2.0, E4M3_THREE: 3.0}
    decode = np.vectorize(values.get)
    return a_codes, b_codes, decode(a_codes).astype(np.float64) @ decode(b_codes).astype(np.float64)


def accumulator_hints(report):
    return [hint for hint in report.hints if "accumulator of" in hint]


def test_no_accumulator_hint_for_errors_confined_to_one_column():
    """Errors in one column only (a 4 x 2 output) are not blamed on a narrower accumulator, however well they fit."""
    a_codes, b_codes, product = positive_problem(1, 4, 64, 2)
    actual = product.copy()
    actual[:, 0] *= 1 + np.array([2.0**-12, -2.0**-12, 2.0**-13, -2.0**-13])  # within a 16-bit accumulator's bound
    report = gemm.compare_matmul(actual.astype(np.float32), a_codes, 1.0, b_codes, 1.0, a_format="E4M3",
                                 b_format="E4M3")
    assert report.count == 4 and report.by_class["other"] == 4
    assert accumulator_hints(report) == []
    # the same errors spread over both columns are named
    actual = product.copy()
    actual[:2, :] *= 1 + np.array([[2.0**-12, -2.0**-12], [-2.0**-13, 2.0**-13]])
    spread = gemm.compare_matmul(actual.astype(np.float32), a_codes, 1.0, b_codes, 1.0, a_format="E4M3",
                                 b_format="E4M3")
    assert spread.count == 4 and len(accumulator_hints(spread)) == 1


def test_no_accumulator_hint_whose_bound_exceeds_an_eighth_of_s():
    """K = 61: gamma_64(2**-9) = 1/7 > 1/8, so errors of S/10 name no accumulator (10 bits allow only S/15)."""
    a_codes, b_codes, product = positive_problem(2, 2, 61, 2)
    actual = product * (1 + np.array([[0.1, -0.1], [-0.1, 0.1]]))
    report = gemm.compare_matmul(actual.astype(np.float32), a_codes, 1.0, b_codes, 1.0, a_format="E4M3",
                                 b_format="E4M3")
    assert report.count == 4 and report.by_class["other"] == 4
    assert accumulator_hints(report) == []


def test_factor_hint_when_a_mismatched_reference_is_one():
    """The one-factor hint is named when a mismatched output's reference is exactly 1 (only zeros are excluded)."""
    a_codes = np.array([[E4M3_ONE, E4M3_ZERO], [E4M3_ONE, E4M3_ONE]], np.uint8)
    b_codes = np.array([[E4M3_ONE, E4M3_TWO], [E4M3_ONE, E4M3_THREE]], np.uint8)
    product = np.array([[1.0, 2.0], [2.0, 5.0]])  # [[1, 0], [1, 1]] @ [[1, 2], [1, 3]]
    report = gemm.compare_matmul((4 * product).astype(np.float32), a_codes, 1.0, b_codes, 1.0, a_format="E4M3",
                                 b_format="E4M3")
    assert report.count == 4
    assert report.hints == ["every mismatched output is the reference times 2**2: a scale exponent off by 2 (an E8M0 "
                            "bias?), or a scale applied twice or omitted?"]
