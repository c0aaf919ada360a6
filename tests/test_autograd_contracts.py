"""Contracts of the autograd engine, the ops, the modules, the optimizers and the unit-scaled ops
that the rest of the suite left unpinned (found by mutation testing of those modules).

Engine (`minifp8.autograd`):

* gradients accumulate into a retained intermediate's ``.grad`` as into a leaf's: a writable array
  of its own, never the caller's ``grad=`` array nor a read-only broadcast view;
* a view of a view shares its base's version counter, so an in-place write through it makes graphs
  that saved the base refuse ``backward``;
* a gradient with fewer axes than its parent is refused with an error naming the op;
* ``backward(grad=...)`` converts ``grad`` to the tensor's dtype before any op sees it, and
  ``backward()`` without ``grad`` needs exactly one element (an empty tensor is refused);
* gradient rows summed by id equal ``np.add.at``'s sequential sums bit for bit, also for a table of
  one row of one element.

Documented ranges and rules, each end checked: ``layer_norm``'s ``eps`` may be 0, a ``std`` of 0
gives zero weights, AdamW's ``eps`` may be 0, attention's ``dropout_p`` may not be 1, a u-muP
``mult`` may be ``2**-30`` or ``2**30`` (`minifp8.unit.MULT_RANGE`), an optimizer state's ``step``
may not be negative, a GPT sequence may not be empty; dropout's keep mask is the documented draw
``rng.random(shape, dtype=float32) >= p``; attention's softmax is max-shifted (huge logits stay
finite); ``load_state_dict`` refuses a same-size array of another
shape. References are NumPy or ``math`` evaluations of the documented formulas, never our output.
"""
import math
import warnings

import numpy as np
import pytest

import minifp8.functional as F
import minifp8.unit as U
from minifp8 import nn
from minifp8.autograd import Tensor, make_op
from minifp8.model import GPT, GPTConfig
from minifp8.optim import AdamW
from minifp8.testing import gradcheck


# ---- the engine -----------------------------------------------------------------------------------

def test_retained_intermediate_gradient_accumulates_over_two_backward_calls():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = Tensor([0.5, 0.5, 0.5], requires_grad=True)
    y = (x * 1.0).retain_grad()
    loss = (y + w).sum()  # add hands one gradient array to both of its parents
    loss.backward()
    loss.backward()
    np.testing.assert_array_equal(y.grad, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(w.grad, [2.0, 2.0, 2.0])
    assert y.grad.flags.writeable


def test_retained_intermediate_gradient_is_not_the_callers_grad_array():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = (x * 1.0).retain_grad()
    z = y + Tensor([0.0, 0.0], requires_grad=True)
    upstream = np.array([3.0, 4.0], dtype=np.float32)
    z.backward(upstream)
    z.backward(upstream)
    np.testing.assert_array_equal(upstream, [3.0, 4.0])  # the caller's array is left alone
    assert not np.shares_memory(y.grad, upstream)
    np.testing.assert_array_equal(y.grad, [6.0, 8.0])


def test_a_write_through_a_view_of_a_view_is_seen_by_graphs_that_saved_the_base():
    x = Tensor(np.linspace(-1.0, 1.0, 6), requires_grad=True)
    a = x.exp()  # exp's backward uses its output a
    view_of_view = a.reshape(2, 3)[0]
    view_of_view.data[...] = 0.0
    view_of_view.bump_version()
    with pytest.raises(RuntimeError, match="changed in place"):
        a.sum().backward()
    assert x.grad is None


def test_a_gradient_with_fewer_axes_than_its_parent_is_refused_naming_the_op():
    parent = Tensor(np.ones((3, 1)), requires_grad=True)
    out = make_op(parent.data * 2.0, (parent,), lambda g: (np.ones(3, dtype=np.float32),), name="short_grad")
    with pytest.raises(ValueError, match=r"backward of op 'short_grad' returned a gradient of shape \(3,\)"):
        out.backward(np.ones((3, 1)))


@pytest.mark.parametrize("grad_dtype", [np.float64, np.int64])
def test_backward_converts_grad_to_the_tensors_dtype_before_the_ops_see_it(grad_dtype):
    x = Tensor([1.0, 2.0], requires_grad=True)
    seen = []

    def backward(g):
        seen.append(g.dtype)
        return (g,)

    y = make_op(x.data * 1.0, (x,), backward, name="record")
    y.backward(np.array([1, 2], dtype=grad_dtype))
    assert seen == [np.dtype(np.float32)]
    assert x.grad.dtype == np.float32


def test_backward_without_grad_refuses_an_empty_tensor():
    """The implicit gradient 1 exists only for a one-element tensor (a scalar loss), not for zero elements."""
    y = Tensor(np.zeros(0), requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"needs a one-element tensor \(a scalar loss\), got shape \(0,\)"):
        y.backward()


def test_gradient_rows_summed_by_id_match_add_at_for_a_one_element_table():
    """A table of one row of one element, every id 0: the gradient is the sequential sum that
    ``np.add.at`` computes, bit for bit (not NumPy's pairwise sum along a contiguous axis)."""
    rng = np.random.default_rng(3)
    g = (rng.standard_normal(4096) * 10.0 ** rng.integers(-4, 5, 4096)).astype(np.float32)
    weight = Tensor(np.ones((1, 1)), requires_grad=True)
    ids = np.zeros(4096, dtype=np.int64)
    F.embedding(ids, weight).backward(g.reshape(4096, 1))
    expected = np.zeros((1, 1), dtype=np.float32)
    np.add.at(expected, ids, g.reshape(4096, 1))
    assert weight.grad.tobytes() == expected.tobytes()


# ---- ops and modules: documented boundaries ---------------------------------------------------------

def test_layer_norm_accepts_eps_zero():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5))
    expected = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)  # biased variance, no eps
    out = F.layer_norm(Tensor(x), eps=0.0)
    np.testing.assert_allclose(out.data, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.LayerNorm(5, eps=0)(Tensor(x)).data, expected, rtol=1e-5, atol=1e-6)


def test_layer_norm_eps_zero_gives_a_constant_row_nan_whatever_its_magnitude():
    """A review's find: with eps = 0 a constant row of 3.0 gave NaN with divide and invalid warnings, one of
    3e38 gave outputs 0 and gradients +-Inf. Now every constant row gives NaN quietly (as torch), other rows
    are untouched, and eps > 0 still gives a constant row zeros."""
    rows = np.array([[3.0] * 4, [2e19] * 4, [3e38] * 4, [1.0, 2.0, 3.0, 4.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = Tensor(rows, requires_grad=True)
        out = F.layer_norm(x, eps=0.0)
        out.backward(np.tile(np.array([1.0, 2.0, 3.0, 4.0], np.float32), (4, 1)))
        with_eps = F.layer_norm(Tensor(rows[:3]), eps=1e-5).data
    assert np.isnan(out.data[:3]).all() and np.isnan(x.grad[:3]).all()
    assert np.isfinite(out.data[3]).all() and np.isfinite(x.grad[3]).all()
    np.testing.assert_array_equal(with_eps, np.zeros((3, 4)))


def test_mean_over_an_empty_axis_is_refused():
    """A review's find: it gave NaN with NumPy's 'Mean of empty slice' warnings, where every other reduction
    over nothing (softmax, layer_norm, cross_entropy) is a ValueError."""
    x = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    for axis, named in ((0, "axis 0"), (None, "axis 0"), ((0, 1), "axis 0")):
        with pytest.raises(ValueError, match=rf"^mean: {named} of shape \(0, 3\) is empty: the mean of no values"):
            x.mean(axis=axis)
    assert x.mean(axis=1).shape == (0,)  # (over the 3: no empty mean)
    with pytest.raises(ValueError, match=r"^mean: axis \(0, 2\) of shape \(0, 2, 0\) is empty"):
        Tensor(np.zeros((0, 2, 0), np.float32)).mean()


def test_a_numpy_array_exponent_is_a_constant_tensor():
    """A review's find: t ** ndarray was a TypeError, though every other binary op (and ndarray ** t) takes
    NumPy operands. It now equals t ** Tensor(array), value and gradient."""
    exponent = np.array([2.0, 3.0], np.float32)
    for given in (exponent, np.array(2.0, np.float32)):
        a, b = Tensor([1.5, 2.0], requires_grad=True), Tensor([1.5, 2.0], requires_grad=True)
        (a ** given).sum().backward()
        (b ** Tensor(given)).sum().backward()
        assert np.array_equal((a ** given).data, (b ** Tensor(given)).data) and np.array_equal(a.grad, b.grad)


@pytest.mark.parametrize("base, exponent", [
    ([[1.5, -2.0], [-0.7, 0.9]], [2.0, 3.0]),  # integer exponents: bases of both signs, broadcast over rows
    ([[1.5, -2.0], [-0.7, 0.9]], [-1.0, 4.0]),
    ([[1.5, -2.0], [-0.7, 0.9]], -2.0),  # a 0-d array
    ([[1.5, 2.0], [0.7, 0.9]], [0.5, -1.5]),  # non-integer exponents: real powers of positive bases only
    ([[1.5, 2.0], [0.7, 0.9]], 2.5),
], ids=["int-signed", "int-negative-signed", "0d-int-signed", "fractional-positive", "0d-fractional-positive"])
def test_a_numpy_array_exponent_differentiates_the_base(base, exponent):
    """``t ** ndarray`` against float64 central differences (`minifp8.testing.gradcheck`), the exponent a
    constant: not a comparison of the op with itself (``t ** ndarray`` is ``t ** Tensor(ndarray)``). The
    value is NumPy's power."""
    exponent = np.array(exponent, np.float32)
    t = Tensor(np.array(base, np.float32), requires_grad=True)
    out = t ** exponent
    np.testing.assert_array_equal(out.data, np.power(np.array(base, np.float32), exponent))
    assert out.dtype == np.float32 and out.shape == t.shape
    gradcheck(lambda x: x ** exponent, t)


def test_dropout_keep_mask_is_the_documented_draw():
    """``F.dropout``'s keep mask is ``rng.random(x.shape, dtype=float32) >= p`` (its docstring), so a run
    is reproducible from the seed alone; the kept elements are scaled by ``1 / (1 - p)``."""
    p, shape = 0.3, (4, 50)
    keep = np.random.default_rng(11).random(shape, dtype=np.float32) >= p
    out = F.dropout(Tensor(np.ones(shape)), p, np.random.default_rng(11))
    np.testing.assert_array_equal(out.data != 0, keep)
    np.testing.assert_allclose(out.data[keep], 1.0 / (1.0 - p), rtol=1e-7)


def test_std_zero_initialises_all_zero_weights():
    """``std`` must be >= 0 (the docstrings): 0 gives zeros, N(0, 0)."""
    embedding = nn.Embedding(4, 3, rng=np.random.default_rng(0), std=0.0)
    linear = nn.Linear(3, 2, rng=np.random.default_rng(0), std=0.0)
    np.testing.assert_array_equal(embedding.weight.data, np.zeros((4, 3)))
    np.testing.assert_array_equal(linear.weight.data, np.zeros((2, 3)))


def test_adamw_with_eps_zero_takes_a_step_of_lr_times_the_sign():
    """eps must be >= 0 and finite. With eps 0 and no decay, the first AdamW step is
    ``m_hat / sqrt(v_hat) = g / |g|`` times lr (the update rule in `minifp8.optim.AdamW`)."""
    p = nn.Parameter(np.array([1.0, -2.0, 0.5]))
    p.grad = np.array([0.25, -3.0, 1e-3], dtype=np.float32)
    optimizer = AdamW([p], lr=0.125, eps=0.0, weight_decay=0.0)
    optimizer.step()
    np.testing.assert_allclose(p.data, np.array([1.0, -2.0, 0.5]) - 0.125 * np.sign([0.25, -3.0, 1e-3]), rtol=1e-6)


def test_optimizer_load_state_dict_refuses_a_negative_step():
    p = nn.Parameter(np.ones(2))
    p.grad = np.ones(2, dtype=np.float32)
    optimizer = AdamW([p])
    optimizer.step()
    state = optimizer.state_dict()
    state["state"][0]["step"] = -1
    with pytest.raises(ValueError, match="'step' of parameter 0 must be an int >= 0, got -1"):
        optimizer.load_state_dict(state)
    assert optimizer.state[p]["step"] == 1


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_gpt_refuses_an_empty_sequence(family):
    config = GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4, family=family)
    model = GPT(config, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"sequence length 0 must be in \[1, block_size=4\]"):
        model(np.zeros((2, 0), dtype=np.int64))


@pytest.mark.parametrize("ids, error, message", [
    (np.zeros((2, 3)), TypeError, "GPT: ids must be an integer array, got dtype float64"),
    (np.zeros(3, dtype=np.int64), ValueError, r"GPT: ids must have shape \(batch, seq\), got shape \(3,\)"),
    (np.zeros((1, 2, 3), dtype=np.int32), ValueError, r"GPT: ids must have shape \(batch, seq\), got shape \(1, 2, 3\)"),
])
def test_gpt_names_a_wrong_dtype_and_a_wrong_shape_apart(ids, error, message):
    """Found in a review: both were one TypeError naming dtype and shape together."""
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4), rng=np.random.default_rng(0))
    with pytest.raises(error, match=message):
        model(ids)


def test_attention_with_huge_logits_matches_a_max_shifted_softmax():
    """Logits far beyond exp's range (here above 5000) still give the softmax's value: the reference
    is the max-shifted softmax in float64, ``exp(s - max s) / sum``."""
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 4, 8)) * 30.0
    logits = q @ k.T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    expected = (probs / probs.sum(axis=1, keepdims=True)) @ v
    out = F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), scale=1.0)
    assert np.abs(logits).max() > 710.0  # e**710 overflows even float64
    np.testing.assert_allclose(out.data, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attention", [F.scaled_dot_product_attention, U.scaled_dot_product_attention])
def test_attention_refuses_dropout_p_one(attention):
    q = Tensor(np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        attention(q, q, q, dropout_p=1.0, rng=np.random.default_rng(0))


def test_load_state_dict_refuses_a_same_size_array_of_another_shape():
    layer = nn.Linear(3, 2, rng=np.random.default_rng(0))
    before = layer.weight.data.copy()
    state = layer.state_dict()
    state["weight"] = np.zeros(6)
    with pytest.raises(ValueError, match=r"'weight' has shape \(6,\), the parameter has \(2, 3\)"):
        layer.load_state_dict(state)
    assert layer.weight.shape == (2, 3)
    np.testing.assert_array_equal(layer.weight.data, before)


# ---- unit scaling: documented ranges ------------------------------------------------------------------

def test_unit_gelu_accepts_mult_at_both_ends_of_the_documented_range():
    """``mult`` in [2**-30, 2**30] (`minifp8.unit.MULT_RANGE`, both ends included). At the ends the
    u-muP model is at its limits (``U.gelu``'s docstring): ``gelu(mult x) / mult`` is ``x / 2`` scaled
    by 2 for tiny mult, and ``relu(x)`` scaled by ``sqrt(2 / (1 - 1/pi))`` for huge mult."""
    x = np.array([-2.0, -0.5, 0.25, 1.0, 3.0])
    tiny = U.gelu(Tensor(x), mult=2.0 ** -30)
    np.testing.assert_allclose(tiny.data, x, rtol=1e-6)
    huge = U.gelu(Tensor(x), mult=2.0 ** 30)
    np.testing.assert_allclose(huge.data, np.maximum(x, 0.0) * math.sqrt(2.0 / (1.0 - 1.0 / math.pi)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"mult must be in \[2\*\*-30, 2\*\*30\]"):
        U.gelu(Tensor(x), mult=2.0 ** 30 * (1 + 2.0 ** -52))


@pytest.mark.parametrize("kind", ["ndarray", "list", "Tensor", "tuple of arrays"])
def test_indexing_keeps_its_own_copy_of_the_index_for_backward(kind):
    """x[ids] kept the caller's ids by reference: refilling them before backward (a data loader
    reusing its batch buffer) sent the gradient to other rows, with no refusal (found by a code
    review: [2, 1, 0] came out [0, 0, 3]). The gradient is that of the index used forward."""
    x = Tensor(np.arange(1, 7, dtype=np.float32).reshape(3, 2), requires_grad=True)
    rows, columns = np.array([0, 0, 1]), np.array([1, 1, 0])
    index = {"ndarray": rows, "list": [0, 0, 1], "Tensor": Tensor(rows), "tuple of arrays": (rows, columns)}[kind]
    y = x[index].sum()
    if kind == "list":
        index[:] = [2, 2, 2]
    elif kind == "Tensor":
        index.data[:] = 2
        index.bump_version()
    else:
        rows[:], columns[:] = 2, 0
    y.backward()
    expected = [[0, 2], [1, 0], [0, 0]] if kind == "tuple of arrays" else [[2, 2], [1, 1], [0, 0]]
    np.testing.assert_array_equal(x.grad, np.array(expected, np.float32))


def test_float64_data_beyond_float32_is_refused_where_a_tensor_stores_float32():
    """Tensor(np.array([1e300, 2.0])) held [inf, 2.0], and t.data = np.array([1e39]) [inf], without a word."""
    from minifp8.autograd import default_dtype
    with pytest.raises(ValueError, match=r"Tensor data holds finite values beyond float32's range .* e\.g\. 1e\+300"):
        Tensor(np.array([1e300, 2.0]))
    t = Tensor(np.ones(1, np.float32))
    with pytest.raises(ValueError, match="beyond float32's range"):
        t.data = np.array([1e39])
    assert t.data[0] == 1.0
    assert np.isinf(Tensor(np.array([np.inf, 1.0])).data[0])  # (Inf is a value: kept)
    with default_dtype(np.float64):
        assert Tensor(np.array([1e300])).data[0] == 1e300


def test_an_operand_or_output_gradient_beyond_float32_is_refused_where_the_tensor_is_float32():
    """A review's find, after the test above: t * np.array([1e300, 1.0]) gave [inf, 2], t + 1e39 [inf, inf],
    and backward(grad=[1e300, 1]) an Inf gradient, each with a RuntimeWarning only."""
    from minifp8.autograd import default_dtype
    t = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    for call in (lambda: t * np.array([1e300, 1.0]), lambda: t + 1e39, lambda: 1e39 - t, lambda: t / -1e39):
        with pytest.raises(ValueError, match=r"^the other operand holds finite values beyond float32's range .* "
                                             r"e\.g\. -?1e\+(300|39): the op works in float32"):
            call()
    y = t * 2.0
    with pytest.raises(ValueError, match=r"^backward\(grad=\.\.\.\) holds finite values beyond float32's range"):
        y.backward(np.array([1e300, 1.0]))
    assert t.grad is None
    assert np.isinf((t + np.inf).data).all() and (t * 1e-50).data.tolist() == [0.0, 0.0]  # (Inf a value; 0 a rounding)
    y.backward(np.array([np.inf, 1.0]))
    assert t.grad.tolist() == [np.inf, 2.0]
    with default_dtype(np.float64):
        u = Tensor(np.array([1.0]), requires_grad=True)
        y = u * 1e300
        y.backward(np.array([1e-290]))
        assert y.data[0] == 1e300 and u.grad[0] == pytest.approx(1e10)


@pytest.mark.parametrize("a, b, g", [(1e25, 1e5, 1e20), (1e-38, 1e-18, 1e-30), (1e-30, 1e-10, 1e30),
                                     (1e38, 1e20, 1e-30)], ids=["overflow", "underflow", "mirror-1", "mirror-2"])
def test_the_divisors_gradient_is_a_float32_number_where_the_true_one_is(a, b, g):
    """A review's find: d(a/b)/db was -(g * (a/b)) / b, whose g * (a/b) overflowed to -inf (or underflowed
    to -0) where -g a / b^2 (-1e35, -1e-32) is a float32 number; and (a review of that fix) the order
    -(g / b) * (a / b) failed the mirror cases (-1e20 and -1e-32 gave -inf and -0). It is float64 now."""
    left = Tensor(np.array([a], np.float32), requires_grad=False)
    right = Tensor(np.array([b], np.float32), requires_grad=True)
    (left / right).backward(np.array([g], np.float32))
    exact = -float(np.float32(g)) * float(np.float32(a)) / float(np.float32(b)) ** 2
    assert right.grad.dtype == np.float32 and right.grad[0] == pytest.approx(exact, rel=1e-6, abs=0.0)


def test_equality_iteration_and_numpy_conversion_of_a_tensor_are_never_silently_wrong():
    """Found by a review: ``t == 0.0`` gave one False (identity), not a mask; ``list(Tensor(3.0))`` gave [];
    ``np.asarray(t)`` an object array of 0-d Tensors. Hashing stays by identity, and so does list membership
    of a tensor that comes before any other (Python tries identity before ==; past another Tensor, == raises)."""
    t = Tensor(np.array([0.0, 1.0, 2.0], np.float32), requires_grad=True)
    for compare in (lambda: t == 0.0, lambda: t != 0.0, lambda: t == t.detach(), lambda: 0.0 == t):
        with pytest.raises(TypeError, match="on a minifp8 Tensor is not elementwise: compare the arrays, .data"):
            compare()
    assert t == t and not (t != t) and t in [t] and {t: 1}[t] == 1
    with pytest.raises(TypeError, match="not elementwise"):
        _ = t in [t.detach(), t]
    with pytest.raises(TypeError, match="iteration over a 0-d Tensor"):
        list(Tensor(np.float32(3.0)))
    rows = list(Tensor(np.arange(6.0).reshape(3, 2), requires_grad=True))
    assert [row.data.tolist() for row in rows] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    for convert in (np.asarray, np.array, np.stack):  # (ufuncs already refused: __array_ufunc__ = None)
        with pytest.raises(TypeError, match="a minifp8 Tensor is not an array: pass its values, .data"):
            convert(t)
    params = [t, Tensor(np.ones(2, np.float32), requires_grad=True)]  # an optimizer's bookkeeping
    AdamW(params, lr=0.1)


def test_gradcheck_runs_whatever_the_callers_grad_mode_and_default_dtype():
    """Inside no_grad() every analytic gradient read 0 and the report blamed the backward; inside
    default_dtype(np.float64) the float32 run made float64 tensors and the report blamed an op."""
    from minifp8 import testing
    from minifp8.autograd import default_dtype, no_grad
    x = Tensor(np.float32([1.0, 2.0, 3.0]), requires_grad=True)
    with no_grad(), pytest.raises(RuntimeError, match=r"gradcheck: called inside no_grad\(\)"):
        testing.gradcheck(lambda a: a * a, x)
    with default_dtype(np.float64):
        assert testing.gradcheck(lambda a: a * a + 1.0, x).passed
    assert x.data.dtype == np.float32 and x.grad is None
