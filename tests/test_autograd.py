"""The autograd engine: operators against float64 finite differences, graph semantics, errors."""
import math
import sys
import warnings

import numpy as np
import pytest

from minifp8.autograd import Tensor, default_dtype, get_default_dtype, is_grad_enabled, make_op, matmul, no_grad
from minifp8.testing import gradcheck


def param(*shape, seed=0, low=None):
    """A float32 leaf that requires grad, standard normal (or uniform in [low, low + 1])."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape) if low is None else low + rng.random(shape)
    return Tensor(data, requires_grad=True)


# ---- gradcheck of every operator, with broadcasting ---------------------------------------------

BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1, 4), (2, 4)), ((4,), (2, 3, 4)), ((2, 3), ()), ((1,), (3, 1))]


@pytest.mark.parametrize("shape_a, shape_b", BINARY_SHAPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_ops_gradcheck_with_broadcasting(op, shape_a, shape_b):
    a, b = param(*shape_a, seed=1), param(*shape_b, seed=2, low=1.0 if op == "div" else None)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
          "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    report = gradcheck(fn, a, b)
    assert report.passed and len(report.inputs) == 2
    assert a.grad is None and b.grad is None  # gradcheck restores the inputs


def test_operators_with_constants_and_reflected_forms():
    x = param(2, 3, low=0.5)
    c = np.arange(1.0, 4.0)  # a float64 ndarray constant broadcast along rows
    gradcheck(lambda x: 2.0 + x, x)
    gradcheck(lambda x: 2.0 - x, x)
    gradcheck(lambda x: 3 * x, x)
    gradcheck(lambda x: 1.5 / x, x)
    gradcheck(lambda x: -x, x)
    gradcheck(lambda x: x * c + c / x - c, x)
    gradcheck(lambda x: c * x, x)
    gradcheck(lambda x: c - x, x)
    assert (c + x).dtype == np.float32  # the float64 constant does not promote the graph


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1.5])
def test_pow_scalar_exponent_gradcheck(exponent):
    x = param(3, 2, low=0.5)
    gradcheck(lambda x: x ** exponent, x)


def test_pow_tensor_exponent_and_rpow_gradcheck():
    base, exponent = param(2, 3, low=0.5), param(3, seed=5)
    gradcheck(lambda b, e: b ** e, base, exponent)
    gradcheck(lambda e: 2.0 ** e, exponent)
    # value check against Python floats
    np.testing.assert_allclose((base ** exponent).data,
                               [[b ** e for b, e in zip(row, exponent.data.astype(float))]
                                for row in base.data.astype(float)], rtol=1e-6)


@pytest.mark.parametrize("shape_a, shape_b", [
    ((3, 4), (4, 5)),          # plain GEMM
    ((2, 3, 4), (4, 5)),       # batched left, shared right (one GEMM for the right grad)
    ((4, 5), (2, 5, 3)),       # shared left, batched right
    ((2, 1, 3, 4), (3, 4, 2)),  # broadcast batch axes on both sides
    ((4,), (4, 3)),            # vector @ matrix
    ((4,), (2, 4, 3)),         # vector @ batched matrix: the vector's gradient sums over the batch
    ((2, 3, 4), (4,)),         # matrix @ vector
    ((4,), (4,)),              # dot product
])
def test_matmul_gradcheck(shape_a, shape_b):
    a, b = param(*shape_a, seed=3), param(*shape_b, seed=4)
    gradcheck(lambda x, y: x @ y, a, b)
    np.testing.assert_allclose((a @ b).data, a.data.astype(np.float64) @ b.data.astype(np.float64), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("shape_a, shape_b", [
    ((2, 0), (0, 3)),     # an empty inner axis: a zero output
    ((2, 3, 0), (0, 5)),  # batched left, shared right (one GEMM over all the rows for the right grad)
    ((2, 3, 0), (0,)),    # matrix @ vector: the vector is a column, shared by the batch
    ((2, 3, 4), (4, 0)),  # an empty output axis: zero gradients
    ((0, 3, 4), (4, 5)),  # an empty batch
    ((0,), (0, 3)),       # empty vector @ matrix
])
def test_matmul_with_an_empty_axis(shape_a, shape_b):
    # the 3-D @ 2-D cases raised "cannot reshape array of size 0 into shape (0)" in backward
    a, b = param(*shape_a, seed=3), param(*shape_b, seed=4)
    out = a @ b
    expected = np.ones(shape_a) @ np.ones(shape_b) * 0.0
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.data, expected)
    out.backward(np.ones(out.shape))
    assert a.grad.shape == shape_a and b.grad.shape == shape_b
    # each gradient sums over the empty axis (or has no elements): zero
    np.testing.assert_array_equal(a.grad, np.zeros(shape_a))
    np.testing.assert_array_equal(b.grad, np.zeros(shape_b))


def test_matmul_with_constant_operand_and_reflected():
    w = param(4, 3)
    x = np.random.default_rng(0).standard_normal((2, 4))
    gradcheck(lambda w: x @ w, w)  # ndarray @ Tensor uses __rmatmul__
    gradcheck(lambda w: matmul(w.T, x.T), w)


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reductions_gradcheck(reduction, axis, keepdims):
    x = param(2, 3, 4)
    gradcheck(lambda x: getattr(x, reduction)(axis=axis, keepdims=keepdims), x)
    expected = getattr(x.data.astype(np.float64), reduction)(axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(getattr(x, reduction)(axis=axis, keepdims=keepdims).data, expected, rtol=1e-6)


def test_reductions_keep_the_unreduced_axes_of_length_one():
    x = Tensor(np.arange(6.0).reshape(2, 1, 3, 1))
    assert x.sum(axis=0).shape == (1, 3, 1) and x.mean(axis=(0, 2)).shape == (1, 1)
    assert x.sum(axis=-1).shape == (2, 1, 3) and x.mean(axis=-1, keepdims=True).shape == (2, 1, 3, 1)
    assert x.sum().shape == () and type(x.sum().data) is np.ndarray


def test_shape_ops_gradcheck():
    x = param(2, 3, 4)
    gradcheck(lambda x: x.reshape(6, 4), x)
    gradcheck(lambda x: x.reshape((4, -1)), x)
    gradcheck(lambda x: x.transpose(2, 0, 1), x)
    gradcheck(lambda x: x.transpose((1, 0, 2)), x)
    gradcheck(lambda x: x.T, x)
    assert x.T.shape == (4, 3, 2) and x.transpose(2, 0, 1).shape == (4, 2, 3)


@pytest.mark.parametrize("index", [
    1, -1, (slice(None), 1), (Ellipsis, slice(1, 3)), (0, slice(None), None, 1), slice(None, None, -1),
    np.array([2, 0, 2, 1]),                      # integer array with a repeated index: gradients add
    (np.array([0, 1, 1]), np.array([3, 3, 0])),  # pairs of integer arrays
    [1, 1],                                      # a list is an integer-array index
    (slice(None), [0, 2, 2]),                    # a slice, then an integer array with a repeated index
])
def test_indexing_gradcheck(index):
    x = param(3, 4, 2)
    gradcheck(lambda x: x[index], x)
    np.testing.assert_array_equal(x[index].data, x.data[index])


def test_indexing_with_integer_tensor_and_bool_mask():
    x = param(3, 4)
    ids = Tensor(np.array([0, 2, 2]))
    gradcheck(lambda x: x[ids], x)
    mask = x.data > 0
    gradcheck(lambda x: x[mask], x)
    y = x[ids]
    y.backward(np.ones(y.shape))
    np.testing.assert_array_equal(x.grad, [[1] * 4, [0] * 4, [2] * 4])  # row 2 picked twice


def test_elementwise_methods_gradcheck():
    x = param(3, 4, low=0.2)
    gradcheck(lambda x: x.exp(), x)
    gradcheck(lambda x: x.log(), x)
    gradcheck(lambda x: x.tanh(), x)


# ---- graph semantics -----------------------------------------------------------------------------

def test_reused_node_gets_summed_gradient():
    x = Tensor([1.5, -2.0, 3.0], requires_grad=True)
    y = x * x          # x used twice in one op
    z = y + x * 3.0    # and again in another
    z.backward(np.ones(3))
    np.testing.assert_array_equal(x.grad, 2 * x.data + 3.0)
    # an intermediate used by two consumers: d/dx (y*2 + y*5) = 7 * 2x
    x.grad = None
    y = x * x
    (y * 2.0 + y * 5.0).sum().backward()
    np.testing.assert_array_equal(x.grad, 14 * x.data)


def test_backward_twice_accumulates():
    x = Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    np.testing.assert_array_equal(x.grad, [2.0, 4.0])
    loss.backward()  # the graph is kept: a second call adds the same gradient again
    np.testing.assert_array_equal(x.grad, [4.0, 8.0])
    x.grad = None
    loss.backward()
    np.testing.assert_array_equal(x.grad, [2.0, 4.0])


def test_shared_gradient_arrays_are_not_aliased_between_leaves():
    # add hands the same gradient array to both parents; scaling one leaf's .grad in place
    # (as clip_grad_norm does) must not change the other's
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    (a + b).backward(np.array([1.0]))
    a.grad *= 10
    assert b.grad[0] == 1.0
    # sum's gradient is a read-only broadcast view; .grad must still be writable and owned
    c = Tensor(np.ones((2, 3)), requires_grad=True)
    c.sum().backward()
    c.grad *= 2
    np.testing.assert_array_equal(c.grad, np.full((2, 3), 2.0))


def test_slices_and_whole_uses_of_one_tensor_sum_their_gradients():
    x = Tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    h = x * 1.0  # an intermediate, so that slice gradients meet inside the engine, not in a leaf
    y = h[:, :2] * 2.0 + h[:, 1:] * 3.0 + h.sum(axis=1, keepdims=True) + h[0, :2] * 10.0  # shape (2, 2)
    y.sum().backward()
    # columns 0-1 get 2, columns 1-2 get 3, every element 2 from the row sum (2 columns of y),
    # and h[0, :2] gets 10 from each of the 2 rows it is broadcast to
    np.testing.assert_array_equal(x.grad, [[2 + 2 + 20, 2 + 3 + 2 + 20, 3 + 2], [2 + 2, 2 + 3 + 2, 3 + 2]])
    gradcheck(lambda t: (t * 1.0)[:, :2] * (t * 1.0)[:, 1:] + t.sum(axis=1, keepdims=True), param(3, 3))
    x.grad *= 0  # the leaf's .grad is its own writable array
    w = Tensor(np.ones(4), requires_grad=True)
    (w[:2] * 1.0).sum().backward()  # only a slice of a leaf used
    np.testing.assert_array_equal(w.grad, [1, 1, 0, 0])


def test_ten_thousand_op_chain_has_no_recursion_error(default_recursion_limit):
    depth = 10_000
    assert depth == 10 * sys.getrecursionlimit()  # ten times the default limit, which the fixture sets
    x = Tensor([1.0], requires_grad=True)
    y = x
    for _ in range(depth):
        y = y * 1.0001
    y.sum().backward()
    assert x.grad[0] == pytest.approx(1.0001 ** depth, rel=1e-3)  # float32 rounding of 10,000 products
    del y  # freeing a deep graph must not recurse either


def test_only_leaves_keep_grad_unless_retained():
    x = Tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    k = (x * 2.0).retain_grad()
    (h * k).sum().backward()
    assert h.grad is None and not h.is_leaf and x.is_leaf
    np.testing.assert_array_equal(k.grad, h.data)  # d(h.k)/dk = h
    np.testing.assert_array_equal(x.grad, 12 * x.data)


def test_requires_grad_can_be_changed_on_leaves_only():
    # turning it off on an op's output used to cut the graph already built through it: x.grad stayed None
    x = Tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    y = (h * 3.0).sum()
    with pytest.raises(RuntimeError, match=r"only be changed on leaf tensors, got an output of op 'mul' "
                                           r"\(shape \(2,\)\): use t.detach\(\)"):
        h.requires_grad = False
    assert h.requires_grad
    h.requires_grad = True  # no change: allowed, as in torch
    y.backward()
    np.testing.assert_array_equal(x.grad, [6.0, 6.0])
    x.requires_grad = False  # a leaf may change either way
    assert not x.requires_grad and not (x * 2.0).requires_grad
    x.requires_grad = True
    assert (x * 2.0).requires_grad
    with pytest.raises(TypeError, match="requires_grad must be a bool, got int 1"):
        x.requires_grad = 1


def test_no_grad_builds_no_graph():
    x = Tensor([1.0, 2.0], requires_grad=True)
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled()
        y = (x * 2.0 + 1.0).sum()
        z = x @ x
    assert is_grad_enabled()
    for t in (y, z):
        assert not t.requires_grad and t._parents == () and t._backward is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            t.backward()
    np.testing.assert_array_equal(y.data, 8.0)

    @no_grad()
    def decorated(t):
        return t * 2.0

    assert not decorated(x).requires_grad
    assert (x * 2.0).requires_grad  # re-enabled after the decorated call


def test_nested_switches_restore_the_outer_setting():
    # leaving an inner no_grad / default_dtype restores the enclosing one, not the global default
    x = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        with no_grad():
            pass
        assert not is_grad_enabled() and not (x * 2.0).requires_grad
    assert is_grad_enabled()
    with default_dtype(np.float64):
        with default_dtype(np.float32):
            assert Tensor([1.0]).dtype == np.float32
        assert get_default_dtype() == np.float64 and Tensor([1.0]).dtype == np.float64
    assert get_default_dtype() == np.float32


def test_constants_do_not_require_grad_and_detach_cuts_the_graph():
    x = param(3)
    c = Tensor([1.0, 2.0, 3.0])
    assert not (c * 2.0).requires_grad
    d = (x * 2.0).detach()
    assert d.is_leaf and not d.requires_grad
    y = x * d
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, d.data)  # d is a constant: no gradient through it
    assert np.shares_memory(d.data, (x * 2.0).data) is False


def test_make_op_custom_backward_and_unbroadcast():
    # scale_bwd: identity forward, gradient times b (the unit-scaling primitive)
    def scale_bwd(x, b):
        return make_op(x.data, (x,), lambda grad: (grad * b,), name="scale_bwd")

    def scale_fwd(x, a):
        return make_op(x.data * a, (x,), lambda grad: (grad,), name="scale_fwd")

    x = Tensor([1.0, 2.0], requires_grad=True)
    y = scale_bwd(x, 4.0)
    np.testing.assert_array_equal(y.data, x.data)
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad, 4.0 * 2 * x.data)
    x.grad = None
    z = scale_fwd(x, 3.0)
    np.testing.assert_array_equal(z.data, 3.0 * x.data)
    (z * z).sum().backward()
    np.testing.assert_array_equal(x.grad, 2 * z.data)  # d(z^2)/dz passed through unscaled
    # a custom op may return a gradient of the output's broadcast shape; the engine sums it down
    bias = Tensor([0.5], requires_grad=True)
    m = Tensor(np.ones((3, 2)), requires_grad=True)
    out = make_op(m.data + bias.data, (m, bias), lambda g: (g, g), name="add_bias")
    out.backward(np.ones((3, 2)))
    np.testing.assert_array_equal(bias.grad, [6.0])
    # under no_grad the custom op builds no graph
    with no_grad():
        assert not scale_bwd(x, 2.0).requires_grad


def test_make_op_rejects_a_malformed_backward():
    x = Tensor([1.0, 2.0], requires_grad=True)
    one_array = make_op(x.data * 2, (x,), lambda g: g * 2, name="bare_array")
    with pytest.raises(TypeError, match="bare_array.*one gradient"):
        one_array.sum().backward()
    wrong_shape = make_op(x.data * 2, (x,), lambda g: (np.ones(3),), name="wrong_shape")
    with pytest.raises(ValueError, match="wrong_shape.*shape"):
        wrong_shape.sum().backward()
    with pytest.raises(TypeError, match="floating"):
        make_op(np.array([1, 2]), (x,), lambda g: (g,), name="int_output")


@pytest.mark.parametrize("failing_first", [False, True])
def test_a_backward_that_raises_changes_no_grad(failing_first):
    """An op's backward that raises leaves every .grad as it was (b's, h's retained one and a's
    alike), so a backward run again after a fix counts no gradient twice: the walk completes
    before any .grad changes."""
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
    b.grad = np.array([10.0, 20.0], np.float32)
    broken = make_op(a.data * 2, (a,), lambda g: (np.ones(3),), name="wrong_shape").sum()
    h = (b * 1.0).retain_grad()
    good = (h * 2.0).sum()
    loss = broken + good if failing_first else good + broken
    with pytest.raises(ValueError, match="wrong_shape"):
        loss.backward()
    assert a.grad is None and h.grad is None
    np.testing.assert_array_equal(b.grad, [10.0, 20.0])
    good.backward()  # without the broken op: the gradients arrive as usual
    np.testing.assert_array_equal(b.grad, [12.0, 22.0])
    np.testing.assert_array_equal(h.grad, [2.0, 2.0])


@pytest.mark.parametrize("parents, backward, message", [
    # a parent that is no Tensor raised AttributeError '_data'
    ((np.ones(2),), lambda g: (g,), r"make_op 'bad': parents must be Tensors \(wrap a constant with as_tensor\), "
                                    r"got ndarray of dtype float64 and shape \(2,\)"),
    ((2.0,), lambda g: (g,), "parents must be Tensors.*got float 2.0"),
    # one Tensor as the parents: tuple(t) gave its slices, and a confusing error at backward
    ("tensor", lambda g: (g,), r"parents must be a sequence of Tensors, got a Tensor of shape \(2,\) \(pass \(t,\)\)"),
    # backward=None returned a constant, and backward() then blamed no_grad
    (None, None, r"make_op 'bad': backward must be a callable backward\(grad_out\) -> tuple of gradients, "
                 "got NoneType None"),
    (None, 3, "backward must be a callable.*got int 3"),
])
def test_make_op_checks_its_parents_and_backward(parents, backward, message):
    x = Tensor([1.0, 2.0], requires_grad=True)
    parents = x if parents == "tensor" else (x,) if parents is None else parents
    with pytest.raises(TypeError, match=message):
        make_op(x.data * 2, parents, backward, name="bad")
    with no_grad():  # the same checks when no graph is recorded
        with pytest.raises(TypeError, match=message):
            make_op(x.data * 2, parents, backward, name="bad")


def test_float64_mode_is_scoped():
    assert get_default_dtype() == np.float32
    with default_dtype(np.float64):
        t = Tensor([1.0, 2.0], requires_grad=True)
        assert t.dtype == np.float64 and (t * 2.0).dtype == np.float64
        (t * t).sum().backward()
        assert t.grad.dtype == np.float64
    assert get_default_dtype() == np.float32 and Tensor([1.0]).dtype == np.float32
    with pytest.raises(TypeError, match="float32 or float64"):
        with default_dtype(np.float16):
            pass


# ---- data types and bad inputs -------------------------------------------------------------------

@pytest.mark.parametrize("data", [np.float16([1, 2]), np.float64([1, 2]), [1.5, 2.5], 3.5,
                                  np.arange(6.0).reshape(2, 3)[:, ::2]])
def test_floating_data_becomes_float32(data):
    t = Tensor(data)
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.data, np.asarray(data, dtype=np.float32))


def test_float32_data_is_not_copied_and_grads_are_float32():
    data = np.ones((2, 2), dtype=np.float32)
    t = Tensor(data, requires_grad=True)
    assert t.data is data
    (t * 3.0).sum().backward()
    assert t.grad.dtype == np.float32 and t.grad.shape == (2, 2)


def test_integer_tensors_are_non_differentiable_token_ids():
    ids = Tensor(np.array([1, 2, 3]))
    assert ids.dtype.kind == "i" and not ids.requires_grad
    with pytest.raises(TypeError, match="only floating tensors can require grad"):
        Tensor(np.array([1, 2]), requires_grad=True)
    with pytest.raises(TypeError, match="integer tensors are token ids"):
        ids * 2.0
    with pytest.raises(TypeError, match="integer tensors are token ids"):
        Tensor([1.0, 2.0, 3.0]) + ids


@pytest.mark.parametrize("bad, message", [
    (np.array([True, False]), "bool"), (True, "bool"), (np.array([1 + 2j]), "complex"),
    (np.array(["a"]), "dtype <U1"), (np.array([object()]), "dtype object"),
])
def test_bad_data_types_raise(bad, message):
    with pytest.raises(TypeError, match=message):
        Tensor(bad)


def test_tensor_of_tensor_and_bool_operand_raise():
    t = Tensor([1.0])
    with pytest.raises(TypeError, match="already a Tensor"):
        Tensor(t)
    with pytest.raises(TypeError, match="bool operand"):
        t * True
    with pytest.raises(TypeError, match="exponent"):
        t ** "2"


def test_matmul_shape_mismatch_raises_clearly():
    a, b = Tensor(np.ones((2, 3))), Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"matmul shape mismatch: \(2, 3\) @ \(4, 5\).*\(3\).*\(4\)"):
        a @ b
    with pytest.raises(ValueError, match="batch axes"):
        Tensor(np.ones((2, 3, 4))) @ Tensor(np.ones((3, 4, 5)))
    with pytest.raises(ValueError, match="at least 1-D"):
        Tensor(2.0) @ b


def test_elementwise_shape_mismatch_raises():
    with pytest.raises(ValueError, match="broadcast"):
        Tensor(np.ones((2, 3))) + Tensor(np.ones((4,)))


@pytest.mark.parametrize("op, name", [
    (lambda a, b: a + b, "add"), (lambda a, b: a - b, "sub"), (lambda a, b: a * b, "mul"),
    (lambda a, b: a / b, "div"), (lambda a, b: a ** b, "pow"), (lambda a, b: b - a, "sub"),
])
def test_elementwise_shape_mismatch_names_the_op_and_both_shapes(op, name):
    message = rf"{name}: shapes (\(2, 3\) and \(4,\)|\(4,\) and \(2, 3\)) do not broadcast"
    with pytest.raises(ValueError, match=message):
        op(Tensor(np.ones((2, 3))), Tensor(np.ones(4)))
    if name != "pow":  # a plain array operand (** takes a number or a Tensor exponent)
        with pytest.raises(ValueError, match=message):
            op(Tensor(np.ones((2, 3))), np.ones(4))


def test_backward_on_non_scalar_needs_grad():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match=r"one-element.*shape \(2, 3\).*grad="):
        y.backward()
    with pytest.raises(ValueError, match="shape"):
        y.backward(np.ones(3))
    y.backward(np.ones((2, 3)))
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 2.0))
    one = (x * 1.0)[0:1, 0:1]  # any one-element tensor may omit grad
    one.backward()
    assert x.grad[0, 0] == 3.0


def test_bad_axes_and_transpose_raise():
    x = Tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="out of range"):
        x.sum(axis=2)
    with pytest.raises(ValueError, match="repeated"):
        x.sum(axis=(0, -2))
    with pytest.raises(TypeError, match="mean: axis must be an int, got float 1.0"):
        x.mean(axis=1.0)
    with pytest.raises(ValueError, match="permutation"):
        x.transpose(0, 0)
    with pytest.raises(ValueError, match="one-element"):
        x.item()


@pytest.mark.parametrize("call, message", [
    (lambda x: x.sum(axis=1.0), "sum: axis must be an int, got float 1.0"),
    (lambda x: x.mean(axis=(0, 1.0)), "mean: axis must be an int, got float 1.0"),
    (lambda x: x.sum(axis=True), "sum: axis must be an int, got bool True"),
    (lambda x: x.sum(axis=np.bool_(False)), "sum: axis must be an int, got bool"),
    (lambda x: x.sum(axis="0"), "sum: axis must be an int, got str '0'"),
    (lambda x: x.transpose(0.0, 1.0, 2.0, 3.0), "transpose: axis must be an int, got float 0.0"),
    (lambda x: x.transpose((3, 2, 1, True)), "transpose: axis must be an int, got bool True"),
])
def test_axis_of_the_wrong_type_is_a_type_error(call, message):
    # was ValueError "axis 1.0 is out of range" (sum/mean) and NumPy's "'float' object cannot be
    # interpreted as an integer" after the permutation check had passed (transpose)
    with pytest.raises(TypeError, match=message):
        call(Tensor(np.ones((2, 3, 4, 5))))


def test_numpy_integer_axes_are_ints():
    x = Tensor(np.ones((2, 3, 4)))
    assert x.sum(axis=np.int64(-1)).shape == (2, 3)
    assert x.mean(axis=(np.int32(0), 2)).shape == (3,)
    assert x.transpose(np.int64(2), 0, np.intp(1)).shape == (4, 2, 3)
    with pytest.raises(ValueError, match="transpose: axis 3 is out of range for a 3-D tensor"):
        x.transpose(3, 0, 1)


def test_special_values_flow_through():
    # NaN and Inf propagate (no silent replacement); -0.0 keeps its sign through neg
    x = Tensor([np.inf, np.nan, 0.0], requires_grad=True)
    y = -x
    assert math.copysign(1.0, y.data[2]) == -1.0 and np.isnan(y.data[1]) and y.data[0] == -np.inf
    (y * 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [-1.0, -1.0, -1.0])


def test_empty_and_zero_d_tensors():
    e = Tensor(np.zeros((0, 3)), requires_grad=True)
    s = e.sum()
    assert s.data == 0.0
    s.backward()
    assert e.grad.shape == (0, 3)
    z = Tensor(2.0, requires_grad=True)
    (z * z).backward()
    assert z.grad == 4.0 and z.grad.shape == ()


# ---- gradcheck itself ----------------------------------------------------------------------------

def test_gradcheck_reports_a_wrong_formula_by_input_and_element():
    x, w = param(3, 2, seed=1), param(2, seed=2)

    def almost_square(t):  # forward t^2, backward 2.001 t: a 0.05% error
        return make_op(t.data ** 2, (t,), lambda g: (g * 2.001 * t.data,), name="almost_square")

    original, before = x.data, x.data.copy()
    with pytest.raises(AssertionError) as error:
        gradcheck(lambda a, b: almost_square(a) * b, x, w, names=["x", "w"])
    message = str(error.value)
    assert message.startswith("gradcheck failed for x\n")
    assert "x (shape (3, 2)): FAILED" in message and "w (shape (2,)): ok" in message
    assert "worst element (" in message and "analytic" in message and "numeric" in message
    assert x.data is original and np.array_equal(x.data, before) and x.grad is None  # restored
    report = gradcheck(lambda a, b: almost_square(a) * b, x, w, raise_on_failure=False)
    assert not report.passed and not report.inputs[0].passed and report.inputs[1].passed
    worst = report.inputs[0]
    assert worst.analytic == pytest.approx(worst.numeric * 1.0005, rel=1e-6)


def test_gradcheck_catches_precision_loss_in_the_float32_backward():
    x = param(4, 3)

    def lossy(t):  # exact formula, but the float32 run rounds its gradient through float16
        def backward(g):
            grad = 3.0 * g
            return (grad.astype(np.float16) if grad.dtype == np.float32 else grad,)
        return make_op(3.0 * t.data, (t,), backward, name="lossy")

    report = gradcheck(lossy, x, raise_on_failure=False)
    assert report.inputs[0].error <= 1.0 < report.inputs[0].float32_error


def test_gradcheck_rejects_promotion_and_bad_arguments():
    x = param(2)
    with pytest.raises(AssertionError, match="dtype float64 from float32 inputs"):
        gradcheck(lambda t: make_op(t.data.astype(np.float64), (t,), lambda g: (g,)), x)
    with pytest.raises(ValueError, match="no input is a Tensor that requires grad"):
        gradcheck(lambda t: t * 2.0, Tensor([1.0]))
    with pytest.raises(TypeError, match="must return a Tensor"):
        gradcheck(lambda t: t.data, x)
    assert x.dtype == np.float32 and x.grad is None


# ---- in-place changes after the forward pass: version counters ------------------------------------
def test_backward_refuses_a_graph_whose_input_was_changed_in_place():
    """The product's backward would multiply by the *new* w (its saved array): a wrong gradient.
    After bump_version, backward raises before any .grad changes; a new forward pass works."""
    w = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    x = Tensor(np.array([4.0, 5.0, 6.0]), requires_grad=True)
    loss = (w * x).sum()
    w.data[...] += 10.0  # a write NumPy makes in place: the writer says so
    w.bump_version()
    with pytest.raises(RuntimeError, match=r"an input of op 'mul' \(shape \(3,\)\) was changed in place after the "
                                           r"forward pass \(version 0, now 1\): run the forward pass again"):
        loss.backward()
    assert w.grad is None and x.grad is None  # checked before anything was accumulated
    (w * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [11.0, 12.0, 13.0])


@pytest.mark.parametrize("stale, error, message", [
    (np.zeros(3, dtype=np.int64), TypeError, r"has dtype int64, which cannot hold a float32 gradient"),
    (np.zeros((1, 3), dtype=np.float32), ValueError, r"has shape \(1, 3\), expected the tensor's shape \(3,\)"),
    (np.broadcast_to(np.float32(0.0), (3,)), ValueError, r"is read-only"),
    ([0.0, 0.0, 0.0], TypeError, r"must be an ndarray to accumulate into \(or None\), got list"),
])
def test_backward_refuses_a_user_set_grad_it_cannot_add_into_before_changing_any(stale, error, message):
    """Every leaf's .grad is updated in a last pass; a .grad set by hand that cannot take the sum
    (an int array, another shape, a read-only view, a list) used to raise part way through that
    pass, after the other leaves' gradients had changed."""
    first = Tensor(np.ones(3, np.float32), requires_grad=True)
    second = Tensor(np.ones(3, np.float32), requires_grad=True)
    second.grad = stale
    with pytest.raises(error, match=r"backward\(\): the \.grad of .*" + message):
        (first * 2.0 + second * 3.0).sum().backward()
    assert first.grad is None and second.grad is stale


def test_backward_whose_sum_into_a_grad_overflows_under_a_strict_state_changes_no_grad():
    """Found in a review: the sums into .grad were made leaf by leaf, in place, so one that
    overflowed under np.errstate(over="raise") left the earlier leaves updated and its own .grad
    holding the Inf NumPy wrote before raising, although backward promises no .grad changes."""
    a = Tensor(np.array([1e-10], np.float32), requires_grad=True)
    b = Tensor(np.array([-1e-10], np.float32), requires_grad=True)
    a.grad, b.grad = np.array([1.0], np.float32), np.array([3e38], np.float32)
    a_grad, b_grad = a.grad, b.grad
    loss = (a * 3e38).sum() + (b * 3e38).sum()
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
        loss.backward()
    assert a.grad is a_grad and b.grad is b_grad
    np.testing.assert_array_equal(a.grad, np.float32([1.0]))
    np.testing.assert_array_equal(b.grad, np.float32([3e38]))
    loss = (a * 2.0).sum() + (b * 2.0).sum()
    loss.backward()  # (the sums are still written into the arrays set by hand: same objects, new values)
    assert a.grad is a_grad and b.grad is b_grad
    np.testing.assert_array_equal(a.grad, np.float32([3.0]))
    np.testing.assert_array_equal(b.grad, np.float32([3e38]) + np.float32(2.0))


@pytest.mark.parametrize("change", ["assign", "augmented"])
def test_assigning_data_bumps_the_version(change):
    """The product's backward reads ``w.data`` when it runs, so a new array (``w.data = ...``) or an
    augmented assignment (``w.data += ...``, which sets ``data`` too) would change x's gradient."""
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    x = Tensor(np.array([3.0, 4.0]), requires_grad=True)
    loss = (w * x).sum()
    if change == "assign":
        w.data = np.array([100.0, 200.0], np.float32)
    else:
        w.data += 1.0
    with pytest.raises(RuntimeError, match=r"version 0, now 1"):
        loss.backward()
    assert x.grad is None


def test_backward_refuses_a_graph_whose_intermediate_output_was_changed_in_place():
    """exp and softmax compute their gradients from their own output: changed before a later op
    saved it (so no input version records it), it gave wrong gradients silently (an audit's find)."""
    from minifp8 import functional as F

    x = Tensor(np.array([0.0, 1.0, 2.0]), requires_grad=True)
    y = x.exp()
    y.data *= 2.0  # bumps y's version
    loss = y.sum()
    with pytest.raises(RuntimeError, match=r"the output of op 'exp' \(shape \(3,\)\) was changed in place after "
                                           r"the forward pass \(version 0, now 1\)"):
        loss.backward()
    assert x.grad is None
    s = F.softmax(x)
    s.data[:] = 0.0
    s.bump_version()
    with pytest.raises(RuntimeError, match="the output of op 'softmax'"):
        (s * Tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
    x.exp().sum().backward()  # a new forward pass works
    np.testing.assert_allclose(x.grad, np.exp([0.0, 1.0, 2.0]), rtol=1e-6)


def test_embedding_keeps_the_ids_of_its_forward_pass():
    """The backward scattered the gradient with the ids array as it was at backward time; the ids
    are no parent, so changing them in place changed W's gradient without an error."""
    from minifp8 import functional as F

    ids = Tensor(np.array([0, 0, 1]))
    weight = Tensor(np.zeros((3, 2)), requires_grad=True)
    out = F.embedding(ids, weight)
    ids.data[:] = 2
    out.sum().backward()
    np.testing.assert_array_equal(weight.grad, [[2, 2], [1, 1], [0, 0]])


def test_assigning_data_converts_it_as_the_constructor_does():
    """The setter stored anything: a float64 array made a model silently float64, a list stayed a
    list, bool data was accepted and a tensor that requires grad took integer data (an audit's find)."""
    from minifp8 import nn
    from minifp8.autograd import default_dtype

    w = Tensor(np.zeros(3, np.float32), requires_grad=True)
    w.data = np.arange(3, dtype=np.float64) / 2
    assert w.data.dtype == np.float32 and w.data.tolist() == [0.0, 0.5, 1.0]
    w.data = [1.0, 2.0, 3.0]
    assert isinstance(w.data, np.ndarray) and w.data.dtype == np.float32
    with pytest.raises(TypeError, match="bool"):
        w.data = np.ones(3, bool)
    with pytest.raises(TypeError, match="requires grad needs floating data, got dtype int64"):
        w.data = np.arange(3, dtype=np.int64)
    assert w.data.dtype == np.float32 and w.data.tolist() == [1.0, 2.0, 3.0]  # left as it was
    ids = Tensor(np.zeros(2, np.int64))
    ids.data = np.array([3, 4])
    assert ids.data.dtype.kind == "i"
    with default_dtype(np.float64):
        w.data = np.zeros(3)
        layer = nn.Linear(2, 2, rng=np.random.default_rng(0))
    assert w.data.dtype == np.float64
    layer.load_state_dict({name: np.ones(p.shape) for name, p in layer.named_parameters()})
    assert all(p.data.dtype == np.float64 for p in layer.parameters())  # a module keeps its dtype


def test_integer_tensors_refuse_the_methods_numpy_would_compute_in_float64():
    """exp, log, tanh and mean of token ids gave float64 tensors (F.exp refused them; an audit's find)."""
    ids = Tensor(np.arange(3))
    for method in ("exp", "log", "tanh", "mean"):
        with pytest.raises(TypeError, match=f"{method}: input must be a floating tensor, got dtype int64"):
            getattr(ids, method)()
    with pytest.raises(TypeError, match=r"\*\*: input must be a floating tensor, got dtype int64"):
        ids ** 2
    assert ids.sum().dtype == ids.dtype  # a sum of ids stays integer


def test_an_unchanged_graph_can_still_be_walked_twice():
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    loss.backward()
    np.testing.assert_array_equal(w.grad, [4.0, 8.0])


# ---- found in a review of the engine: each failed before its fix --------------------------------------
def test_a_zero_d_tensor_reached_by_several_paths_gets_an_array_gradient():
    """The sum of two 0-d gradients is a NumPy scalar; kept as the engine's buffer it broke the
    next accumulation (TypeError) and became .grad, which optimizers and clipping scale in place."""
    s = Tensor(3.0, requires_grad=True)
    y = s * s
    y.backward()
    assert isinstance(s.grad, np.ndarray) and s.grad.shape == () and s.grad == 6.0
    y.backward()
    assert s.grad == 12.0
    s.grad = None
    (s + s + s).backward()
    assert isinstance(s.grad, np.ndarray) and s.grad == 3.0
    x = Tensor([1.0, 2.0, 4.0], requires_grad=True)
    m = x.mean()
    ((x - m) * (x - m) * (x - m)).mean().backward()  # m is used three times
    centred = np.array([1.0, 2.0, 4.0]) - 7 / 3  # d/dx_j of mean((x - m)^3) = 3 (c_j^2 - mean(c^2)) / n
    np.testing.assert_allclose(x.grad, 3 * (centred**2 - np.mean(centred**2)) / 3, rtol=1e-5)


def test_detach_and_views_share_the_version_counter():
    """As torch's: an in-place update of w is seen by a graph that saved w.detach() or a slice."""
    from minifp8 import optim

    a = Tensor([1.0, 1.0], requires_grad=True)
    w = Tensor([2.0, 3.0], requires_grad=True)
    loss = (a * w.detach()).sum()
    w.grad = np.ones(2, np.float32)
    optim.SGD([w], lr=1.0).step()
    with pytest.raises(RuntimeError, match="was changed in place"):
        loss.backward()
    buf = Tensor([1.0, 2.0])
    loss = (a * buf[0:2]).sum()
    buf.data[...] = 10.0
    buf.bump_version()
    with pytest.raises(RuntimeError, match="was changed in place"):
        loss.backward()
    # a new array for w: the detached twin keeps the old one, and its graph stays valid
    twin = w.detach()
    loss = (a * twin).sum()
    w.data = np.zeros(2, np.float32)
    a.grad = None
    loss.backward()
    np.testing.assert_array_equal(a.grad, twin.data)


def test_x_to_the_power_zero_has_gradient_zero_at_zero():
    x = Tensor([0.0, 2.0], requires_grad=True)
    (x**0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0])


def test_tensor_power_at_a_zero_base_or_exponent_has_torchs_gradients():
    """With a Tensor exponent, 0 ** Tensor(0) gave the base the gradient 0 * 0**-1 = NaN (a number
    exponent gave 0), and 0 ** y the exponent the gradient 0 * log 0 = NaN, where 0**y is 0 for
    all y > 0. Expected: y b**(y-1) and b**y ln b from Python's math, 0 at those points (torch's
    pow_backward convention, also for the discontinuous 0**0), and no warning on the way."""
    b = [0.0, 0.0, 0.0, 2.0, 0.5, 3.0]
    y = [0.0, 2.0, 1.0, 0.0, 1.5, -1.0]
    base, exponent = Tensor(b, requires_grad=True), Tensor(y, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (base ** exponent).backward(np.ones(6))
    expected_base = [0.0 if yi == 0 else yi * bi ** (yi - 1) for bi, yi in zip(b, y)]
    expected_exponent = [0.0 if bi == 0 else bi ** yi * math.log(bi) for bi, yi in zip(b, y)]
    np.testing.assert_allclose(base.grad, expected_base, rtol=1e-6)
    np.testing.assert_allclose(exponent.grad, expected_exponent, rtol=1e-6)
    assert base.grad.dtype == exponent.grad.dtype == np.float32
    # broadcast operands: zero bases (2, 1) against exponents (3,), and rpow of 0.0
    base, exponent = Tensor(np.zeros((2, 1)), requires_grad=True), Tensor([0.0, 1.0, 3.0], requires_grad=True)
    (base ** exponent).sum().backward()
    np.testing.assert_array_equal(base.grad, [[1.0], [1.0]])  # d/db of b**1 at 0; b**0 and b**3 give 0
    np.testing.assert_array_equal(exponent.grad, [0.0, 0.0, 0.0])
    exponent.grad = None
    (0.0 ** exponent).sum().backward()
    np.testing.assert_array_equal(exponent.grad, [0.0, 0.0, 0.0])
    # a negative base stays outside the exponent's domain: NaN, as log gives
    exponent.grad = None
    with np.errstate(invalid="ignore"):
        (Tensor([-2.0, -2.0, -2.0]) ** exponent).sum().backward()
    assert np.isnan(exponent.grad).all()


def test_power_zero_and_zero_base_conventions_gradcheck():
    """The special cases of pow's backward against central differences, at the points where the
    function is differentiable: x**0 (its own backward, zeros) at x = 0 and elsewhere; a Tensor
    exponent 0 (the base's gradient, bases 0 included) and a zero base under an exponent > 0 (the
    exponent's gradient, 0**y = 0 on both sides). Integer exponents at a zero base keep (-eps)**y real."""
    x = Tensor([[0.0, -0.0, 1.5], [-2.0, 0.0, 0.5]], requires_grad=True)
    gradcheck(lambda t: t ** 0 * t, x)  # d/dt = 0 * t + 1: a NaN (0 * 0**-1) or nonzero x**0 gradient shows
    base = Tensor([0.0, 0.0, 0.0, 0.0, 0.7, 1.3], requires_grad=True)
    gradcheck(lambda b: b ** Tensor([0.0, 1.0, 2.0, 3.0, 0.0, 1.5]), base)
    exponent = Tensor([1.0, 2.0, 0.5, 3.0, 0.0, -1.0], requires_grad=True)
    gradcheck(lambda e: Tensor([0.0, 0.0, 0.0, 0.0, 2.0, 0.5]) ** e, exponent)
    gradcheck(lambda e: 0.0 ** e, Tensor([1.0, 2.0, 0.5], requires_grad=True))  # rpow of a zero base


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_integer_array_index_backward_is_add_at_bit_for_bit(dtype):
    # x[ids] with an integer array sums each row's gradients through the embedding's grid
    # (autograd._sum_rows_by_id) where it can; the bits must be np.add.at's, whose in-order sums
    # the rows' mixed magnitudes (1e-30 to 1e30) and signed zeros would expose
    rng = np.random.default_rng(11)
    cases = [((40, 64), (1024,)), ((7,), (50,)), ((6, 3, 2), (4, 5)), ((1, 1), (5,)), ((300, 4), (1000,)),
             ((5, 0), (3,)), ((4, 2), (0,)), ((9, 3), ())]
    cases += [((int(rng.integers(1, 60)), int(rng.integers(1, 30))), (int(rng.integers(1, 900)),)) for _ in range(20)]
    with default_dtype(dtype):
        for number, (shape, index_shape) in enumerate(cases):
            ids = rng.integers(-shape[0], shape[0], index_shape)
            if number == 4 or number % 5 == 4 and ids.size:  # half on one row: np.add.at's own path
                ids[rng.random(index_shape) < 0.5] = shape[0] // 2
            if number % 3 == 2:
                ids = ids % shape[0]  # unsigned ids, no negatives
                ids = ids.astype(np.uint8 if shape[0] < 256 else np.uint16)
            grads = rng.standard_normal(index_shape + shape[1:]) * rng.choice([1.0, 1e-30, 1e30], index_shape + (1,) * (len(shape) - 1))
            grads[rng.random(grads.shape) < 0.05] = -0.0
            grads = grads.astype(dtype)
            for index in (ids, Tensor(ids) if ids.ndim else ids):
                x = Tensor(np.zeros(shape), requires_grad=True)
                x[index].backward(grads)
                expected = np.zeros(shape, dtype=dtype)
                np.add.at(expected, ids, grads)
                assert x.grad.dtype == dtype and x.grad.shape == shape
                assert np.array_equal(x.grad.view(np.uint8), expected.view(np.uint8)), (shape, index_shape, ids.dtype)
    # rows of -0.0 only, on the most repeated id (whose sum fills every slot of the grid) and on
    # another: np.add.at's sums start from +0.0, so both are +0.0
    x = Tensor(np.zeros((3, 4)), requires_grad=True)
    x[np.array([1, 1, 1, 0, 2])].backward(np.full((5, 4), -0.0))
    assert not np.signbit(x.grad).any() and not x.grad.any()
    # the sums themselves, and a bool mask and a pair of index arrays (np.add.at's path)
    x = Tensor(np.zeros((4, 2)), requires_grad=True)
    x[np.array([3, -1, 0, 3])].backward(np.arange(8.0).reshape(4, 2))
    np.testing.assert_array_equal(x.grad, [[4, 5], [0, 0], [0, 0], [8, 11]])
    x = Tensor(np.zeros((3, 2)), requires_grad=True)
    x[np.array([True, False, True])].backward(np.ones((2, 2)))
    np.testing.assert_array_equal(x.grad, [[1, 1], [0, 0], [1, 1]])
    x = Tensor(np.zeros((3, 2)), requires_grad=True)
    x[np.array([0, 0, 2]), np.array([1, 1, 0])].backward(np.array([1.0, 2.0, 4.0]))
    np.testing.assert_array_equal(x.grad, [[0, 3], [0, 0], [4, 0]])
