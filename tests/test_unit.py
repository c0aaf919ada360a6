"""minifp8.unit (U): statistics at initialisation, gradients against their definition, errors.

1. Statistics: unit-normal inputs and output gradients from a seeded Generator, shapes [4096, 512]
   unless noted; output std and input-grad std within +-5% of the values measured with the
   unit-scaling library 0.3, plus values derived here from the papers' rules: Gaussian integrals,
   sums of n unit terms, and the two limits of each u-muP interpolated model.
2. Definitions: every U op in float64 has
   value == out_scale * f(inputs)  and  grad_i == b_i * (float64 central differences of f),
   where f is the *unscaled* op from minifp8.functional and the scales are written out here from
   the minifp8.unit docstrings / unit_scaling.functional. Where the forward and backward scales agree
   the U op is a true gradient, so testing.gradcheck applies to it directly as well.
3. Bad input: unknown constraint, tau <= 0, mismatched attention shapes, and friends.
"""
import math

import numpy as np
import pytest

import minifp8.functional as F
import minifp8.unit as U
from minifp8.autograd import Tensor, default_dtype, no_grad
from minifp8.testing import gradcheck

CONSTRAINTS = [None, "to_output_scale", "gmean"]


def normal(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def leaf(seed, *shape):
    return Tensor(normal(seed, *shape), requires_grad=True)


def gmean(*scales):
    return math.prod(scales) ** (1.0 / len(scales))


def interp(alpha, lower, upper):
    """Logarithmic interpolation: lower at alpha 0, upper at alpha 1, constant ratio in between."""
    return lower ** (1.0 - alpha) * upper ** alpha


def tie(constraint, output_scale, *grad_scales):
    """The scales after a constraint: (output_scale, *grad_scales)."""
    if constraint is None:
        return (output_scale, *grad_scales)
    if constraint == "to_output_scale":
        return (output_scale,) * (1 + len(grad_scales))
    return (gmean(output_scale, *grad_scales),) * (1 + len(grad_scales))


def close(measured, target, rel=0.05):
    assert abs(measured / target - 1.0) <= rel, f"measured {measured:.4f}, target {target:.4f} +-{rel:.0%}"


# ================================================================================================
# 1. Statistics at initialisation (one forward + backward each)
# ================================================================================================

@pytest.mark.parametrize("constraint, grad_x_std", [("to_output_scale", 2.00), (None, 1.00)])
def test_linear_statistics(constraint, grad_x_std):
    x, weight = leaf(0, 4096, 512), leaf(1, 2048, 512)
    y = U.linear(x, weight, constraint=constraint)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00)
    close(x.grad.std(), grad_x_std)  # to_output_scale: sqrt(fan_out / fan_in) = 2
    close(weight.grad.std(), 1.00)


def test_matmul_statistics():
    left, right = leaf(0, 4096, 512), leaf(1, 512, 2048)
    y = U.matmul(left, right)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00)
    close(left.grad.std(), 2.00)   # sqrt(2048 / 512)
    close(right.grad.std(), 2.83)  # sqrt(4096 / 512)


def test_softmax_statistics():
    x = leaf(0, 4096, 512)
    y = U.softmax(x, axis=-1)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 0.70)
    close(x.grad.std(), 0.87)
    # Independent model: softmax(x)_i ~ e^x_i / (d e^(1/2)) for large d, so std(p) = sqrt(e - 1) / d
    # and rms(p * g) = sqrt(e) / d; the unit scale at mult = 1 is d^(0.8 + 0.1) = d^0.9.
    d = 512
    close(y.data.std(), math.sqrt(math.e - 1) / d * d ** 0.9)
    close(x.grad.std(), math.sqrt(math.e) / d * d ** 0.9)


def test_embedding_statistics():
    weight = leaf(0, 1000, 512)
    ids = np.random.default_rng(3).integers(0, 1000, size=4096)
    y = U.embedding(ids, weight)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00)
    close(weight.grad.std(), 1.00)


def test_cross_entropy_statistics():
    logits = leaf(0, 4096, 1000)
    targets = np.random.default_rng(3).integers(0, 1000, size=4096)
    loss = U.cross_entropy(logits, targets)
    loss.backward()
    close(logits.grad.std(), 1.00)


@pytest.mark.parametrize("tau", [0.2, 1.0, 3.0])
def test_residual_apply_statistics(tau):
    """residual_apply(fn, x, tau) = residual_add(fn(r), s, tau) with (r, s) = residual_split(x, tau)."""
    x, weight = leaf(0, 4096, 512), leaf(1, 512, 512)
    residual, skip = U.residual_split(x, tau)
    y = U.residual_add(U.linear(residual, weight), skip, tau)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00)
    close(x.grad.std(), 1.00)


def test_attention_statistics():
    """Causal, s = 256, d_head = 64; 16 x 8 heads make 2^21 elements, as [4096, 512]."""
    q, k, v = (leaf(seed, 16, 8, 256, 64) for seed in range(3))
    y = U.scaled_dot_product_attention(q, k, v, causal=True)
    y.backward(normal(5, *y.shape))
    close(y.data.std(), 1.05)
    close(v.grad.std(), 1.05)


def gaussian_expectation(fn, points=200):
    """E[fn(x)] for x ~ N(0, 1) by Gauss-Hermite quadrature (probabilists' weights)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    return float(np.dot(weights, fn(nodes)) / math.sqrt(2.0 * math.pi))


def test_gelu_statistics_against_gaussian_integrals():
    c = math.sqrt(2.0 / math.pi)

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))

    def gelu_derivative(x, h=1e-5):
        return (gelu(x + h) - gelu(x - h)) / (2 * h)

    mean = gaussian_expectation(gelu)
    std = math.sqrt(gaussian_expectation(lambda x: gelu(x) ** 2) - mean ** 2)
    grad_rms = math.sqrt(gaussian_expectation(lambda x: gelu_derivative(x) ** 2))
    scale = interp(0.8, 2.0, math.sqrt(2.0 / (1.0 - 1.0 / math.pi)))  # alpha = 1 / (1 + 0.25) at mult 1
    x = leaf(0, 4096, 512)
    y = U.gelu(x)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), scale * std, rel=0.01)
    close(x.grad.std(), scale * grad_rms, rel=0.01)
    close(y.data.std(), 1.00)  # to_output_scale makes the output unit-scaled


def test_dropout_and_layer_norm_statistics():
    x = leaf(0, 4096, 512)
    y = U.dropout(x, 0.3, np.random.default_rng(4))
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00, rel=0.01)
    close(x.grad.std(), 1.00, rel=0.01)
    x, weight, bias = leaf(0, 4096, 512), leaf(1, 512), leaf(2, 512)
    y = U.layer_norm(x, weight, bias)
    y.backward(normal(3, *y.shape))
    close(x.grad.std(), 1.00)
    close(weight.grad.std(), 1.00)
    close(bias.grad.std(), 1.00)


def test_linear_readout_statistics():
    """u-muP's readout: output std fan_in^-1/2 (muP's 1/fan_in on a sum of fan_in unit terms), not 1;
    grad x sums fan_out terms times fan_out^-1/2 and grad W sums batch terms times batch^-1/2: both 1."""
    x, weight = leaf(0, 2048, 256), leaf(1, 512, 256)
    y = U.linear_readout(x, weight)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), math.sqrt(256) / 256)
    close(x.grad.std(), 1.00)
    close(weight.grad.std(), 1.00)


def test_matmul_statistics_with_the_paper_scales():
    """Blake et al. 2023's matmul rule, unconstrained: (m, k) @ (k, n) scaled by k^-1/2 forward, n^-1/2
    (grad left, sums n terms) and m^-1/2 (grad right, sums m terms) backward: all three unit."""
    left, right = leaf(0, 1024, 256), leaf(1, 256, 512)
    y = U.matmul(left, right, constraint=None)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00)
    close(left.grad.std(), 1.00)
    close(right.grad.std(), 1.00)


def rms(a):
    return float(np.sqrt(np.mean(np.square(a, dtype=np.float64))))


# The limits of u-muP's interpolated models, derived here from unit-normal inputs and output gradients.
# mult = 2^-10 and 2^10 put alpha within 1e-3 of 0 and 1, so each scale is its limit to 0.1%.
SMALL_MULT, LARGE_MULT = 2.0 ** -10, 2.0 ** 10


@pytest.mark.parametrize("mult", [SMALL_MULT, LARGE_MULT])
def test_gelu_limits_of_the_model(mult):
    """Small mult: gelu(mult x)/mult ~ x/2, slope 1/2, so std 1/2 both ways and the scales 2 make them 1.
    Large mult: relu(x), std sqrt((1 - 1/pi)/2), slope a step with RMS sqrt(1/2); the scales
    sqrt(2/(1 - 1/pi)) and sqrt(2) make them 1."""
    x = leaf(0, 4096, 512)
    y = U.gelu(x, mult=mult, constraint=None)
    y.backward(normal(2, *y.shape))
    close(y.data.std(), 1.00, rel=0.01)
    close(x.grad.std(), 1.00, rel=0.01)


def test_softmax_limits_of_the_model():
    """The model is of the RMS. Flat logits (small mult): every output is 1/d (RMS 1/d, std 0) and the
    gradient is mult/d (g - mean g) (RMS ~ mult/d): the scales d and d/mult make both RMS 1.
    One-hot (large mult): RMS 1/sqrt(d), the scale sqrt(d) makes it 1."""
    d = 512
    x = leaf(0, 4096, d)
    y = U.softmax(x, mult=SMALL_MULT, constraint=None)
    y.backward(normal(2, *y.shape))
    close(rms(y.data), 1.00, rel=0.01)
    assert y.data.std() < 0.01  # flat: the std is not what the model describes
    close(rms(x.grad), math.sqrt(1 - 1 / d), rel=0.01)
    y = U.softmax(x, mult=LARGE_MULT, constraint=None)
    close(rms(y.data), 1.00, rel=0.01)


def harmonic(n):
    return float(np.sum(1.0 / np.arange(1, n + 1)))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_limits_of_the_model(causal):
    """s = 256 keys, d_head = 64. Flat attention (small mult): row i averages i (causal) or s values,
    so the output and the v gradient have variance H_s / s (causal) or 1 / s; the scale
    sqrt(s / ln s) (causal) or sqrt(s) makes them sqrt(H_s / ln s) (1.05) or 1. One-hot attention
    (large mult): each output is one v row and each v row's gradient sums one g row on average: std 1."""
    s = 256
    q, k, v = (leaf(seed, 16, 8, s, 64) for seed in range(3))
    flat = math.sqrt(harmonic(s) / math.log(s)) if causal else 1.0
    for mult, expected in ((SMALL_MULT, flat), (LARGE_MULT, 1.0)):
        for t in (q, k, v):
            t.grad = None
        y = U.scaled_dot_product_attention(q, k, v, causal=causal, mult=mult)
        y.backward(normal(5, *y.shape))
        close(y.data.std(), expected, rel=0.03)
        close(v.grad.std(), expected, rel=0.03)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_query_and_key_gradients_at_mult_1(causal):
    """At mult 1 the attention is near flat. Then d<g_i, out_i>/d logit_ij = w_ij g_i.(v_j - mean v)
    has variance d_head (1 - 1/i) / i^2 over the i keys of row i (i = s without the mask), and
    grad q_i = (mult / d_head) sum_j of it times k_j: variance (1 - 1/i) / (i d_head) per element,
    the same on average for k. Times the rule's scale: about 0.12, far below 1 (the docstring's note)."""
    s, d_head = 256, 64
    q, k, v = (leaf(seed, 16, 8, s, d_head) for seed in range(3))
    y = U.scaled_dot_product_attention(q, k, v, causal=causal)
    y.backward(normal(5, *y.shape))
    rows = np.arange(1, s + 1) if causal else np.full(s, s)
    flat_variance = float(np.mean((1 - 1 / rows) / (rows * d_head)))
    expected = attention_scale(s, d_head, causal, 1.0) * math.sqrt(flat_variance)
    assert 0.1 < expected < 0.13
    close(q.grad.std(), expected)
    close(k.grad.std(), expected)


@pytest.mark.parametrize("queries", [16, 1])
def test_causal_attention_with_fewer_queries_than_keys_is_not_unit_scaled(queries):
    """The documented limit: the causal rule takes s = the key length (256) and assumes as many
    queries. The mask is top-left aligned, so query row i averages i + 1 values: variance H_q / q
    averaged over the rows in the flat limit, which the rule's scale for s keys (6.74, about
    sqrt(s / ln s)) makes a std of 3.10 (q = 16) or 6.74 (q = 1), as in the library. Without the
    mask every row averages all 256 keys: std 1 for any q."""
    s, d_head = 256, 64
    q, k, v = normal(0, 16, 8, queries, d_head), normal(1, 16, 8, s, d_head), normal(2, 16, 8, s, d_head)
    expected = attention_scale(s, d_head, True, 1.0) * math.sqrt(harmonic(queries) / queries)
    assert expected == pytest.approx({16: 3.10, 1: 6.74}[queries], abs=0.005)
    close(U.scaled_dot_product_attention(q, k, v, causal=True).data.std(), expected)
    close(U.scaled_dot_product_attention(q, k, v, causal=False).data.std(), 1.0)


# ================================================================================================
# 2. Gradients against the definition: b_i times the unscaled op's gradient
# ================================================================================================

def outputs_of(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def central_differences(f, arrays, index, weights, eps=1e-6):
    """d/d arrays[index] of sum_k <weights_k, f(*arrays)_k>, float64 central differences of f."""
    arrays = [np.array(a, copy=True) for a in arrays]
    flat = arrays[index].reshape(-1)
    numeric = np.empty(flat.size)

    def loss():
        return sum(float(np.dot(out.data.reshape(-1), w.reshape(-1)))
                   for out, w in zip(outputs_of(f(*[Tensor(a) for a in arrays])), weights))

    with default_dtype(np.float64), no_grad():
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = loss()
            flat[i] = original - eps
            minus = loss()
            flat[i] = original
            numeric[i] = (plus - minus) / (2 * eps)
    return numeric.reshape(arrays[index].shape)


def check_definition(u_fn, f_fn, arrays, out_scale, grad_scales, expected_forward=None, seed=7):
    """Check a U op against its definition, in float64, and its float32 run against float64.

    u_fn(*tensors): the U op. f_fn(*tensors): the unscaled op. arrays: the inputs (float64 or
    integer arrays). grad_scales: {input index: backward scale b_i}, the inputs to check.
    value == out_scale * f (or expected_forward(*arrays)); grad_i == b_i * d<r, f>/dx_i.
    """
    arrays = [np.asarray(a) for a in arrays]
    with default_dtype(np.float64):
        tensors = [Tensor(a, requires_grad=i in grad_scales) for i, a in enumerate(arrays)]
        outputs = outputs_of(u_fn(*tensors))
        with no_grad():
            reference = outputs_of(f_fn(*[Tensor(a) for a in arrays]))
        rng = np.random.default_rng(seed)
        weights = [rng.standard_normal(out.shape) for out in outputs]
        for out in outputs:
            assert out.dtype == np.float64
        if expected_forward is None:
            for out, ref in zip(outputs, reference):
                np.testing.assert_allclose(out.data, out_scale * ref.data, rtol=1e-12, atol=1e-14)
        else:
            for out, expected in zip(outputs, outputs_of(expected_forward(*arrays))):
                np.testing.assert_allclose(out.data, expected, rtol=1e-12, atol=1e-14)
        for out, w in zip(outputs, weights):
            if out.requires_grad:
                out.backward(w)
    grads64 = {}
    for index, b in grad_scales.items():
        expected = b * central_differences(f_fn, arrays, index, weights)
        grad = tensors[index].grad
        assert grad is not None, f"input {index} received no gradient"
        tolerance = 1e-7 + 1e-6 * np.abs(expected) + 1e-7 * np.abs(expected).max()
        worst = np.abs(grad - expected) / tolerance
        assert worst.max() <= 1.0, (f"input {index}: gradient != {b:.6g} x unscaled gradient; worst element "
                                    f"{np.unravel_index(worst.argmax(), worst.shape)}: got "
                                    f"{grad.flat[worst.argmax()]:.10g}, expected {expected.flat[worst.argmax()]:.10g}")
        grads64[index] = grad
    # the float32 engine: float32 results that agree with the float64 ones
    tensors32 = [Tensor(a.astype(np.float32) if a.dtype.kind == "f" else a, requires_grad=i in grad_scales)
                 for i, a in enumerate(arrays)]
    outputs32 = outputs_of(u_fn(*tensors32))
    for out, w in zip(outputs32, weights):
        assert out.dtype == np.float32
        if out.requires_grad:
            out.backward(w.astype(np.float32))
    for index, grad64 in grads64.items():
        grad32 = tensors32[index].grad
        assert grad32.dtype == np.float32
        np.testing.assert_allclose(grad32, grad64, rtol=1e-4, atol=1e-5 * np.abs(grad64).max())


def rand(seed, *shape, scale=1.0):
    return scale * np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("a", [2.5, -0.75])
def test_scale_fwd_and_scale_bwd_definitions(a):
    x = rand(0, 3, 4)
    check_definition(lambda t: U.scale_fwd(t, a), lambda t: t * 1.0, [x], out_scale=a, grad_scales={0: 1.0})
    check_definition(lambda t: U.scale_bwd(t, a), lambda t: t * 1.0, [x], out_scale=1.0, grad_scales={0: a})
    # equal scales both ways: a true gradient of a * x
    gradcheck(lambda t: U.scale_fwd(U.scale_bwd(t, a), a), Tensor(x, requires_grad=True))


def test_scale_of_one_is_the_identity_and_dtypes_are_kept():
    x = leaf(0, 3)
    assert U.scale_fwd(x, 1) is x and U.scale_bwd(x, 1.0) is x
    # a NumPy float64 scale must not promote float32 data
    assert U.scale_fwd(x, np.float64(0.5)).dtype == np.float32
    assert U.scale_bwd(x, np.float64(0.5)).dtype == np.float32
    # the extremes float32 holds are scales like any other: 0 stays 0, FLT_MAX * 1 is FLT_MAX
    edges = Tensor(np.array([0.0, 1.0, -0.5], np.float32), requires_grad=True)
    flt_max = float(np.finfo(np.float32).max)
    assert U.scale_fwd(edges, flt_max).data.tolist() == [0.0, flt_max, -flt_max / 2]
    assert U.scale_fwd(edges * 4.0, 2.0 ** -149).data.tolist() == [0.0, 2.0 ** -147, -2.0 ** -148]
    assert U.scale_fwd(edges, 0.0).data.tolist() == [0.0, 0.0, -0.0]


@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_definition(constraint, with_bias):
    x, weight, bias = rand(0, 3, 4, 5), rand(1, 6, 5), rand(2, 6)
    fan_out, fan_in, batch = 6, 5, 12
    out_scale, grad_x_scale = tie(constraint, fan_in ** -0.5, fan_out ** -0.5)
    scales = {0: grad_x_scale, 1: batch ** -0.5}
    arrays = [x, weight]
    if with_bias:
        arrays.append(bias)
        scales[2] = batch ** -0.5
    check_definition(lambda *t: U.linear(*t, constraint=constraint), F.linear, arrays, out_scale, scales)


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_linear_readout_definition(constraint):
    x, weight, bias = rand(0, 7, 5), rand(1, 3, 5), rand(2, 3)
    out_scale, grad_x_scale = tie(constraint, 5 ** -1.0, 3 ** -0.5)
    check_definition(lambda *t: U.linear_readout(*t, constraint=constraint), F.linear, [x, weight, bias],
                     out_scale, {0: grad_x_scale, 1: 7 ** -0.5, 2: 7 ** -0.5})
    if constraint is None:  # the default
        check_definition(U.linear_readout, F.linear, [x, weight, bias], out_scale,
                         {0: grad_x_scale, 1: 7 ** -0.5, 2: 7 ** -0.5})


def test_linear_with_tied_scales_is_a_true_gradient_in_x():
    x = Tensor(rand(0, 4, 5), requires_grad=True)
    weight, bias = Tensor(rand(1, 3, 5)), Tensor(rand(2, 3))
    gradcheck(lambda t: U.linear(t, weight, bias), x)  # to_output_scale: x's forward and backward scales agree


def test_linear_gemm_hook_is_called_with_the_scale_bwd_operands():
    x, weight, bias = leaf(0, 4, 5), leaf(1, 3, 5), leaf(2, 3)
    calls = []

    def gemm(a, w, b):
        calls.append((a, w, b))
        return F.linear(a, w, b)

    expected = U.linear(x, weight, bias)
    upstream = rand(3, 4, 3)
    expected.backward(upstream)
    expected_grads = [t.grad.copy() for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    y = U.linear(x, weight, bias, gemm=gemm)
    assert len(calls) == 1
    a, w, b = calls[0]
    assert a.data is x.data and w.data is weight.data and b.data is bias.data  # values unchanged
    assert a is not x and w is not weight and b is not bias                    # ... gradients scaled
    np.testing.assert_array_equal(y.data, expected.data)
    y.backward(upstream)  # (through the hook's operands: the same scaled gradients as without a hook)
    for t, grad in zip((x, weight, bias), expected_grads):
        np.testing.assert_array_equal(t.grad, grad)
    calls.clear()
    U.linear_readout(x, weight, None, gemm=gemm)
    assert len(calls) == 1 and calls[0][2] is None


@pytest.mark.parametrize("left_shape, right_shape", [
    ((2, 3, 4), (4, 5)),      # right broadcast over left's batch axis
    ((3, 4), (2, 4, 5)),      # left broadcast over right's batch axis
])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_matmul_definition(constraint, left_shape, right_shape):
    left, right = rand(0, *left_shape), rand(1, *right_shape)
    out_scale, left_scale, right_scale = tie(constraint, 4 ** -0.5, 5 ** -0.5, 3 ** -0.5)
    check_definition(lambda a, b: U.matmul(a, b, constraint=constraint), F.matmul, [left, right],
                     out_scale, {0: left_scale, 1: right_scale})


def test_matmul_to_output_scale_is_a_true_gradient():
    gradcheck(U.matmul, Tensor(rand(0, 2, 3, 4), requires_grad=True), Tensor(rand(1, 2, 4, 5), requires_grad=True))


def gelu_scales(mult):
    alpha = 1.0 / (1.0 + 0.25 / mult ** 2)
    return interp(alpha, 2.0, math.sqrt(2.0 / (1.0 - 1.0 / math.pi))), interp(alpha, 2.0, math.sqrt(2.0))


@pytest.mark.parametrize("mult", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_gelu_definition(mult, constraint):
    x = rand(0, 3, 5, scale=1.5)
    out_scale, grad_scale = tie(constraint, *gelu_scales(mult))
    check_definition(lambda t: U.gelu(t, mult=mult, constraint=constraint),
                     lambda t: F.gelu(t * mult) * (1.0 / mult), [x], out_scale, {0: grad_scale})
    if constraint == "to_output_scale":
        gradcheck(lambda t: U.gelu(t, mult=mult), Tensor(x, requires_grad=True))


def test_gelu_scale_values():
    """At mult 1, alpha = 0.8: output 2^0.2 (2/(1-1/pi))^0.4, grad 2^0.2 2^0.4 = 2^0.6 (unit_scaling 0.3)."""
    out_scale, grad_scale = gelu_scales(1.0)
    assert out_scale == pytest.approx(2 ** 0.2 * (2 / (1 - 1 / math.pi)) ** 0.4, rel=1e-14)
    assert grad_scale == pytest.approx(2 ** 0.6, rel=1e-14)
    x = leaf(0, 6)
    with no_grad():
        np.testing.assert_allclose(U.gelu(x).data, out_scale * F.gelu(x).data, rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("mult", [1.0, 0.25, 2.0])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_softmax_definition(axis, mult, constraint):
    x = rand(0, 4, 6)
    d = x.shape[axis]
    alpha = 1.0 / (1.0 + 4.0 / mult ** 2)
    out_scale, grad_scale = tie(constraint, interp(alpha, d, math.sqrt(d)), interp(alpha, d / mult, math.sqrt(d / mult)))
    check_definition(lambda t: U.softmax(t, axis=axis, mult=mult, constraint=constraint),
                     lambda t: F.softmax(t * mult, axis=axis), [x], out_scale, {0: grad_scale})
    if constraint == "to_output_scale":
        gradcheck(lambda t: U.softmax(t, axis=axis, mult=mult), Tensor(x, requires_grad=True))


@pytest.mark.parametrize("affine", [("weight", "bias"), ("weight",), ("bias",), ()])
def test_layer_norm_definition(affine):
    x, params = rand(0, 2, 3, 6), {"weight": rand(1, 6), "bias": rand(2, 6)}
    scale = math.sqrt(6 / x.size)

    def by_name(op):  # op(x, weight=..., bias=...) with the parameters in `affine` only
        return lambda t, *p: op(t, **dict(zip(affine, p)))

    check_definition(by_name(U.layer_norm), by_name(F.layer_norm), [x, *(params[n] for n in affine)], 1.0,
                     {0: 1.0, **{i: scale for i in range(1, len(affine) + 1)}})
    if not affine:
        gradcheck(U.layer_norm, Tensor(x, requires_grad=True))  # no scale on x: a true gradient


def test_embedding_definition():
    ids = np.array([[0, 3, 3, 1], [4, 0, 3, 2], [1, 1, 4, 0]])
    weight = rand(1, 5, 3)
    check_definition(lambda w: U.embedding(ids, w), lambda w: F.embedding(ids, w), [weight], 1.0,
                     {0: math.sqrt(5 / ids.size)})
    empty = U.embedding(np.zeros((0,), dtype=np.int64), leaf(0, 5, 3))
    assert empty.shape == (0, 3)
    weight = leaf(0, 5, 0)  # no features: backward raised "cannot reshape array of size 0 into shape (0)"
    out = U.embedding(np.array([1, 2]), weight)
    assert out.shape == (2, 0)
    out.backward(np.zeros((2, 0)))
    assert weight.grad.shape == (5, 0)


@pytest.mark.parametrize("p", [0.3, 0.0], ids=["p=0.3", "p=0-boundary-identity"])
def test_dropout_definition(p):
    """``sqrt(1 - p)`` both ways around ``F.dropout`` with the same mask, and the value from the documented
    draw (``F.dropout``: keep where ``rng.random(shape, dtype=float32) >= p``, kept elements ``/ (1 - p)``):
    ``x keep / sqrt(1 - p)``. p = 0.3 is the real case (it drops some elements and keeps others); p = 0
    only checks the boundary, where nothing is dropped and the scale is 1: the op must be the identity,
    value and gradient (compared there with ``F.dropout``, itself the identity)."""
    x = rand(0, 5, 6)
    scale = math.sqrt(1.0 - p)
    keep = np.random.default_rng(11).random(x.shape, dtype=np.float32) >= p
    assert 0 < keep.sum() < keep.size if p else keep.all()

    def u_fn(t):
        return U.dropout(t, p, np.random.default_rng(11))

    def f_fn(t):  # the same mask: the same seed
        return F.dropout(t, p, np.random.default_rng(11))

    check_definition(u_fn, f_fn, [x], scale, {0: scale}, expected_forward=lambda a: a * keep / scale)
    gradcheck(u_fn, Tensor(x, requires_grad=True))  # sqrt(1 - p) both ways: a true gradient


def test_dropout_in_evaluation_mode_keeps_the_training_mean():
    x = leaf(0, 5, 6)
    y = U.dropout(x, 0.36, np.random.default_rng(0), training=False)
    np.testing.assert_allclose(y.data, 0.8 * x.data, rtol=1e-6)
    y.backward(np.ones(y.shape))
    np.testing.assert_allclose(x.grad, 0.8, rtol=1e-6)


def test_dropout_definition_in_evaluation_mode():
    """training=False: value sqrt(1 - p) x and gradient sqrt(1 - p) times that of F.dropout, the identity."""
    x, p = rand(0, 5, 6), 0.36

    def u_fn(t):
        return U.dropout(t, p, np.random.default_rng(11), training=False)

    check_definition(u_fn, lambda t: F.dropout(t, p, np.random.default_rng(11), training=False), [x], 0.8, {0: 0.8})
    gradcheck(u_fn, Tensor(x, requires_grad=True))  # sqrt(1 - p) both ways: a true gradient


@pytest.mark.parametrize("tau", [0.2, 1.0, 3.0])
def test_residual_split_definition(tau):
    x = rand(0, 3, 4)
    denominator = math.sqrt(1.0 + tau * tau)
    check_definition(lambda t: U.residual_split(t, tau)[0], lambda t: t * 1.0, [x], 1.0, {0: tau / denominator})
    check_definition(lambda t: U.residual_split(t, tau)[1], lambda t: t * 1.0, [x], 1.0, {0: 1.0 / denominator})
    if tau == 1.0:  # equal weights: both outputs at once, the gradient is (r_1 + r_2) / sqrt(2)
        check_definition(lambda t: U.residual_split(t, tau), lambda t: (t * 1.0, t * 1.0), [x], 1.0,
                         {0: 2 ** -0.5})


@pytest.mark.parametrize("tau", [0.2, 1.0, 3.0])
def test_residual_add_definition(tau):
    residual, skip = rand(0, 3, 4), rand(1, 3, 4)
    denominator = math.sqrt(1.0 + tau * tau)
    check_definition(lambda r, s: U.residual_add(r, s, tau), lambda r, s: r + s, [residual, skip], None,
                     {0: 1.0, 1: 1.0}, expected_forward=lambda r, s: tau / denominator * r + 1.0 / denominator * s)


def test_residual_weights_keep_unit_variance_and_sum_of_gradients():
    """Forward weights tau/sqrt(1+tau^2), 1/sqrt(1+tau^2) have squares summing to 1; the split mirrors them."""
    for tau in (0.1, 0.5, 2.0):
        x = Tensor(np.ones(1), requires_grad=True)
        residual, skip = U.residual_split(x, tau)
        y = U.residual_add(residual, skip, tau)  # identity branch: y = (tau + 1) / sqrt(1 + tau^2) x
        assert y.item() == pytest.approx((tau + 1) / math.sqrt(1 + tau * tau))
        y.backward(np.ones(1))
        assert x.grad[0] == pytest.approx((tau + 1) / math.sqrt(1 + tau * tau))


def test_residual_weights_past_where_tau_squared_overflows():
    """tau^2 overflows float64 past about 1.3e154: the weights 1 and 1/tau (they were two zeros, with
    no error, and the split sent no gradient)."""
    with default_dtype(np.float64):
        residual, skip = Tensor(np.ones(3)), Tensor(np.full(3, 2.0))
        np.testing.assert_allclose(U.residual_add(residual, skip, tau=1e160).data, 1.0 + 2e-160, rtol=1e-15)
        x = Tensor(np.ones(3), requires_grad=True)
        branch, stream = U.residual_split(x, 1e160)
        (branch * 3.0 + stream * 5.0).sum().backward()
        np.testing.assert_allclose(x.grad, 3.0 + 5e-160, rtol=1e-15)
        np.testing.assert_array_equal(U.residual_add(residual, skip, tau=1e150).data,
                                      (1e150 / math.sqrt(1.0 + 1e300)) * 1.0 + 2.0 / math.sqrt(1.0 + 1e300))


@pytest.mark.parametrize("op", ["residual_split", "residual_add"])
@pytest.mark.parametrize("tau, weight", [(1e50, "skip"), (1e-50, "branch")])
def test_a_tau_whose_weight_is_zero_in_float32_is_refused_naming_tau(op, tau, weight):
    """In float32 a tau past about 1e45 (or below 1e-45) makes one weight 0: the error names tau and
    the weight (it named the scale of an inner scale_fwd / scale_bwd), and float64 data still takes it."""
    x = np.ones(3, np.float32)
    call = (lambda data: U.residual_split(data, tau)) if op == "residual_split" else \
        (lambda data: U.residual_add(data, data, tau))
    with pytest.raises(ValueError, match=rf"^{op}: tau=1e[+-]50 gives the {weight} weight 1e-50, which is 0 in "
                                         r"float32"):
        call(x)
    with default_dtype(np.float64):
        call(Tensor(np.ones(3)))


def attention_scale(seq, d_head, causal, mult, dropout_p=0.0):
    """unit_scaling.functional.scaled_dot_product_attention's rule (u-muP), written out."""
    alpha = 1.0 / (1.0 + 4.0 * d_head / mult ** 2)
    lower = math.sqrt((math.log(seq) if causal else 1.0) / seq)
    return math.sqrt(1.0 - dropout_p) / interp(alpha, lower, 1.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mult", [1.0, 0.5, 4.0])
def test_attention_definition(causal, mult):
    q, k, v = rand(0, 2, 2, 5, 4), rand(1, 2, 2, 5, 4), rand(2, 2, 2, 5, 4)
    scale = attention_scale(5, 4, causal, mult)

    def f_fn(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, causal=causal, scale=mult / 4)

    check_definition(lambda a, b, c: U.scaled_dot_product_attention(a, b, c, causal=causal, mult=mult), f_fn,
                     [q, k, v], scale, {0: scale, 1: scale, 2: scale})
    gradcheck(lambda a, b, c: U.scaled_dot_product_attention(a, b, c, causal=causal, mult=mult),
              *(Tensor(t, requires_grad=True) for t in (q, k, v)))


@pytest.mark.parametrize("causal, queries, keys, p", [
    (False, 3, 6, 0.25), (True, 3, 6, 0.0), (True, 6, 3, 0.0), (True, 3, 6, 0.25), (True, 5, 5, 0.25)])
def test_attention_definition_with_dropout_and_cross_lengths(causal, queries, keys, p):
    q, k, v = rand(0, 1, 2, queries, 4), rand(1, 1, 2, keys, 4), rand(2, 1, 2, keys, 4)
    scale = attention_scale(keys, 4, causal, 1.0, dropout_p=p)  # s is the key length

    def u_fn(a, b, c):  # the dropout masks: a Generator from the same seed in u_fn and f_fn, every call
        return U.scaled_dot_product_attention(a, b, c, causal=causal, dropout_p=p, rng=np.random.default_rng(5))

    def f_fn(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, causal=causal, scale=1 / 4, dropout_p=p,
                                              rng=np.random.default_rng(5))

    check_definition(u_fn, f_fn, [q, k, v], scale, {0: scale, 1: scale, 2: scale})


def test_attention_scale_numbers():
    # s = 256, d_head = 64, causal, mult 1: alpha = 1/257, scale = (ln 256 / 256)^(-(256/257)/2)
    assert attention_scale(256, 64, True, 1.0) == pytest.approx((math.log(256) / 256) ** (-128 / 257), rel=1e-12)
    # causal s = 1: the output is v itself, so the scale is 1 (the rule's lower limit would be 0)
    q, k, v = leaf(0, 2, 1, 1, 4), leaf(1, 2, 1, 1, 4), leaf(2, 2, 1, 1, 4)
    y = U.scaled_dot_product_attention(q, k, v, causal=True)
    np.testing.assert_allclose(y.data, v.data, rtol=1e-6)


@pytest.mark.parametrize("queries, p", [(1, 0.0), (3, 0.0), (3, 0.25)])
def test_attention_definition_at_one_causal_key(queries, p):
    """Causal with one key: the rule's lower limit sqrt(ln 1 / 1) = 0 is replaced by the exact 1, so
    the output and the q, k and v gradients are all * sqrt(1 - p) (the q and k gradients are 0: a
    softmax over one key is constant)."""
    q, k, v = rand(0, 1, 2, queries, 4), rand(1, 1, 2, 1, 4), rand(2, 1, 2, 1, 4)
    scale = math.sqrt(1.0 - p)

    def u_fn(a, b, c):
        return U.scaled_dot_product_attention(a, b, c, causal=True, dropout_p=p, rng=np.random.default_rng(5))

    def f_fn(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, causal=True, scale=1 / 4, dropout_p=p,
                                              rng=np.random.default_rng(5))

    check_definition(u_fn, f_fn, [q, k, v], scale, {0: scale, 1: scale, 2: scale})


@pytest.mark.parametrize("mult", [1.0, 0.5])
def test_cross_entropy_definition(mult):
    """grad z = V/sqrt(V-1) * d(sum CE)(y)/dy at y = mult z; value = mean CE(mult z)."""
    logits = rand(0, 2, 3, 5, scale=2.0)
    targets = np.array([[0, 4, 2], [2, 2, 1]])
    tokens, classes = targets.size, 5
    with default_dtype(np.float64):
        z = Tensor(logits, requires_grad=True)
        loss = U.cross_entropy(z, targets, mult=mult)
        loss.backward()
        reference = F.cross_entropy(Tensor(mult * logits), targets)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-13)
    weight = [np.ones(())]
    sum_ce = central_differences(lambda y: F.cross_entropy(y, targets) * float(tokens), [mult * logits], 0, weight)
    np.testing.assert_allclose(z.grad, classes / math.sqrt(classes - 1) * sum_ce, rtol=1e-6, atol=1e-8)
    # float32 run
    z32 = leaf(0, 2, 3, 5)
    z32.data = logits.astype(np.float32)
    loss32 = U.cross_entropy(z32, targets, mult=mult)
    loss32.backward()
    assert loss32.dtype == np.float32 and z32.grad.dtype == np.float32
    np.testing.assert_allclose(z32.grad, z.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mult, ignore_index, targets_as", [
    (1.0, -1, "array"), (0.5, -1, "tensor"), (0.5, 4, "array"), (1.0, 4, "tensor")])
def test_cross_entropy_definition_with_ignore_index(mult, ignore_index, targets_as):
    """As above over the counted tokens: grad z = V/sqrt(V-1) * d(their sum of CE)(y)/dy at y = mult z,
    zero where the target is ignore_index (a class index or not); the value is their mean."""
    logits, targets = rand(0, 2, 3, 5, scale=2.0), np.array([[0, ignore_index, 3], [ignore_index, 1, 3]])
    counted, classes = 4, 5
    passed = targets_as == "tensor"  # check_definition hands integer arrays to the ops as integer Tensors

    def u_fn(z, *t):
        return U.cross_entropy(z, t[0] if passed else targets, mult=mult, ignore_index=ignore_index)

    def f_fn(z, *t):  # the sum of CE(mult z) over the counted tokens
        return F.cross_entropy(z * mult, t[0] if passed else targets, ignore_index=ignore_index) * float(counted)

    check_definition(u_fn, f_fn, [logits, targets] if passed else [logits], 1.0 / counted,
                     {0: classes / math.sqrt(classes - 1) / mult})


def test_cross_entropy_ignore_index():
    logits = leaf(0, 4, 6)
    targets = np.array([1, -1, 5, -1])
    loss = U.cross_entropy(logits, targets, ignore_index=-1)
    loss.backward()
    kept = [0, 2]
    z = logits.data.astype(np.float64)[kept]
    probabilities = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    expected_loss = -np.log(probabilities[[0, 1], [1, 5]]).mean()
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    onehot = np.zeros_like(probabilities)
    onehot[[0, 1], [1, 5]] = 1.0
    np.testing.assert_allclose(logits.grad[kept], (probabilities - onehot) * 6 / math.sqrt(5), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(logits.grad[[1, 3]], 0.0)


# ================================================================================================
# 3. Bad input
# ================================================================================================

@pytest.mark.parametrize("call", [
    lambda: U.linear(leaf(0, 2, 3), leaf(1, 4, 3), constraint="gmaen"),
    lambda: U.linear_readout(leaf(0, 2, 3), leaf(1, 4, 3), constraint="to_grad_input_scale"),
    lambda: U.matmul(leaf(0, 2, 3), leaf(1, 3, 4), constraint="mean"),
    lambda: U.gelu(leaf(0, 3), constraint="output"),
    lambda: U.softmax(leaf(0, 3), constraint=""),
])
def test_unknown_constraint_lists_the_valid_ones(call):
    with pytest.raises(ValueError, match=r"unknown constraint .*None, 'to_output_scale', 'gmean'"):
        call()


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_tau_must_be_positive(tau):
    x = leaf(0, 3)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        U.residual_split(x, tau)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        U.residual_add(x, x, tau)


def test_tau_must_be_a_number():
    with pytest.raises(TypeError, match="tau must be a real number"):
        U.residual_split(leaf(0, 3), "1")


@pytest.mark.parametrize("args, error, message", [
    (("a", 1.0, 2.0), TypeError, "alpha must be a real number, got str"),
    ((True, 1.0, 2.0), TypeError, "alpha must be a real number, got bool"),
    ((0.5, None, 2.0), TypeError, "lower must be a real number, got NoneType"),
    ((0.5, 1.0, "2"), TypeError, "upper must be a real number, got str"),
    ((np.nan, 1.0, 2.0), ValueError, r"alpha must be in \[0, 1\] .*got nan"),
    ((np.inf, 1.0, 2.0), ValueError, r"alpha must be in \[0, 1\] .*got inf"),
    ((1.5, 1.0, 2.0), ValueError, r"alpha must be in \[0, 1\] .*got 1.5"),
    ((-0.1, 1.0, 2.0), ValueError, r"alpha must be in \[0, 1\] .*got -0.1"),
    ((0.5, np.nan, 2.0), ValueError, "lower and upper must be > 0 and finite .*got nan, 2.0"),
    ((0.5, 1.0, np.inf), ValueError, "lower and upper must be > 0 and finite .*got 1.0, inf"),
    ((0.5, -1.0, 2.0), ValueError, "lower and upper must be > 0 and finite .*got -1.0, 2.0"),
])
def test_logarithmic_interpolation_bad_input(args, error, message):
    # was "can't multiply sequence by non-int", "'>' not supported ... 'NoneType'" and a silent nan
    with pytest.raises(error, match=f"logarithmic_interpolation: {message}"):
        U.logarithmic_interpolation(*args)


def test_logarithmic_interpolation_values():
    assert U.logarithmic_interpolation(0, 3.0, 12.0) == pytest.approx(3.0)
    assert U.logarithmic_interpolation(1, 3.0, 12.0) == pytest.approx(12.0)
    assert U.logarithmic_interpolation(np.float32(0.5), np.int64(3), 12) == pytest.approx(6.0)


@pytest.mark.parametrize("linear", [U.linear, U.linear_readout])
@pytest.mark.parametrize("gemm, error, message", [
    (3, TypeError, r"gemm must be None or a callable gemm\(x, weight, bias\) -> Tensor, got int 3"),
    ("F.linear", TypeError, "gemm must be None or a callable .*got str"),
    (lambda x, w, b: 3, TypeError, "gemm must return a floating Tensor, got int"),
    (lambda x, w, b: F.linear(x, w, b).data, TypeError, "gemm must return a floating Tensor, got ndarray"),
    (lambda x, w, b: Tensor(np.zeros((2, 4), np.int64)), TypeError,
     "gemm must return a floating Tensor, got a Tensor of dtype int64"),
    (lambda x, w, b: F.linear(x, w, b).T, ValueError, r"gemm returned shape \(4, 2\), expected \(2, 4\)"),
])
def test_linear_gemm_bad_hook(linear, gemm, error, message):
    # was "'int' object is not callable", or "scale_fwd: x must be a floating tensor" for an int result
    with pytest.raises(error, match=f"{linear.__name__}: {message}"):
        linear(leaf(0, 2, 3), leaf(1, 4, 3), gemm=gemm)


@pytest.mark.parametrize("left_shape, right_shape", [
    ((2, 0), (0, 3)),     # an empty inner axis: a zero output
    ((2, 3, 0), (0, 5)),  # the same with a batched left and a shared right (one GEMM for the right grad)
    ((2, 3, 4), (4, 0)),  # an empty output axis: zero gradients
])
def test_matmul_with_an_empty_axis(left_shape, right_shape):
    # the 3-D cases raised "cannot reshape array of size 0 into shape (0)" in backward
    left, right = leaf(0, *left_shape), leaf(1, *right_shape)
    out_shape = left_shape[:-1] + right_shape[-1:]
    out = U.matmul(left, right)
    assert out.shape == out_shape
    np.testing.assert_array_equal(out.data, np.zeros(out_shape))
    out.backward(np.ones(out_shape))
    assert left.grad.shape == left_shape and right.grad.shape == right_shape
    np.testing.assert_array_equal(left.grad, np.zeros(left_shape))
    np.testing.assert_array_equal(right.grad, np.zeros(right_shape))


@pytest.mark.parametrize("shapes, message", [
    (((2, 5, 4), (2, 5, 3), (2, 5, 4)), "same d_head"),
    (((2, 5, 4), (2, 5, 4), (2, 5, 8)), "same d_head"),
    (((2, 5, 4), (2, 6, 4), (2, 5, 4)), "same sequence length"),
    (((2, 5, 4), (3, 5, 4), (3, 5, 4)), "same leading"),
    (((2, 5, 4), (2, 5, 4), (1, 2, 5, 4)), "same number"),
    (((4,), (4,), (4,)), "same number"),
])
def test_attention_shape_mismatch(shapes, message):
    q, k, v = (leaf(i, *shape) for i, shape in enumerate(shapes))
    with pytest.raises(ValueError, match=message):
        U.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("call, error, message", [
    (lambda: U.scale_fwd(leaf(0, 3), "2"), TypeError, "real number"),
    (lambda: U.scale_bwd(leaf(0, 3), np.ones(3)), TypeError, "real number"),
    (lambda: U.scale_fwd(leaf(0, 3), float("inf")), ValueError, "finite"),
    # a finite scale that float32 cannot hold: NumPy multiplied by inf (0 * inf = NaN) or by 0
    (lambda: U.scale_fwd(leaf(0, 3), 1e39), ValueError, r"scale_fwd: the scale 1e\+39 is inf in float32"),
    (lambda: U.scale_bwd(leaf(0, 3), -1e39), ValueError, r"scale_bwd: the scale -1e\+39 is inf in float32"),
    (lambda: U.scale_fwd(leaf(0, 3), 1e-46), ValueError, r"scale_fwd: the scale 1e-46 is 0 in float32"),
    # errors named after the op called, not the one it calls
    (lambda: U.linear_readout(leaf(0, 2, 3), leaf(1, 4, 3), leaf(2, 5)), ValueError,
     r"^linear_readout: bias must have shape \(4,\) \(fan_out\), got \(5,\)$"),
    (lambda: U.residual_add(leaf(0, 4, 3), leaf(1, 2, 3), 0.5), ValueError,
     r"^residual_add: residual \(4, 3\) and skip \(2, 3\) do not broadcast"),
    (lambda: U.scale_bwd(Tensor(np.arange(3)), 2.0), TypeError, "floating"),
    (lambda: U.gelu(leaf(0, 3), mult=0.0), ValueError, "mult"),
    (lambda: U.softmax(leaf(0, 3), mult=-1.0), ValueError, "mult"),
    (lambda: U.scaled_dot_product_attention(leaf(0, 1, 2, 4), leaf(1, 1, 2, 4), leaf(2, 1, 2, 4), mult=0), ValueError, "mult"),
    (lambda: U.cross_entropy(leaf(0, 3, 1), np.zeros(3, dtype=int)), ValueError, "at least 2 classes"),
    (lambda: U.cross_entropy(leaf(0, 3, 4), np.zeros(2, dtype=int)), ValueError, "targets shape"),
    (lambda: U.linear(leaf(0, 2, 3), leaf(1, 4, 5)), ValueError, "fan_in"),
    (lambda: U.linear(leaf(0, 2, 0), leaf(1, 4, 0)), ValueError, r"weight of shape \(4, 0\) is empty"),
    (lambda: U.linear_readout(leaf(0, 2, 3), leaf(1, 0, 3)), ValueError, r"weight of shape \(0, 3\) is empty"),
    (lambda: U.matmul(leaf(0, 3), leaf(1, 3, 4)), ValueError, "at least 2-D"),
    (lambda: U.dropout(leaf(0, 3), 1.5, np.random.default_rng(0)), ValueError, r"\[0, 1\]"),
    (lambda: U.dropout(leaf(0, 3), 0.5, 0), TypeError, "Generator"),
    (lambda: U.dropout(leaf(0, 3), "0.5", np.random.default_rng(0)), TypeError, "p must be a real number, got str"),
    (lambda: U.scaled_dot_product_attention(leaf(0, 1, 2, 4), leaf(1, 1, 2, 4), leaf(2, 1, 2, 4), dropout_p=None),
     TypeError, "dropout_p must be a real number, got NoneType"),
    (lambda: U.embedding(np.array([0.5]), leaf(0, 4, 2)), TypeError, "integer"),
])
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()
