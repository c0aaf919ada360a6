"""minifp8.functional: values against independent float64/Python references, gradients against
float64 central differences (testing.gradcheck), and clear errors for bad input."""
import math
import warnings

import numpy as np
import pytest

import minifp8.functional as F
from minifp8 import unit
from minifp8.autograd import Tensor, default_dtype
from minifp8.testing import gradcheck


def param(*shape, seed=0, scale=1.0):
    return Tensor(scale * np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


def as64(t):
    return t.data.astype(np.float64)


# ---- elementwise ---------------------------------------------------------------------------------

def gelu_reference(x: float) -> float:
    """GPT-2's gelu, written from the formula in Hendrycks & Gimpel 2016 (tanh approximation)."""
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_gelu_values_and_gradcheck():
    x = param(4, 5, scale=2.0)
    expected = np.vectorize(gelu_reference)(as64(x))
    np.testing.assert_allclose(F.gelu(x).data, expected, rtol=2e-6, atol=1e-7)
    # the tanh form stays within 1e-3 of the exact erf GELU, x * Phi(x)
    exact = np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))))(as64(x))
    np.testing.assert_allclose(F.gelu(x).data, exact, atol=1e-3)
    gradcheck(F.gelu, x)
    big = F.gelu(Tensor([-60.0, 60.0, 0.0]))
    np.testing.assert_array_equal(big.data, [-0.0, 60.0, 0.0])
    scalar = param()  # 0-d: np.tanh(out=) was handed a NumPy scalar ("return arrays must be of ArrayType")
    assert F.gelu(scalar).data == pytest.approx(gelu_reference(float(scalar.data)), rel=1e-6)
    gradcheck(F.gelu, scalar)


@pytest.mark.parametrize("dtype, huge", [
    (np.float32, [3e13, -3e13, 1e18, -1e18, 1.8e19, -1.8e19, 1e20, -1e20, 3.4e38, -3.4e38]),
    (np.float64, [1e104, -1e104, 1e200, -1e200]),
])
def test_gelu_gradient_of_huge_inputs_is_its_limit(dtype, huge):
    # the backward's x (c/2 + 3ac x^2/2) overflowed to inf (float32 |x| >= 1.47e13, float64 1.19e103) and met
    # tanh's saturated 1 - t^2 = 0: the gradient was NaN, where its limit is 1 (x > 0) or 0 (x < 0)
    rng = np.random.default_rng(5)
    with default_dtype(dtype):
        ordinary = rng.standard_normal(200) * 4.0
        x = np.concatenate([ordinary, huge, [np.inf, -np.inf]])
        g = rng.standard_normal(x.size)
        leaf = Tensor(x, requires_grad=True)
        with np.errstate(invalid="ignore"):  # gelu(-inf) is NaN (below)
            out = F.gelu(leaf)
        out.backward(g)
        alone = Tensor(ordinary, requires_grad=True)  # the same ordinary inputs without the huge ones
        F.gelu(alone).backward(g[:200])
        limit = np.where(x[200:] > 0, 1.0, 0.0).astype(dtype) * g[200:].astype(dtype)
        np.testing.assert_array_equal(leaf.grad[200:], limit)
        # the huge inputs change no other element's gradient, bit for bit
        assert leaf.grad[:200].tobytes() == alone.grad.tobytes()
        finite_huge = list(huge)  # (all finite, up to the maximum)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # finite inputs: no overflow warning either way
            finite = Tensor(np.array(finite_huge), requires_grad=True)
            y = F.gelu(finite)
            y.backward(np.ones(len(finite_huge)))
    np.testing.assert_array_equal(finite.grad, np.where(np.array(finite_huge) > 0, 1.0, 0.0))
    # values: x or -0.0 up to the dtype's maximum, gelu(-inf) NaN as in torch
    np.testing.assert_array_equal(y.data, np.where(np.array(finite_huge) > 0, np.array(finite_huge, dtype), -0.0))
    assert out.data[-2] == np.inf and np.isnan(out.data[-1])


def test_sigmoid_keeps_its_relative_precision_in_both_tails():
    """sigmoid(x) and its gradient s (1 - s) to a few float32 ulps against float64 wherever they are
    normal float32 numbers: 0.5 (1 + tanh(x / 2)) cancels for x < 0 (relative error 3% at x = -15,
    0 instead of 2e-9 at x = -20), and 1 - s cancels for x > 0."""
    x = np.concatenate([np.linspace(-87.0, 87.0, 20001), [-0.0, 0.0]]).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    s = F.sigmoid(t)
    s.backward(np.ones_like(x))
    exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    exact_grad = exact * (1.0 / (1.0 + np.exp(x.astype(np.float64))))
    normal = np.finfo(np.float32).tiny
    assert s.data.dtype == t.grad.dtype == np.float32
    for got, want in ((s.data, exact), (t.grad, exact_grad)):
        kept = want >= normal
        assert kept.sum() > 19000
        np.testing.assert_allclose(got[kept], want[kept], rtol=8 * 2.0 ** -24, atol=0)
    np.testing.assert_array_equal(F.sigmoid(Tensor(np.array([np.inf, -np.inf, 200.0, -200.0]))).data, [1, 0, 1, 0])
    assert np.isnan(F.sigmoid(Tensor(np.array([np.nan]))).data).all()


def test_tanh_gradient_keeps_its_relative_precision_in_the_tails():
    """A review's find: the gradient 1 - tanh(x)**2, from the float32 output, cancels in the tails (96%
    off at x = 9, 0 at x = 10, where sech(x)**2 is 8e-9), as sigmoid's did. sech(x)**2 to a few float32
    ulps against float64 wherever it is a normal float32 number."""
    x = np.concatenate([np.linspace(-44.0, 44.0, 20001), [-0.0, 0.0]]).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    F.tanh(t).backward(np.ones_like(x))
    exact = 1.0 / np.cosh(x.astype(np.float64)) ** 2
    kept = exact >= np.finfo(np.float32).tiny
    assert t.grad.dtype == np.float32 and kept.sum() > 19000 and (np.abs(x[kept]) > 40).any()
    np.testing.assert_allclose(t.grad[kept], exact[kept], rtol=8 * 2.0**-24, atol=0)
    edges = Tensor(np.array([np.inf, -np.inf, 100.0, np.nan], np.float32), requires_grad=True)
    F.tanh(edges).backward(np.ones(4, np.float32))
    np.testing.assert_array_equal(edges.grad[:3], [0, 0, 0])
    assert np.isnan(edges.grad[3])


@pytest.mark.parametrize("name, reference, low", [
    ("exp", math.exp, None), ("log", math.log, 0.1), ("tanh", math.tanh, None), ("sqrt", math.sqrt, 0.1),
    ("sigmoid", lambda v: 1.0 / (1.0 + math.exp(-v)), None), ("relu", lambda v: max(v, 0.0), None),
])
def test_elementwise_values_and_gradcheck(name, reference, low):
    rng = np.random.default_rng(1)
    data = low + 2 * rng.random((3, 4)) if low is not None else rng.standard_normal((3, 4))
    if name == "relu":
        data[np.abs(data) < 0.05] = 0.3  # stay away from the kink for finite differences
    x = Tensor(data, requires_grad=True)
    op = getattr(F, name)
    np.testing.assert_allclose(op(x).data, np.vectorize(reference)(as64(x)), rtol=2e-6, atol=1e-7)
    gradcheck(op, x)


def test_relu_gradient_at_exactly_zero_is_zero():
    # the docstring's convention (torch's too: its backward is grad * (x > 0)); finite differences
    # cannot see the kink, so it is checked by hand
    x = Tensor([-1.5, 0.0, -0.0, 2.0], requires_grad=True)
    F.relu(x).backward(np.ones(4))
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0, 1.0])


def test_sigmoid_does_not_overflow():
    y = F.sigmoid(Tensor([-1000.0, 1000.0]))
    np.testing.assert_array_equal(y.data, [0.0, 1.0])


# ---- linear --------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape", [(3, 4), (2, 3, 4), (4,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_values_and_gradcheck(x_shape, with_bias):
    x, w = param(*x_shape, seed=1), param(5, 4, seed=2)
    b = param(5, seed=3) if with_bias else None
    expected = as64(x) @ as64(w).T + (as64(b) if with_bias else 0.0)
    np.testing.assert_allclose(F.linear(x, w, b).data, expected, rtol=1e-5, atol=1e-6)
    inputs = (x, w, b) if with_bias else (x, w)
    gradcheck(lambda *t: F.linear(*t), *inputs)


def test_linear_skips_gradients_not_needed():
    x, w = Tensor(np.ones((2, 3))), param(4, 3)
    F.linear(x, w).sum().backward()
    assert x.grad is None and w.grad.shape == (4, 3)
    np.testing.assert_array_equal(w.grad, np.full((4, 3), 2.0))


def _float32_values(rng, *shape, low=None):
    """float64 values that float32 holds exactly (so a float32 copy is the same number)."""
    values = rng.standard_normal(shape) if low is None else low + rng.random(shape)
    return values.astype(np.float32).astype(np.float64)


_MIXED_CASES = {
    # name: (function, each operand's shape, the operand drawn from [0.5, 1.5) (a divisor or a base))
    "mul": (lambda a, b: a * b, [(2, 3), (3,)], None),
    "div": (lambda a, b: a / b, [(2, 3), (3,)], 1),
    "rdiv": (lambda a, b: b / a, [(2, 3), (3,)], 0),
    "pow": (lambda a, b: a ** b, [(2, 3), (3,)], 0),
    "matmul": (lambda a, b: a @ b, [(2, 3, 4), (4, 2)], None),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(3, 4), (2, 4), (2,)], None),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, w, b), [(3, 5), (5,), (5,)], None),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True),
                  [(2, 3, 4), (2, 3, 4), (2, 3, 2)], None),
    "concat": (lambda a, b: F.concat([a, b], axis=0), [(2, 3), (1, 3)], None),
    "unit linear": (lambda x, w, b: unit.linear(x, w, b, constraint=None), [(3, 4), (2, 4), (2,)], None),
}


@pytest.mark.parametrize("name", list(_MIXED_CASES))
def test_gradients_of_mixed_float32_and_float64_operands_match_the_float64_ones(name):
    """An audit's gap: mixed-precision graphs were checked for their gradients' dtypes only. Every mix
    of float32 and float64 operands (values that float32 holds exactly) gives the all-float64 graph's
    gradients to float32's accuracy, each in its operand's dtype."""
    fn, shapes, positive = _MIXED_CASES[name]
    rng = np.random.default_rng(3)
    arrays = [_float32_values(rng, *shape, low=0.5 if i == positive else None) for i, shape in enumerate(shapes)]
    with default_dtype(np.float64):
        reference = [Tensor(a, requires_grad=True) for a in arrays]
        out = fn(*reference)
    weights = rng.standard_normal(out.shape)
    out.backward(weights)
    for mask in range(1, 2 ** len(arrays) - 1):  # operand i float32 where bit i is set
        operands = []
        for i, array in enumerate(arrays):
            with default_dtype(np.float32 if mask >> i & 1 else np.float64):
                operands.append(Tensor(array, requires_grad=True))
        out = fn(*operands)
        assert out.dtype == np.float64  # (some operand is float64)
        out.backward(weights)
        for mixed, exact in zip(operands, reference):
            assert mixed.grad.dtype == mixed.dtype
            np.testing.assert_allclose(mixed.grad, exact.grad, rtol=1e-5, atol=1e-5 * np.abs(exact.grad).max())


@pytest.mark.parametrize("needs_grad, with_bias", [
    ("weight", False), ("weight", True), ("bias", True), ("x", True), ("x bias", True)])
def test_linear_gradcheck_when_only_some_inputs_need_grad(needs_grad, with_bias):
    x, w, b = param(2, 3, 4, seed=1), param(5, 4, seed=2), param(5, seed=3)
    for name, t in (("x", x), ("weight", w), ("bias", b)):
        t.requires_grad = name in needs_grad.split()
    gradcheck(lambda *t: F.linear(*t), *((x, w, b) if with_bias else (x, w)))


def test_linear_and_layer_norm_promote_a_float64_bias_as_numpy_does():
    """A review's find: ``out += bias`` rounded a float64 bias into float32 data ([2, inf] for a bias 1e300),
    where ``x @ w.T + b`` and every other op give float64."""
    x = Tensor(np.ones((1, 2), np.float32), requires_grad=True)
    w = Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    with default_dtype(np.float64):
        b = Tensor(np.array([1e-9, 1e300]), requires_grad=True)
    for y, expected in ((F.linear(x, w, b), (x @ w.T + b).data), (F.layer_norm(x, None, b), np.array([[1e-9, 1e300]]))):
        assert y.dtype == np.float64
        np.testing.assert_array_equal(y.data, expected)
        y.backward(np.ones(y.shape))
        assert b.grad.dtype == np.float64 and x.grad.dtype == np.float32
        b.grad = x.grad = None


def test_gelu_float32_precision_for_negative_inputs_is_what_its_docstring_says():
    """1 + tanh(u) cancels for negative x: relative error past 1e-3 below about -3.9 and 10% below -4.8,
    absolute error under 1.6e-7 (the docstring's numbers, against the formula in float64)."""
    x = np.linspace(-12.0, 0.0, 200_001).astype(np.float32)
    xd = x.astype(np.float64)
    exact = 0.5 * xd * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (xd + 0.044715 * xd ** 3)))
    error = np.abs(F.gelu(x).data - exact)
    assert error.max() < 1.6e-7
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = error / np.abs(exact)
    assert -4.0 < xd[np.flatnonzero(relative > 1e-3).max()] < -3.8
    assert -4.9 < xd[np.flatnonzero(relative > 0.1).max()] < -4.7


def test_linear_bad_shapes_raise():
    with pytest.raises(ValueError, match="in_features=4"):
        F.linear(Tensor(np.ones((2, 3))), Tensor(np.ones((5, 4))))
    with pytest.raises(ValueError, match="2-D"):
        F.linear(Tensor(np.ones((2, 3))), Tensor(np.ones(3)))
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        F.linear(Tensor(np.ones((2, 4))), Tensor(np.ones((5, 4))), Tensor(np.ones(4)))
    with pytest.raises(TypeError, match="floating"):
        F.linear(Tensor(np.ones((2, 4), dtype=np.int64)), Tensor(np.ones((5, 4))))


def test_linear_with_zero_features_is_an_empty_gemm():
    x, weight, bias = param(2, 3, 0), param(4, 0, seed=1), param(4, seed=2)
    out = F.linear(x, weight, bias)
    np.testing.assert_array_equal(out.data, np.broadcast_to(bias.data, (2, 3, 4)))
    out.backward(np.ones((2, 3, 4)))
    assert x.grad.shape == (2, 3, 0) and weight.grad.shape == (4, 0)
    np.testing.assert_array_equal(bias.grad, np.full(4, 6.0))
    x, weight = param(2, 3), param(0, 3, seed=1)
    out = F.linear(x, weight)
    assert out.shape == (2, 0)
    out.backward(np.ones((2, 0)))
    np.testing.assert_array_equal(x.grad, np.zeros((2, 3)))


def test_matmul_is_exported():
    a, b = param(2, 3), param(3, 2, seed=1)
    gradcheck(F.matmul, a, b)


# ---- softmax family ------------------------------------------------------------------------------

def softmax_reference(row):
    top = max(row)
    exps = [math.exp(v - top) for v in row]
    total = math.fsum(exps)
    return [e / total for e in exps]


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_values_and_gradcheck(axis):
    x = param(3, 4, 2, scale=3.0)
    data = np.moveaxis(as64(x), axis, -1)
    expected = np.moveaxis(np.array([softmax_reference(list(r)) for r in data.reshape(-1, data.shape[-1])])
                           .reshape(data.shape), -1, axis)
    np.testing.assert_allclose(F.softmax(x, axis).data, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(F.log_softmax(x, axis).data, np.log(expected), rtol=1e-5, atol=1e-6)
    gradcheck(lambda t: F.softmax(t, axis), x)
    gradcheck(lambda t: F.log_softmax(t, axis), x)


def test_softmax_large_logits_are_stable():
    x = Tensor([[1000.0, 1000.0], [-1e4, 0.0]])
    np.testing.assert_allclose(F.softmax(x).data, [[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(F.log_softmax(x).data, [[-math.log(2), -math.log(2)], [-1e4, 0.0]], rtol=1e-6)


def cross_entropy_reference(logits, targets, ignore_index=None):
    losses = []
    for row, t in zip(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)):
        if t == ignore_index:
            continue
        top = max(row)
        losses.append(top + math.log(math.fsum(math.exp(v - top) for v in row)) - row[t])
    return math.fsum(losses) / len(losses)


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7), (7,)])
def test_cross_entropy_values_and_gradcheck(shape):
    logits = param(*shape, scale=2.0)
    targets = np.random.default_rng(9).integers(0, 7, shape[:-1])
    loss = F.cross_entropy(logits, targets)
    assert loss.shape == () and loss.dtype == np.float32
    assert loss.item() == pytest.approx(cross_entropy_reference(as64(logits), targets), rel=1e-6)
    gradcheck(lambda z: F.cross_entropy(z, targets), logits)
    gradcheck(lambda z: F.cross_entropy(z, Tensor(targets)), logits)  # targets as an integer Tensor


def test_cross_entropy_ignore_index_and_gradient_formula():
    logits = param(2, 4, 5)
    targets = np.array([[1, -1, 4, 0], [-1, 2, 2, 3]])
    loss = F.cross_entropy(logits, targets, ignore_index=-1)
    assert loss.item() == pytest.approx(cross_entropy_reference(as64(logits), targets, -1), rel=1e-6)
    gradcheck(lambda z: F.cross_entropy(z, targets, ignore_index=-1), logits)
    loss.backward()
    assert np.all(logits.grad[0, 1] == 0) and np.all(logits.grad[1, 0] == 0)
    # closed form: (softmax - onehot) / number of counted tokens
    probs = np.exp(as64(logits)) / np.exp(as64(logits)).sum(-1, keepdims=True)
    np.testing.assert_allclose(logits.grad[0, 0], (probs[0, 0] - np.eye(5)[1]) / 6, rtol=1e-5, atol=1e-7)


def test_empty_softmax_class_and_feature_axes_raise_clearly():
    with pytest.raises(ValueError, match=r"softmax: axis 1 of shape \(2, 0\) is empty"):
        F.softmax(Tensor(np.ones((2, 0))))
    with pytest.raises(ValueError, match=r"log_softmax: axis 0 of shape \(0, 3\) is empty"):
        F.log_softmax(Tensor(np.ones((0, 3))), axis=0)
    with pytest.raises(ValueError, match=r"cross_entropy: logits of shape \(3, 0\) have no classes"):
        F.cross_entropy(Tensor(np.ones((3, 0))), np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"layer_norm: the last axis of x \(shape \(3, 0\)\) is empty"):
        F.layer_norm(Tensor(np.ones((3, 0))))
    with pytest.raises(ValueError, match=r"no keys: k has shape \(1, 0, 2\)"):
        F.scaled_dot_product_attention(Tensor(np.ones((1, 3, 2))), Tensor(np.ones((1, 0, 2))), Tensor(np.ones((1, 0, 2))))
    # an empty batch (no rows) is fine
    assert F.softmax(Tensor(np.ones((0, 3)))).shape == (0, 3)
    assert F.layer_norm(Tensor(np.ones((0, 3)))).shape == (0, 3)


def test_cross_entropy_extreme_logits_finite():
    loss = F.cross_entropy(Tensor([[1e4, 0.0, -1e4]]), np.array([2]))
    assert loss.item() == pytest.approx(2e4, rel=1e-6)


def test_cross_entropy_bad_inputs_raise():
    logits = Tensor(np.zeros((3, 4)))
    with pytest.raises(TypeError, match="targets must be an integer"):
        F.cross_entropy(logits, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="targets shape"):
        F.cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(IndexError, match="target 4 is out of range for 4 classes"):
        F.cross_entropy(logits, np.array([0, 4, 1]))
    with pytest.raises(IndexError, match="target -2"):
        F.cross_entropy(logits, np.array([0, -2, 1]), ignore_index=-1)
    with pytest.raises(ValueError, match="no targets"):
        F.cross_entropy(logits, np.array([-1, -1, -1]), ignore_index=-1)
    for bad in (1.5, "1", True):  # would compare unequal to every target and ignore nothing
        with pytest.raises(TypeError, match="ignore_index must be an int or None"):
            F.cross_entropy(logits, np.array([0, 1, 2]), ignore_index=bad)


# ---- layer norm ----------------------------------------------------------------------------------

def layer_norm_reference(x, weight, bias, eps):
    out = np.empty_like(x)
    for i, row in enumerate(x.reshape(-1, x.shape[-1])):
        mean = math.fsum(row) / len(row)
        var = math.fsum((v - mean) ** 2 for v in row) / len(row)
        out.reshape(-1, x.shape[-1])[i] = (row - mean) / math.sqrt(var + eps) * weight + bias
    return out


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("shape", [(3, 6), (2, 3, 6), (6,)])
def test_layer_norm_values_and_gradcheck(shape, affine):
    x = param(*shape, scale=2.0)
    w = param(6, seed=1) if affine in ("both", "weight") else None
    b = param(6, seed=2) if affine in ("both", "bias") else None
    expected = layer_norm_reference(as64(x) + 0.5, as64(w) if w is not None else 1.0,
                                    as64(b) if b is not None else 0.0, 1e-5)
    np.testing.assert_allclose(F.layer_norm(x + 0.5, w, b).data, expected, rtol=1e-5, atol=1e-5)
    gradcheck(F.layer_norm, x, w, b)  # None stays in its place: a bias without a weight is the bias


def test_layer_norm_constant_row_is_finite():
    out = F.layer_norm(Tensor(np.full((2, 4), 3.0)), bias=Tensor(np.arange(4.0)))
    np.testing.assert_array_equal(out.data, np.tile(np.arange(4.0), (2, 1)))


def test_layer_norm_of_rows_whose_squares_overflow_float32():
    """Found in a review: a float32 row of magnitudes near 2e19 (D = 4, or a std of 3e17 over 4096
    features) had an Inf variance, and layer_norm returned zeros, output and gradient, with no
    warning even under np.errstate(all="raise"); a row whose mean overflows gave NaN. Such rows now
    agree with the float64 reference (math.fsum), their gradient with the float64 path's, and the
    other rows of the batch keep their bits."""
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal((1, 4096)) * 3e17).astype(np.float32)
    ordinary = rng.standard_normal((2, 4096)).astype(np.float32)
    # and (a review of that fix) rows whose pairwise sum is Inf - Inf, a NaN variance, and constant
    # huge rows, whose scaled variance is 0
    pairwise = (rng.standard_normal((1, 4096)) * 5e37).astype(np.float32)
    for rows in (np.array([[2e19, -2e19, 1e19, 0.0]], np.float32), np.array([[3e38, 3e38, 0, 0]], np.float32),
                 np.array([[3.4e38, -3.4e38, 1, 2], [1, 2, 3, 5]], np.float32), np.concatenate([ordinary, wide]),
                 pairwise, np.array([[3e38, 3e38, -3e38, -3e38, 0, 0, 0, 0]], np.float32),
                 np.array([[3e38] * 8, [-2e19] * 8, [3.0] * 8], np.float32)):
        x = Tensor(rows, requires_grad=True)
        g = rng.standard_normal(rows.shape).astype(np.float32)
        with np.errstate(all="raise"):
            out = F.layer_norm(x)
            out.backward(g)
        expected = layer_norm_reference(rows.astype(np.float64), 1.0, 0.0, 1e-5)
        np.testing.assert_allclose(out.data, expected, rtol=2e-6, atol=1e-6)
        x64 = Tensor(rows.astype(np.float64), requires_grad=True)
        F.layer_norm(x64).backward(g.astype(np.float64))
        np.testing.assert_allclose(x.grad, x64.grad, rtol=1e-5, atol=1e-45)
        assert np.abs(x.grad).max() > 0 and np.isfinite(out.data).all()
    alone = F.layer_norm(Tensor(ordinary)).data
    np.testing.assert_array_equal(F.layer_norm(Tensor(np.concatenate([ordinary, wide]))).data[:2], alone)


@pytest.mark.parametrize("eps, first", [(1e36, 1.2623888), (1e38, 1.069045)])
def test_layer_norm_of_rows_whose_squares_overflow_keeps_eps(eps, first):
    """A mutation test's find: the rows above scale eps by 1 / m**2 with the row (m its largest
    magnitude), which eps = 1e-5 never shows (far below float32's resolution there); an eps near the
    variance (4e38 / 2.5 here) does. Values and gradient against the float64 formula and path."""
    rows = np.array([[2e19, -2e19, 1e19, -1e19]], np.float32)
    x = Tensor(rows, requires_grad=True)
    g = np.array([[1.0, -2.0, 0.5, 3.0]], np.float32)
    with np.errstate(all="raise"):
        out = F.layer_norm(x, eps=eps)
        out.backward(g)
    expected = layer_norm_reference(rows.astype(np.float64), 1.0, 0.0, eps)
    np.testing.assert_allclose(out.data, expected, rtol=2e-6)
    assert out.data[0, 0] == pytest.approx(first, rel=1e-6)
    x64 = Tensor(rows.astype(np.float64), requires_grad=True)
    F.layer_norm(x64, eps=eps).backward(g.astype(np.float64))
    np.testing.assert_allclose(x.grad, x64.grad, rtol=1e-5, atol=1e-45)


def test_layer_norm_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"weight must have shape \(4,\)"):
        F.layer_norm(Tensor(np.ones((2, 4))), Tensor(np.ones(3)))
    with pytest.raises(ValueError, match="at least one axis"):
        F.layer_norm(Tensor(1.0))
    with pytest.raises(TypeError, match="layer_norm: eps must be a real number, got str"):
        F.layer_norm(Tensor(np.ones((2, 4))), eps="1e-5")


# ---- embedding -----------------------------------------------------------------------------------

def test_embedding_values_and_gradcheck():
    weight = param(6, 3)
    ids = np.array([[0, 5, 2], [2, 2, 1]])  # repeated ids must sum their gradients
    np.testing.assert_array_equal(F.embedding(ids, weight).data, weight.data[ids])
    gradcheck(lambda w: F.embedding(ids, w), weight)
    gradcheck(lambda w: F.embedding(Tensor(ids), w), weight)
    F.embedding(ids, weight).backward(np.ones((2, 3, 3)))
    np.testing.assert_array_equal(weight.grad[:, 0], [1, 1, 3, 0, 0, 1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_backward_is_add_at_bit_for_bit(dtype):
    # embedding's backward sums each id's rows in order, as np.add.at does; the rows mix
    # magnitudes 1e-30 to 1e30 and signed zeros, so that another order would change the bits
    rng = np.random.default_rng(3)
    # the grid's path: the default model's tokens and positions, random shapes; np.add.at's: one row
    # of one element, and (every fourth case) half the rows on one id, e.g. (300, 1000, 4)
    cases = [(40, 1024, 64), (32, 1024, 64), (1, 5, 1), (300, 1000, 4), (5, 0, 4), (3, 50, 1), (300, 64, 2)]
    cases += [(int(rng.integers(1, 80)), int(rng.integers(1, 2000)), int(rng.integers(1, 70))) for _ in range(40)]
    with default_dtype(dtype):
        for number, (num_rows, count, dim) in enumerate(cases):
            ids = rng.integers(0, num_rows, count)
            if number % 4 == 3:
                ids[rng.random(count) < 0.5] = num_rows // 2
                ids = ids.astype(np.uint8 if num_rows < 256 else np.int64)
            grads = rng.standard_normal((count, dim)) * rng.choice([1.0, 1e-30, 1e30], (count, 1))
            grads[rng.random((count, dim)) < 0.05] = -0.0
            grads = grads.astype(dtype)
            weight = Tensor(np.zeros((num_rows, dim)), requires_grad=True)
            F.embedding(ids.reshape(1, -1), weight).backward(grads.reshape(1, count, dim))
            expected = np.zeros((num_rows, dim), dtype=dtype)
            np.add.at(expected, ids.astype(np.intp), grads)
            assert weight.grad.dtype == dtype
            assert np.array_equal(weight.grad.view(np.uint8), expected.view(np.uint8)), (num_rows, count, dim)
    # and the sums themselves: integer-valued rows, exact in any order
    ids = np.array([3, 1, 3, 3, 0])
    weight = Tensor(np.zeros((5, 2)), requires_grad=True)
    F.embedding(ids, weight).backward(np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(weight.grad, [[8, 9], [2, 3], [0, 0], [10, 13], [0, 0]])


def test_embedding_with_no_features_or_no_ids():
    # dim 0: backward raised "cannot reshape array of size 0 into shape (0)"
    weight = param(5, 0)
    out = F.embedding(np.array([[1, 2, 2]]), weight)
    assert out.shape == (1, 3, 0)
    out.backward(np.zeros((1, 3, 0)))
    assert weight.grad.shape == (5, 0) and weight.grad.dtype == np.float32
    weight = param(5, 2)
    out = F.embedding(np.zeros((2, 0), dtype=np.int64), weight)
    assert out.shape == (2, 0, 2)
    out.backward(np.zeros((2, 0, 2)))
    np.testing.assert_array_equal(weight.grad, np.zeros((5, 2)))


def test_embedding_bad_ids_raise():
    weight = Tensor(np.ones((4, 2)))
    with pytest.raises(IndexError, match="id 4 is out of range for 4 embeddings"):
        F.embedding(np.array([0, 4]), weight)
    with pytest.raises(IndexError, match="id -1"):
        F.embedding(np.array([-1]), weight)
    with pytest.raises(TypeError, match="integer"):
        F.embedding(np.array([0.0, 1.0]), weight)


# ---- attention -----------------------------------------------------------------------------------

def attention_reference(q, k, v, causal, scale):
    """Vaswani et al. eq. 1 by explicit loops in float64."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(q.shape[:-2]):
        for i in range(q.shape[-2]):
            keys = range(k.shape[-2]) if not causal else range(min(i + 1, k.shape[-2]))
            logits = [scale * float(np.dot(q[idx][i], k[idx][j])) for j in keys]
            weights = softmax_reference(logits)
            out[idx][i] = sum(w * v[idx][j] for w, j in zip(weights, keys))
    return out


@pytest.mark.parametrize("causal, seq_q, seq_k, scale", [
    (False, 4, 4, None), (True, 4, 4, None), (False, 3, 5, 0.7), (True, 3, 5, None), (True, 5, 3, 2.0),
])
def test_attention_values_and_gradcheck(causal, seq_q, seq_k, scale):
    q, k, v = param(2, 2, seq_q, 3, seed=1), param(2, 2, seq_k, 3, seed=2), param(2, 2, seq_k, 4, seed=3)
    out = F.scaled_dot_product_attention(q, k, v, causal=causal, scale=scale)
    expected = attention_reference(as64(q), as64(k), as64(v), causal, scale if scale else 1 / math.sqrt(3))
    np.testing.assert_allclose(out.data, expected, rtol=1e-5, atol=1e-6)
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=causal, scale=scale), q, k, v)


def test_attention_with_dropout_gradcheck_and_determinism():
    q, k, v = param(1, 2, 4, 3, seed=1), param(1, 2, 4, 3, seed=2), param(1, 2, 4, 3, seed=3)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.4, rng=np.random.default_rng(7))

    gradcheck(attend, q, k, v)
    assert np.array_equal(attend(q, k, v).data, attend(q, k, v).data)
    assert not np.array_equal(attend(q, k, v).data, F.scaled_dot_product_attention(q, k, v, causal=True).data)


def test_attention_dropout_scales_the_kept_probabilities():
    # with v the identity, the output row i is the dropped probability row P'_i itself; inverted
    # dropout (torch's scaled_dot_product_attention too) keeps P_ij / (1 - p) or sets it to 0.
    # P comes from the explicit float64 loops of attention_reference.
    p, seq = 0.4, 8
    q, k = param(2, 4, seq, 3, seed=1), param(2, 4, seq, 3, seed=2)
    v = Tensor(np.broadcast_to(np.eye(seq), (2, 4, seq, seq)))
    out = F.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=p, rng=np.random.default_rng(7)).data
    probs = attention_reference(as64(q), as64(k), np.eye(seq) + np.zeros((2, 4, 1, 1)), True, 1 / math.sqrt(3))
    kept = out != 0
    np.testing.assert_allclose(out[kept], probs[kept] / (1 - p), rtol=1e-5)
    allowed = np.broadcast_to(np.tril(np.ones((seq, seq), dtype=bool)), out.shape)  # causal: j <= i
    assert not np.any(kept & ~allowed)
    # 288 allowed entries, each dropped with probability 0.4: std of the fraction 0.029
    assert abs(1 - kept[allowed].mean() - p) < 0.12


@pytest.mark.parametrize("needs_grad", ["q", "k", "v", "q k", "k v", "q v"])
def test_attention_gradcheck_when_only_some_inputs_need_grad(needs_grad):
    q, k, v = param(2, 4, 3, seed=1), param(2, 5, 3, seed=2), param(2, 5, 2, seed=3)
    for name, t in zip("qkv", (q, k, v)):
        t.requires_grad = name in needs_grad.split()
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True), q, k, v)


def test_attention_gradcheck_with_one_tensor_as_q_k_and_v():
    x = param(2, 4, 3)  # self-attention without projections: the three gradients add up in x
    gradcheck(lambda t: F.scaled_dot_product_attention(t, t, t, causal=True), x)
    gradcheck(lambda t: F.scaled_dot_product_attention(t, t, t), x)


def test_attention_on_strided_views():
    # heads split from a fused projection arrive as non-contiguous views
    qkv = param(2, 5, 3, 2, 4)  # (batch, seq, 3, heads, head_dim)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    assert not q.data.flags.c_contiguous
    out = F.scaled_dot_product_attention(q, k, v, causal=True)
    np.testing.assert_allclose(out.data, attention_reference(as64(q), as64(k), as64(v), True, 0.5), rtol=1e-5,
                               atol=1e-6)
    gradcheck(lambda t: F.scaled_dot_product_attention(
        *(t[:, :, i].transpose(0, 2, 1, 3) for i in range(3)), causal=True), qkv)


def test_attention_bad_inputs_raise():
    q = Tensor(np.ones((1, 2, 4, 3)))
    with pytest.raises(ValueError, match="incompatible shapes"):
        F.scaled_dot_product_attention(q, Tensor(np.ones((1, 2, 4, 5))), q)
    with pytest.raises(ValueError, match="at least 2-D"):
        F.scaled_dot_product_attention(Tensor(np.ones(3)), q, q)
    with pytest.raises(TypeError, match="np.random.Generator"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError, match="dropout_p must be a real number, got NoneType"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=None)
    with pytest.raises(TypeError, match="scale must be a real number, got str"):
        F.scaled_dot_product_attention(q, q, q, scale="0.5")
    with pytest.raises(ValueError, match="scale must be finite, got nan"):  # NaN would fill the output
        F.scaled_dot_product_attention(q, q, q, scale=float("nan"))


# ---- dropout -------------------------------------------------------------------------------------

def test_dropout_statistics_scale_and_determinism():
    x = Tensor(np.ones((200, 500)))
    y = F.dropout(x, 0.25, np.random.default_rng(0))
    kept = y.data != 0
    assert abs(kept.mean() - 0.75) < 0.01  # 100,000 Bernoulli draws: std of the mean 0.0014
    np.testing.assert_array_equal(y.data[kept], np.float32(1 / 0.75))
    again = F.dropout(x, 0.25, np.random.default_rng(0))
    assert np.array_equal(y.data, again.data)  # same seed, bit-identical
    assert not np.array_equal(y.data, F.dropout(x, 0.25, np.random.default_rng(1)).data)


def test_dropout_gradcheck_and_special_cases():
    x = param(4, 5)
    gradcheck(lambda t: F.dropout(t, 0.3, np.random.default_rng(3)), x)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert F.dropout(x, 0.5, rng, training=False) is x
    assert F.dropout(x, 0.0, rng) is x
    assert rng.bit_generator.state == state  # nothing drawn
    np.testing.assert_array_equal(F.dropout(x, 1.0, rng).data, np.zeros((4, 5)))
    # attention's dropout_p=0 with an rng drew a probabilities-shaped array and kept every element,
    # shifting every later draw from a shared generator (a review's find): it draws nothing too
    q = param(1, 1, 4, 8)
    plain = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
    with_rng = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0, rng=rng)
    assert rng.bit_generator.state == state and np.array_equal(plain.data, with_rng.data)
    with pytest.raises(TypeError, match="Generator"):   # (a given rng is still checked)
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.0, rng=0)


def test_dropout_bad_inputs_raise():
    x = Tensor(np.ones(3))
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        F.dropout(x, 1.5, np.random.default_rng(0))
    with pytest.raises(TypeError, match="np.random.Generator"):
        F.dropout(x, 0.5, 0)
    with pytest.raises(TypeError, match="np.random.Generator"):
        F.dropout(x, 0.5, np.random.RandomState(0))
    for bad in ("0.5", None, True):
        with pytest.raises(TypeError, match="dropout: p must be a real number"):
            F.dropout(x, bad, np.random.default_rng(0))


# ---- joining and splitting -----------------------------------------------------------------------

def test_split_sizes_must_be_ints():
    # int() cut [1.5, 2.5] down to [1, 2], which added up to the length 3: chunks of the wrong sizes
    with pytest.raises(TypeError, match=r"split: split_size_or_sections must be an int or a sequence of ints, "
                                        r"got list \[1.5, 2.5\]"):
        F.split(Tensor(np.ones(3)), [1.5, 2.5])
    assert [c.shape for c in F.split(Tensor(np.ones(3)), [np.int64(1), 2])] == [(1,), (2,)]
    assert [c.shape for c in F.split(Tensor(np.ones(3)), np.array([2, 1]))] == [(2,), (1,)]
    assert [c.shape for c in F.split(Tensor(np.ones(3)), np.int64(2))] == [(2,), (1,)]


@pytest.mark.parametrize("sections, got", [
    (2.0, "float 2.0"),      # was "'float' object is not iterable"
    (True, "bool True"),     # a bool is not a chunk size
    (None, "NoneType None"),
    ("23", "str '23'"),
    ((2, 3.0), r"tuple \(2, 3.0\)"),
    ([True, 4], r"list \[True, 4\]"),
])
def test_split_size_or_sections_of_the_wrong_type(sections, got):
    x = Tensor(np.ones((2, 3, 4, 5)))
    with pytest.raises(TypeError, match=f"split: split_size_or_sections must be an int or a sequence of ints, "
                                        f"got {got}"):
        F.split(x, sections, axis=3)


@pytest.mark.parametrize("sections, message", [
    (0, "must be a positive chunk size, got 0"),
    (-2, "must be a positive chunk size, got -2"),
    ([2, 2], r"\[2, 2\] must be >= 0 and add up to the axis length 5"),
    ([6, -1], r"\[6, -1\] must be >= 0 and add up to the axis length 5"),
])
def test_split_size_or_sections_of_the_wrong_value(sections, message):
    with pytest.raises(ValueError, match=f"split: split_size_or_sections {message}"):
        F.split(Tensor(np.ones((2, 5))), sections, axis=1)


@pytest.mark.parametrize("call, message", [
    (lambda x: F.softmax(x, axis=1.0), "softmax: axis must be an int, got float 1.0"),
    (lambda x: F.log_softmax(x, axis=True), "log_softmax: axis must be an int, got bool True"),
    (lambda x: F.split(x, 2, axis=3.0), "split: axis must be an int, got float 3.0"),
    (lambda x: F.concat([x, x], axis=None), "concat: axis must be an int, got NoneType None"),
    (lambda x: F.stack([x, x], axis="0"), "stack: axis must be an int, got str '0'"),
])
def test_axis_of_the_wrong_type_is_a_type_error(call, message):
    # was ValueError "axis 1.0 is out of range"
    with pytest.raises(TypeError, match=message):
        call(Tensor(np.ones((2, 3, 4, 5))))
    assert F.softmax(Tensor(np.ones((2, 3))), axis=np.int64(0)).shape == (2, 3)


def test_concat_stack_split_values_and_gradcheck():
    a, b, c = param(2, 3, seed=1), param(2, 1, seed=2), param(2, 3, seed=3)
    np.testing.assert_array_equal(F.concat([a, b, c], axis=1).data, np.concatenate([a.data, b.data, c.data], 1))
    gradcheck(lambda *t: F.concat(t, axis=-1), a, b, c)
    np.testing.assert_array_equal(F.stack([a, c], axis=1).data, np.stack([a.data, c.data], 1))
    gradcheck(lambda *t: F.stack(t, axis=1), a, c)
    x = param(7, 2)
    parts = F.split(x, 3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    gradcheck(lambda t: F.split(t, 3), x)  # several outputs
    gradcheck(lambda t: F.split(t, [1, 0, 1], axis=1), x)
    # round trip
    np.testing.assert_array_equal(F.concat(F.split(x, [2, 5]), axis=0).data, x.data)


@pytest.mark.parametrize("op, axis", [("concat", 0), ("concat", 1), ("stack", 0), ("stack", -1)])
def test_concat_and_stack_along_other_axes_gradcheck(op, axis):
    shape_b = [2, 3, 2]
    if op == "concat":
        shape_b[axis] = 1  # a different length along the joined axis
    a, b = param(2, 3, 2, seed=1), param(*shape_b, seed=2)
    join, reference = (F.concat, np.concatenate) if op == "concat" else (F.stack, np.stack)
    np.testing.assert_array_equal(join([a, b, a], axis=axis).data, reference([a.data, b.data, a.data], axis=axis))
    gradcheck(lambda a, b: join([a, b, a], axis=axis), a, b)  # a joined twice: its gradients add


def test_concat_stack_split_bad_inputs_raise():
    with pytest.raises(ValueError, match="do not fit"):
        F.concat([Tensor(np.ones((2, 3))), Tensor(np.ones((3, 3)))], axis=1)
    with pytest.raises(ValueError, match="same shape"):
        F.stack([Tensor(np.ones(2)), Tensor(np.ones(3))])
    with pytest.raises(ValueError, match="add up"):
        F.split(Tensor(np.ones(5)), [2, 2])
    with pytest.raises(ValueError, match="positive"):
        F.split(Tensor(np.ones(5)), 0)
    with pytest.raises(ValueError, match="at least one"):
        F.concat([])
    with pytest.raises(ValueError, match="out of range"):
        F.softmax(Tensor(np.ones(3)), axis=1)


# ---- the graph of a small transformer layer -------------------------------------------------------

def test_pre_norm_block_gradcheck():
    """All the ops together, as the GPT uses them: one pre-norm attention + MLP block."""
    rng = np.random.default_rng(0)
    batch, seq, d, heads = 2, 3, 4, 2
    tensors = [Tensor(rng.standard_normal(s) * 0.5, requires_grad=True) for s in
               [(batch, seq, d), (3 * d, d), (3 * d,), (d, d), (4 * d, d), (d, 4 * d), (d,), (d,)]]

    def block(x, w_qkv, b_qkv, w_proj, w_fc, w_out, ln_w, ln_b):
        q, k, v = (t.reshape(batch, seq, heads, d // heads).transpose(0, 2, 1, 3)
                   for t in F.split(F.linear(F.layer_norm(x, ln_w, ln_b), w_qkv, b_qkv), d, axis=-1))
        y = F.scaled_dot_product_attention(q, k, v, causal=True).transpose(0, 2, 1, 3).reshape(batch, seq, d)
        h = x + F.linear(y, w_proj)
        return h + F.linear(F.gelu(F.linear(F.layer_norm(h, ln_w, ln_b), w_fc)), w_out)

    gradcheck(block, *tensors)


def test_split_of_an_empty_axis_is_one_empty_chunk():
    chunks = F.split(Tensor(np.zeros((0, 3), np.float32)), 2)
    assert [chunk.shape for chunk in chunks] == [(0, 3)]  # as torch.split
