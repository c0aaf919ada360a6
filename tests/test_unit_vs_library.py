"""minifp8.unit (U) against the unit-scaling library it follows (``unit_scaling.functional``, uf).

DESIGN.md section 5 promises that every U op uses the formulas of ``unit_scaling`` 0.3.x, so that it
agrees with the uf op of the same name to float32 rounding on the same inputs. Here each U op and its
uf namesake (on torch, CPU) get identical inputs and the identical output gradient; the forward value
and every input gradient must agree

* float32: ``|ours - library| <= 1e-5 |library| + 1e-5 std(library)`` elementwise (float32 rounding
  of the tensor's own scale: the worst seen is 2.4e-6, in attention and GELU, where the two sides
  order their float32 operations differently; a wrong scale factor, even ``sqrt(V)`` against
  ``sqrt(V - 1)`` at V = 7, is off by percents);
* float64: the same with 1e-12 (worst seen 6e-15), which shows the formulas are the same, not
  merely close.

``scale_fwd`` and ``scale_bwd`` are compared with ``uf.scale_fwd``/``uf.scale_bwd`` (imported there
from ``unit_scaling.scale``, not listed in ``uf.__all__``).

The library is an optional, independent reference (not a dependency of minifp8, absent in CI):
this whole file is skipped without torch and unit_scaling.

Documented departures (DESIGN.md section 5 and the U docstrings), each asserted below as a
difference rather than skipped:

* GELU: ours is the tanh approximation; uf's default is the exact erf GELU, so we compare against
  ``approximate="tanh"`` and check that the erf default differs by about the approximation error;
* causal attention at sequence length 1: uf's rule takes ``log(1) = 0`` as a lower limit and raises;
  ours uses the exact scale 1 (the output is v);
* cross-entropy with ignored targets: uf divides the summed loss by all rows, ours by the counted
  rows (as torch's mean); the gradients are the same;
* cross-entropy on (..., V) logits: uf accepts only 1-D and 2-D logits, we compare on the flattened
  2-D view;
* empty batches (linear, embedding): uf divides by the batch size and raises; ours gives zero gradients.
"""
import math

import numpy as np
import pytest

import minifp8.unit as U
from minifp8.autograd import Tensor, default_dtype

torch = pytest.importorskip("torch")
uf = pytest.importorskip("unit_scaling.functional")

CONSTRAINTS = [None, "to_output_scale", "gmean"]
DTYPES = [np.float32, np.float64]
RELATIVE = {np.float32: 1e-5, np.float64: 1e-12}


def normal(seed, shape, dtype):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_agrees(ours, library, dtype, what):
    ours, library = np.asarray(ours), np.asarray(library)
    assert ours.shape == library.shape, f"{what}: shape {ours.shape}, library {library.shape}"
    assert ours.dtype == library.dtype == dtype, f"{what}: dtype {ours.dtype}, library {library.dtype}"
    tolerance = RELATIVE[dtype]
    np.testing.assert_allclose(ours, library, rtol=tolerance, atol=tolerance * float(np.std(library)),
                               err_msg=what)


def run_ours(op, arrays, output_grad, dtype, **kwargs):
    """``op(*leaves, **kwargs)`` and its backward from ``output_grad``: (value, [grad of each leaf])."""
    with default_dtype(dtype):
        leaves = [Tensor(a, requires_grad=True) for a in arrays]
        out = op(*leaves, **kwargs)
        out.backward(output_grad)
    return out.data, [leaf.grad for leaf in leaves]


def run_library(op, arrays, output_grad, **kwargs):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = op(*leaves, **kwargs)
    out.backward(torch.tensor(output_grad))
    return out.detach().numpy(), [leaf.grad.numpy() for leaf in leaves]


def compare(our_op, library_op, arrays, dtype, our_kwargs=None, library_kwargs=None, seed=99, output_grad=None,
            zero_grads=()):
    """Run both ops on the same arrays and the same (random normal) output gradient; assert agreement.

    Every input gradient must be nonzero (or the comparison proves little), except those listed in
    ``zero_grads``: ours must be exactly zero (a softmax over one key is exactly 1, and nothing of
    it reaches q or k), the library's zero to rounding, ``|g| <= RELATIVE[dtype]`` with the unit
    normal output gradient used here (its fused attention leaves up to 7e-16 in float64, 5e-7 in
    float32).
    """
    our_kwargs = our_kwargs or {}
    library_kwargs = our_kwargs if library_kwargs is None else library_kwargs
    with torch.no_grad():
        shape = tuple(library_op(*(torch.tensor(a) for a in arrays), **library_kwargs).shape)
    if output_grad is None:
        output_grad = normal(seed, shape, dtype)
    value, grads = run_ours(our_op, arrays, output_grad, dtype, **our_kwargs)
    library_value, library_grads = run_library(library_op, arrays, output_grad, **library_kwargs)
    assert_agrees(value, library_value, dtype, "value")
    for i, (grad, library_grad) in enumerate(zip(grads, library_grads)):
        if i in zero_grads:
            assert not np.any(grad), f"input {i}: expected an exactly zero gradient, got max |g| {np.abs(grad).max()}"
            worst = float(np.abs(library_grad).max())
            assert worst <= RELATIVE[dtype], f"input {i}: the library's gradient is not zero to rounding: {worst}"
            continue
        assert np.any(library_grad != 0), f"input {i}: the library's gradient is zero, nothing is tested"
        assert_agrees(grad, library_grad, dtype, f"grad of input {i}")
    return value, grads


# ---- the two primitives -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, -2.0])
def test_scale_fwd(dtype, scale):
    x = normal(0, (3, 5), dtype)
    compare(lambda t: U.scale_fwd(t, scale), lambda t: uf.scale_fwd(t, scale), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, -2.0])
def test_scale_bwd(dtype, scale):
    x = normal(0, (3, 5), dtype)
    compare(lambda t: U.scale_bwd(t, scale), lambda t: uf.scale_bwd(t, scale), [x], dtype)


# ---- matrix products ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("op", ["linear", "linear_readout"])
def test_linear(dtype, bias, constraint, op):
    arrays = [normal(1, (2, 3, 8), dtype), normal(2, (5, 8), dtype)] + ([normal(3, (5,), dtype)] if bias else [])
    ours, library = getattr(U, op), getattr(uf, op)
    compare(lambda x, w, b=None: ours(x, w, b, constraint=constraint),
            lambda x, w, b=None: library(x, w, b, constraint=constraint), arrays, dtype)


@pytest.mark.parametrize("op", ["linear", "linear_readout"])
def test_linear_default_constraint(op):
    """Both libraries' defaults: to_output_scale for linear, None for linear_readout."""
    arrays = [normal(1, (6, 8), np.float32), normal(2, (5, 8), np.float32)]
    ours, library = getattr(U, op), getattr(uf, op)
    compare(lambda x, w: ours(x, w), lambda x, w: library(x, w, None), arrays, np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("constraint", CONSTRAINTS + ["default"])
@pytest.mark.parametrize("shapes", [((4, 6), (6, 3)), ((2, 4, 6), (2, 6, 3)), ((3, 1, 4, 6), (2, 6, 5)),
                                    ((2, 4, 6), (6, 3))])
def test_matmul(dtype, constraint, shapes):
    arrays = [normal(4, shapes[0], dtype), normal(5, shapes[1], dtype)]
    kwargs = {} if constraint == "default" else {"constraint": constraint}
    compare(U.matmul, uf.matmul, arrays, dtype, kwargs)


# ---- nonlinearities -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("mult", [0.25, 1.0, 3.0])
def test_gelu(dtype, constraint, mult):
    x = 2.0 * normal(6, (4, 7), dtype)
    compare(U.gelu, uf.gelu, [x], dtype, {"mult": mult, "constraint": constraint},
            {"mult": mult, "constraint": constraint, "approximate": "tanh"})


def test_gelu_default_is_tanh_not_erf():
    """Documented departure (DESIGN.md section 5): ours is tanh-GELU, uf's default is erf-GELU.

    The two differ by the tanh approximation's error (at most ~5e-4 in gelu(x) for any x,
    Hendrycks & Gimpel 2016), times the output scale; far above float32 rounding, far below 1e-2.
    """
    x = np.linspace(-4.0, 4.0, 161, dtype=np.float32)
    ours = U.gelu(Tensor(x)).data
    with torch.no_grad():
        erf = uf.gelu(torch.tensor(x)).numpy()
        tanh = uf.gelu(torch.tensor(x), approximate="tanh").numpy()
    assert_agrees(ours, tanh, np.float32, "tanh GELU")
    difference = np.abs(ours - erf).max()
    assert 1e-4 < difference < 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("mult", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(dtype, constraint, mult, axis):
    x = normal(7, (5, 6), dtype)
    compare(U.softmax, uf.softmax, [x], dtype, {"axis": axis, "mult": mult, "constraint": constraint},
            {"dim": axis, "mult": mult, "constraint": constraint})


def test_softmax_default_constraint():
    x = normal(7, (3, 9), np.float32)
    compare(U.softmax, uf.softmax, [x], np.float32, {"mult": 2.0}, {"dim": -1, "mult": 2.0})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_layer_norm(dtype, affine):
    x = 3.0 * normal(8, (2, 3, 10), dtype) + 1.0
    weight = 1.0 + 0.5 * normal(9, (10,), dtype)
    bias = normal(10, (10,), dtype)
    features = (10,)

    if affine == "none":
        compare(U.layer_norm, lambda t: uf.layer_norm(t, features), [x], dtype)
    elif affine == "weight":
        compare(lambda t, w: U.layer_norm(t, w), lambda t, w: uf.layer_norm(t, features, w), [x, weight], dtype)
    elif affine == "bias":
        compare(lambda t, b: U.layer_norm(t, None, b), lambda t, b: uf.layer_norm(t, features, None, b),
                [x, bias], dtype)
    else:
        compare(lambda t, w, b: U.layer_norm(t, w, b, eps=1e-3),
                lambda t, w, b: uf.layer_norm(t, features, w, b, eps=1e-3), [x, weight, bias], dtype)


# ---- lookups, residuals, dropout ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ids_shape", [(7,), (3, 5)])
def test_embedding(dtype, ids_shape):
    ids = np.random.default_rng(11).integers(0, 6, size=ids_shape)  # repeats: rows accumulate
    weight = normal(12, (6, 4), dtype)
    # Only the weight is differentiable; the ids are the same int64 array on both sides.
    compare(lambda w: U.embedding(ids, w), lambda w: uf.embedding(torch.from_numpy(ids), w), [weight], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [0.2, 1.0, 2.5])
def test_residual_split(dtype, tau):
    """Each of the two outputs gets its own output gradient; x's gradient is their weighted sum."""
    x = normal(13, (3, 4), dtype)
    grad_residual, grad_skip = normal(14, (3, 4), dtype), normal(15, (3, 4), dtype)
    with default_dtype(dtype):
        ours_x = Tensor(x, requires_grad=True)
        residual, skip = U.residual_split(ours_x, tau)
        residual.backward(grad_residual)
        skip.backward(grad_skip)  # accumulates into ours_x.grad
    library_x = torch.tensor(x, requires_grad=True)
    library_residual, library_skip = uf.residual_split(library_x, tau)
    torch.autograd.backward([library_residual, library_skip], [torch.tensor(grad_residual), torch.tensor(grad_skip)])
    assert_agrees(residual.data, library_residual.detach().numpy(), dtype, "residual")
    assert_agrees(skip.data, library_skip.detach().numpy(), dtype, "skip")
    assert_agrees(ours_x.grad, library_x.grad.numpy(), dtype, "grad x")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [0.2, 1.0, 2.5])
def test_residual_add(dtype, tau):
    arrays = [normal(16, (3, 4), dtype), normal(17, (3, 4), dtype)]
    compare(lambda r, s: U.residual_add(r, s, tau), lambda r, s: uf.residual_add(r, s, tau), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [0.2, 1.0, 2.5])
def test_residual_block(dtype, tau):
    """split -> a unit-scaled branch -> add, as in a transformer block (uf.residual_apply)."""
    weight = normal(18, (4, 4), dtype)

    def ours(x, w):
        residual, skip = U.residual_split(x, tau)
        return U.residual_add(U.linear(U.gelu(residual), w), skip, tau)

    def library(x, w):
        return uf.residual_apply(lambda r: uf.linear(uf.gelu(r, approximate="tanh"), w, None), x, tau)

    compare(ours, library, [normal(19, (5, 4), dtype), weight], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.0, 0.3, 0.9, 1.0])
def test_dropout_eval(dtype, p):
    """Evaluation mode: both scale by sqrt(1 - p) forward and backward and drop nothing."""
    x = normal(20, (4, 5), dtype)
    rng = np.random.default_rng(0)
    output_grad = normal(21, (4, 5), dtype)
    value, (grad,) = run_ours(lambda t: U.dropout(t, p, rng, training=False), [x], output_grad, dtype)
    library_value, (library_grad,) = run_library(lambda t: uf.dropout(t, p, training=False), [x], output_grad)
    assert_agrees(value, library_value, dtype, "value")
    assert_agrees(grad, library_grad, dtype, "grad")


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_training_p0(dtype):
    x = normal(22, (4, 5), dtype)
    rng = np.random.default_rng(0)
    compare(lambda t: U.dropout(t, 0.0, rng), lambda t: uf.dropout(t, 0.0), [x], dtype)


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_dropout_training_factors(p):
    """Training with p > 0: the masks come from different generators, so compare what a mask does.

    On both sides every element is either dropped (value and gradient 0) or kept with value and
    gradient multiplied by the same factor, ``sqrt(1 - p) / (1 - p)``; the factors agree, and each
    side's kept fraction is near 1 - p (2000 elements: within 5 binomial standard deviations).
    """
    dtype = np.float32
    x = normal(23, (40, 50), dtype)
    output_grad = normal(24, (40, 50), dtype)
    torch.manual_seed(0)
    factors = {}
    for side, (value, (grad,)) in {
        "ours": run_ours(lambda t: U.dropout(t, p, np.random.default_rng(1)), [x], output_grad, dtype),
        "library": run_library(lambda t: uf.dropout(t, p), [x], output_grad),
    }.items():
        kept = value != 0
        assert np.array_equal(kept, grad != 0), side
        assert abs(kept.mean() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / x.size), side
        value_factor, grad_factor = value[kept] / x[kept], grad[kept] / output_grad[kept]
        np.testing.assert_allclose(value_factor, value_factor[0], rtol=1e-6, err_msg=side)
        np.testing.assert_allclose(grad_factor, grad_factor[0], rtol=1e-6, err_msg=side)
        factors[side] = (value_factor[0], grad_factor[0])
    np.testing.assert_allclose(factors["ours"], factors["library"], rtol=1e-6)


# ---- attention and loss -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mult", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("causal, seqs", [(False, (6, 6)), (True, (6, 6)), (False, (4, 7)), (True, (4, 7)),
                                          (False, (1, 1))])  # causal at key length 1: the test below
def test_scaled_dot_product_attention(dtype, causal, mult, seqs):
    """(query length, key length); causal masks are top-left aligned on both sides (torch's is_causal)."""
    query_seq, key_seq = seqs
    arrays = [normal(25, (2, 3, query_seq, 8), dtype), normal(26, (2, 3, key_seq, 8), dtype),
              normal(27, (2, 3, key_seq, 8), dtype)]
    compare(U.scaled_dot_product_attention, uf.scaled_dot_product_attention, arrays, dtype,
            {"causal": causal, "mult": mult}, {"is_causal": causal, "mult": mult},
            zero_grads=(0, 1) if key_seq == 1 else ())  # one key: softmax is constant 1


def test_scaled_dot_product_attention_causal_length_one():
    """Documented departure: uf's causal rule uses ``sqrt(log(s) / s)``, 0 at s = 1, and fails
    (``math.log(0)``); ours uses the exact scale 1, and the output is v itself (one key, weight 1)."""
    q, k, v = (normal(seed, (2, 1, 8), np.float32) for seed in (28, 29, 30))
    with pytest.raises(ValueError, match="math domain error"):
        uf.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=True)
    value, (grad_q, grad_k, grad_v) = run_ours(
        lambda *t: U.scaled_dot_product_attention(*t, causal=True), [q, k, v], np.ones_like(v), np.float32)
    np.testing.assert_array_equal(value, v)
    np.testing.assert_array_equal(grad_v, np.ones_like(v))
    np.testing.assert_array_equal(grad_q, 0.0)
    np.testing.assert_array_equal(grad_k, 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mult", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("loss_grad", [1.0, 0.3])
@pytest.mark.parametrize("shape", [(6, 7), (7,)])
def test_cross_entropy(dtype, mult, loss_grad, shape):
    """Loss value (mean over rows) and logits gradient ``loss_grad (softmax - onehot) V / sqrt(V - 1)``
    (not divided by the row count, ``mult`` applied in the forward pass only) agree with uf's."""
    logits = 2.0 * normal(31, shape, dtype)
    targets = np.random.default_rng(32).integers(0, shape[-1], size=shape[:-1])
    output_grad = np.array(loss_grad, dtype=dtype)
    compare(lambda z: U.cross_entropy(z, targets, mult=mult), lambda z: uf.cross_entropy(z, torch.from_numpy(targets),
            mult=mult), [logits], dtype, output_grad=output_grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_leading_axes(dtype):
    """uf takes (N, V) logits only; ours takes (..., V) and equals uf on the flattened view."""
    logits = normal(33, (2, 3, 5), dtype)
    targets = np.random.default_rng(34).integers(0, 5, size=(2, 3))
    compare(lambda z: U.cross_entropy(z, targets, mult=2.0),
            lambda z: uf.cross_entropy(z.reshape(6, 5), torch.from_numpy(targets.reshape(6)), mult=2.0),
            [logits], dtype, output_grad=np.array(1.0, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_ignore_index(dtype):
    """Documented departure: with ignored rows uf divides the summed loss by all N rows, ours (like
    torch's mean) by the counted ones, so ours * counted == uf * N. The gradients are the same:
    unit-scaled, not divided by a count, zero on the ignored rows."""
    logits = normal(35, (8, 5), dtype)
    targets = np.random.default_rng(36).integers(0, 5, size=8)
    targets[[1, 4, 5]] = -100
    output_grad = np.array(1.0, dtype=dtype)
    value, (grad,) = run_ours(lambda z: U.cross_entropy(z, targets, mult=1.5, ignore_index=-100), [logits],
                              output_grad, dtype)
    library_value, (library_grad,) = run_library(
        lambda z: uf.cross_entropy(z, torch.from_numpy(targets), ignore_index=-100, mult=1.5), [logits], output_grad)
    assert_agrees(value * 5, library_value * 8, dtype, "loss times rows averaged over")
    assert not np.isclose(value, library_value, rtol=0.1)
    assert_agrees(grad, library_grad, dtype, "grad")
    np.testing.assert_array_equal(grad[[1, 4, 5]], 0.0)


def test_empty_batch():
    """Edge case outside the library's domain: uf divides by the batch size (linear: rows, embedding:
    ids) and raises ZeroDivisionError on an empty batch; ours returns the empty output and zero
    weight gradients (any finite scale times an empty sum)."""
    x, weight = np.zeros((0, 8), np.float32), normal(37, (5, 8), np.float32)
    with pytest.raises(ZeroDivisionError):
        uf.linear(torch.tensor(x), torch.tensor(weight), None)
    value, (grad_x, grad_weight) = run_ours(U.linear, [x, weight], np.zeros((0, 5), np.float32), np.float32)
    assert value.shape == (0, 5) and grad_x.shape == (0, 8)
    np.testing.assert_array_equal(grad_weight, 0.0)

    ids, table = np.zeros((0,), np.int64), normal(38, (6, 4), np.float32)
    with pytest.raises(ZeroDivisionError):
        uf.embedding(torch.from_numpy(ids), torch.tensor(table))
    value, (grad_table,) = run_ours(lambda w: U.embedding(ids, w), [table], np.zeros((0, 4), np.float32), np.float32)
    assert value.shape == (0, 4)
    np.testing.assert_array_equal(grad_table, 0.0)
