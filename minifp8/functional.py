"""Differentiable standard ops: ``import minifp8.functional as F``.

Shapes follow torch: a linear weight is ``(out_features, in_features)``; attention tensors are
``(batch, heads, seq, head_dim)``; ``cross_entropy`` takes logits ``(..., V)`` and integer
targets ``(...)``. Axes are called ``axis`` as in NumPy.

Softmax, log-softmax, cross-entropy, layer norm and attention are *fused*: one graph node each
with a closed-form backward (derived in each docstring), not a chain of small ops. That is both
faster and easier to read than the chain. Every op computes in its operands' dtype (float32 in
training, float64 under gradcheck) and all randomness comes from an explicit
``np.random.Generator``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .autograd import Tensor, _axis, _check_floating, _sum_rows_by_id, as_tensor, make_op, matmul
from .formats import _check_bool, _is_int, _is_real, _plain_array

__all__ = [
    "concat", "cross_entropy", "dropout", "embedding", "exp", "gelu", "layer_norm", "linear", "log",
    "log_softmax", "matmul", "relu", "scaled_dot_product_attention", "sigmoid", "softmax", "split", "sqrt",
    "stack", "tanh",
]


def _floating(x: Tensor | ArrayLike, op: str, name: str = "input") -> Tensor:
    """``x`` as a Tensor, which must be floating (`autograd._check_floating`)."""
    return _check_floating(as_tensor(x), op, name)


def _generator(rng, op: str) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{op}: rng must be a np.random.Generator (e.g. np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    return rng


def _real(value, op: str, name: str) -> float:
    """``value`` as a Python float; ``TypeError`` unless it is a real number (bool is not one)."""
    if not _is_real(value):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)


def _non_negative(value, op: str, name: str) -> float:
    """``_real``, and a ``ValueError`` unless the number is finite and >= 0 (an eps, a weight decay)."""
    number = _real(value, op, name)
    if not 0 <= number < math.inf:
        raise ValueError(f"{op}: {name} must be >= 0 and finite, got {value}")
    return number


def _nonempty_axis(x: Tensor, axis: int, op: str) -> int:
    """``_axis``, and a clear error when that axis has length 0 (a softmax over nothing)."""
    axis = _axis(axis, x.ndim, op)
    if x.shape[axis] == 0:
        raise ValueError(f"{op}: axis {axis} of shape {x.shape} is empty")
    return axis


# ---- elementwise -------------------------------------------------------------------------------

def exp(x: Tensor | ArrayLike) -> Tensor:
    """Elementwise e^x."""
    return _floating(x, "exp").exp()


def log(x: Tensor | ArrayLike) -> Tensor:
    """Elementwise natural logarithm."""
    return _floating(x, "log").log()


def tanh(x: Tensor | ArrayLike) -> Tensor:
    """Elementwise tanh; d tanh = 1 - tanh^2."""
    return _floating(x, "tanh").tanh()


def sqrt(x: Tensor | ArrayLike) -> Tensor:
    """Elementwise square root; d sqrt(x) = 1 / (2 sqrt(x))."""
    x = _floating(x, "sqrt")
    out_data = np.sqrt(x.data)
    return make_op(out_data, (x,), lambda g: (g * 0.5 / out_data,), "sqrt")


def relu(x: Tensor | ArrayLike) -> Tensor:
    """max(x, 0); the gradient at exactly 0 is taken as 0."""
    x = _floating(x, "relu")
    return make_op(np.maximum(x.data, 0.0), (x,), lambda g: (g * (x.data > 0),), "relu")


def sigmoid(x: Tensor | ArrayLike) -> Tensor:
    """1 / (1 + e^-x), computed without overflow; d sigmoid = s (1 - s).

    With ``e = exp(-|x|)`` (never above 1), ``s`` is ``1 / (1 + e)`` for x >= 0 and ``e / (1 + e)`` for
    x < 0, and ``1 - s`` the other one: both keep their relative precision down to the underflow of
    ``e``, where ``1 - s`` computed as a difference would cancel (x > 17 in float32).
    """
    x = _floating(x, "sigmoid")
    with np.errstate(under="ignore"):  # (e underflows to 0 for |x| > ~87 in float32: s is then exact)
        e = np.exp(-np.abs(x.data))
        denominator = 1.0 + e
        large, small = 1.0 / denominator, e / denominator  # sigmoid(|x|), sigmoid(-|x|) = 1 - sigmoid(|x|)
    positive = x.data >= 0
    out_data = np.where(positive, large, small)
    complement = np.where(positive, small, large)  # 1 - s
    return make_op(out_data, (x,), lambda g: (g * out_data * complement,), "sigmoid")


_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715
# |x| beyond which gelu's backward clips x after an overflow: far past where tanh rounds to +-1
# (|x| ~ 5.4 in float32, 7.2 in float64), so the gradient there is already exactly its limit,
# and far below where 2 x (c/2 + 3 a c x^2 / 2) overflows (|x| 1.47e13 in float32).
_GELU_CLIP = 1e6


def gelu(x: Tensor | ArrayLike) -> Tensor:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016, §2; GPT-2's ``gelu``).

    ``y = x/2 (1 + t)`` with ``t = tanh(c (x + a x^3))``, ``c = sqrt(2/pi)``, ``a = 0.044715``.
    With ``s = 1 + t`` (kept from the forward pass) and ``1 - t^2 = s (2 - s)``:
    ``dy/dx = s/2 + x/2 (1 - t^2) c (1 + 3 a x^2) = s (1/2 + w (2 - s))``, ``w = x (c/2 + 3 a c x^2 / 2)``.

    Huge inputs: ``2 w`` overflows to inf for float32 ``|x| >= 1.47e13`` (1.19e103 in float64),
    where ``2 - s`` or ``s`` is exactly 0, and inf times 0 is NaN. The gradient there is its limit
    instead: exactly 1 for large positive x and 0 (-0.0) for large negative x, +-inf included (torch
    gives NaN beyond 1.8e19 and at +-inf). NumPy's floating-point status flags, which it checks
    after every ufunc anyway, tell the backward that something overflowed; only then is it computed
    again with x clipped to +-1e6, which gives every other element the same bits (so the usual
    inputs take no extra pass). The value of a huge input is ``x`` (or -0.0 for negative x), up to
    the dtype's maximum; ``gelu(-inf)`` is NaN (``-inf * 0``, as in torch).

    Precision: ``1 + t`` cancels for negative x, so in float32 the relative error of the output passes
    1e-3 below about x = -3.9 and 10% below -4.8, while its absolute error stays under 1.6e-7 (torch's
    tanh formula does the same; ``2 / (1 + exp(-2u))`` would not, but would move every output's bits).
    """
    x = _floating(x, "gelu")
    xd = x.data
    with np.errstate(over="ignore", under="ignore"):  # (a cubic that overflows is harmless: tanh(+-inf) = +-1)
        s = np.multiply(xd, xd, out=np.empty_like(xd))  # (an array for 0-d x too, where xd * xd is a scalar)
        s *= _GELU_C * _GELU_A
        s += _GELU_C
        s *= xd
    np.tanh(s, out=s)
    s += 1.0
    # x/2 first, then times s: (s x)/2 would overflow to inf for |x| above half the dtype's maximum
    # (s = 2 there), and both orders round the same (halving is exact away from the subnormals, and
    # there s = 1), so every other output has the same bits
    with np.errstate(under="ignore"):
        out_data = xd * 0.5
        out_data *= s

    def backward(g):
        # Only overflow and invalid tell of huge |x|: a tiny product that underflows must neither
        # trigger the second pass nor raise where the caller's np.errstate raises on underflow.
        with np.errstate(under="ignore"):
            try:
                with np.errstate(over="raise", invalid="raise"):
                    return (_gelu_grad(xd, s, g),)
            except FloatingPointError:  # inf * 0 for huge |x| (docstring), or g itself overflows
                return (_gelu_grad(np.clip(xd, -_GELU_CLIP, _GELU_CLIP), s, g),)

    return make_op(out_data, (x,), backward, "gelu")


def _gelu_grad(xd: np.ndarray, s: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g * dgelu/dx`` from x and ``s = 1 + t`` (`gelu`'s docstring), in place on one new array."""
    grad = xd * xd
    grad *= 1.5 * _GELU_C * _GELU_A
    grad += 0.5 * _GELU_C
    grad *= xd                # w
    ws = grad * s
    grad *= 2.0
    grad -= ws                # w (2 - s)
    grad += 0.5
    grad *= s
    grad *= g
    return grad


# ---- matrix products ---------------------------------------------------------------------------

def _plus_bias(out: np.ndarray, bias: Tensor | None) -> np.ndarray:
    """``out + bias``, in place into ``out`` (an array the op made) unless NumPy's promotion widens it:
    a float64 bias on float32 data gives float64, as ``x @ w.T + b`` does (``+=`` rounded it to float32)."""
    if bias is None:
        return out
    if np.result_type(out, bias.data) != out.dtype:
        return out + bias.data
    out += bias.data
    return out


def linear(x: Tensor | ArrayLike, weight: Tensor | ArrayLike, bias: Tensor | ArrayLike | None = None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``.

    All leading axes of ``x`` are flattened into one GEMM (forward and both backward GEMMs).
    Zero features are allowed: ``in_features == 0`` gives ``bias`` (or zeros).
    """
    x = _floating(x, "linear", "x")
    weight = _floating(weight, "linear", "weight")
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got shape {weight.shape}")
    out_features, in_features = weight.shape
    if x.ndim == 0 or x.shape[-1] != in_features:
        raise ValueError(f"linear: x has shape {x.shape}, its last axis must be in_features={in_features} "
                         f"(weight shape {weight.shape})")
    if bias is not None:
        bias = _floating(bias, "linear", "bias")
        if bias.shape != (out_features,):
            raise ValueError(f"linear: bias must have shape ({out_features},), got {bias.shape}")
    rows = math.prod(x.shape[:-1])  # not reshape(-1, ...), which cannot infer rows when a size is 0
    x2 = x.data.reshape(rows, in_features)
    out = _plus_bias(x2 @ weight.data.T, bias)
    out = out.reshape(x.shape[:-1] + (out_features,))

    def backward(g):
        g2 = g.reshape(rows, out_features)
        grad_x = (g2 @ weight.data).reshape(x.shape) if x.requires_grad else None
        grad_w = g2.T @ x2 if weight.requires_grad else None
        grad_b = g2.sum(axis=0) if bias is not None and bias.requires_grad else None
        return (grad_x, grad_w) if bias is None else (grad_x, grad_w, grad_b)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return make_op(out, parents, backward, "linear")


# ---- normalisation -----------------------------------------------------------------------------

def softmax(x: Tensor | ArrayLike, axis: int = -1) -> Tensor:
    """Softmax along ``axis``, shifted by the max for stability.

    Backward (s = softmax(x)): ``dx = s * (g - sum(g * s, axis))``.
    """
    x = _floating(x, "softmax")
    axis = _nonempty_axis(x, axis, "softmax")
    with np.errstate(over="ignore"):  # (finite logits more than FLT_MAX below the max shift to -inf: exp 0)
        s = x.data - x.data.max(axis=axis, keepdims=True)
    with np.errstate(under="ignore"):  # (the exponentials of far-below-max logits round to 0, as they must)
        np.exp(s, out=s)
        s /= s.sum(axis=axis, keepdims=True)

    def backward(g):
        with np.errstate(under="ignore"):  # (s holds tiny probabilities by construction)
            grad = g * s
            dot = grad.sum(axis=axis, keepdims=True)
            grad -= s * dot
        return (grad,)

    return make_op(s, (x,), backward, "softmax")


def log_softmax(x: Tensor | ArrayLike, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``. Backward: ``dx = g - softmax(x) * sum(g, axis)``."""
    x = _floating(x, "log_softmax")
    axis = _nonempty_axis(x, axis, "log_softmax")
    with np.errstate(over="ignore"):  # (as in softmax: logits more than FLT_MAX below the max give -inf)
        shifted = x.data - x.data.max(axis=axis, keepdims=True)
    with np.errstate(under="ignore"):  # (as in softmax)
        out_data = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))

    def backward(g):
        with np.errstate(under="ignore"):
            return (g - np.exp(out_data) * g.sum(axis=axis, keepdims=True),)

    return make_op(out_data, (x,), backward, "log_softmax")


def layer_norm(x: Tensor | ArrayLike, weight: Tensor | ArrayLike | None = None, bias: Tensor | ArrayLike | None = None,
               eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last axis (Ba, Kiros & Hinton 2016), biased variance as torch.

    ``xhat = (x - mean) / sqrt(var + eps)``, ``y = xhat * weight + bias``. With ``h = g * weight``
    and D the axis length, the fused backward is
    ``dx = (h - mean(h) - xhat * mean(h * xhat)) / sqrt(var + eps)``,
    ``dweight = sum(g * xhat)``, ``dbias = sum(g)`` over all leading axes.

    With ``eps = 0`` a constant row has no scale to divide by: its outputs and gradients are NaN, as
    in torch, whatever its magnitude (quietly: the row, not an operation, is undefined).
    """
    x = _floating(x, "layer_norm", "x")
    if x.ndim == 0:
        raise ValueError("layer_norm: x must have at least one axis")
    features = x.shape[-1]
    if features == 0:
        raise ValueError(f"layer_norm: the last axis of x (shape {x.shape}) is empty: nothing to normalise")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and as_tensor(p).shape != (features,):
            raise ValueError(f"layer_norm: {name} must have shape ({features},), got {as_tensor(p).shape}")
    weight = None if weight is None else _floating(weight, "layer_norm", "weight")
    bias = None if bias is None else _floating(bias, "layer_norm", "bias")
    _non_negative(eps, "layer_norm", "eps")  # (an infinite eps would zero every output)
    x2 = x.data.reshape(-1, features)
    with np.errstate(over="ignore", invalid="ignore"):  # (a finite row whose sums overflow: redone below)
        xhat = x2 - x2.mean(axis=1, keepdims=True)
        var = np.einsum("ij,ij->i", xhat, xhat)[:, None]
    var /= features
    var += eps
    with np.errstate(divide="ignore", invalid="ignore"):  # (eps = 0 and a constant row: 0 * Inf, NaN)
        rstd = 1.0 / np.sqrt(var)
        huge = ~np.isfinite(var) & np.isfinite(x2).all(axis=1, keepdims=True)
        if huge.any():  # (a variance of Inf gave every output 0, a mean of Inf - Inf NaN: found in reviews)
            rows = huge[:, 0]
            xhat[rows], rstd[rows] = _normalized_huge_rows(x2[rows], eps)
            np.multiply(xhat, rstd, out=xhat, where=~huge)
        else:
            xhat *= rstd
    out = _plus_bias(xhat * weight.data if weight is not None else xhat.copy(), bias)
    out = out.reshape(x.shape)

    def backward(g):
        g2 = g.reshape(-1, features)
        h = g2 * weight.data if weight is not None else g2
        grad_x = None
        if x.requires_grad:
            h_xhat_mean = np.einsum("ij,ij->i", h, xhat)[:, None]
            h_xhat_mean /= features
            grad_x = xhat * h_xhat_mean
            np.subtract(h, grad_x, out=grad_x)
            grad_x -= h.mean(axis=1, keepdims=True)
            grad_x *= rstd
            grad_x = grad_x.reshape(x.shape)
        grads = [grad_x]
        if weight is not None:
            grads.append(np.einsum("ij,ij->j", g2, xhat) if weight.requires_grad else None)
        if bias is not None:
            grads.append(g2.sum(axis=0) if bias.requires_grad else None)
        return tuple(grads)

    parents = (x,) + tuple(p for p in (weight, bias) if p is not None)
    return make_op(out, parents, backward, "layer_norm")


def _normalized_huge_rows(rows: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """`layer_norm`'s ``xhat`` and ``rstd`` of finite rows whose mean or sum of squares overflows
    (magnitudes near sqrt(FLT_MAX) = 1.8e19 and up): computed on the rows divided by their largest
    magnitude, then scaled back, ``rstd = 1 / (m * sqrt(var(x / m) + eps / m**2))``."""
    largest = np.max(np.abs(rows), axis=1, keepdims=True)  # (> 1e18: the squares overflowed)
    with np.errstate(under="ignore", divide="ignore"):  # (x / m, eps / m**2 and 1 / m may leave the normals)
        scaled = rows / largest
        scaled -= scaled.mean(axis=1, keepdims=True)
        variance = np.mean(scaled * scaled, axis=1, keepdims=True)
        local = 1.0 / np.sqrt(variance + (eps / largest) / largest)
        constant = variance == 0  # (a constant row: xhat 0 and rstd 1 / sqrt(eps), as for any constant row;
        # with eps = 0, NaN, as 0 * Inf gives the others)
        xhat = np.multiply(scaled, local, out=np.full_like(scaled, 0.0 if eps > 0 else np.nan), where=~constant)
        rstd = np.where(constant, 1.0 / np.sqrt(np.asarray(eps, rows.dtype)), local / largest)
        return xhat, rstd


# ---- lookups and losses ------------------------------------------------------------------------

def _integer_ids(ids: Tensor | ArrayLike, op: str, name: str) -> np.ndarray:
    data = ids.data if isinstance(ids, Tensor) else _plain_array(ids, f"{op}: {name}")
    if data.dtype.kind not in "iu":
        raise TypeError(f"{op}: {name} must be an integer array or tensor, got dtype {data.dtype}")
    return data


def embedding(ids: Tensor | ArrayLike, weight: Tensor | ArrayLike) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) picked by integer ``ids`` of any shape: ``(*ids.shape, dim)``.

    Backward: the gradient rows are summed by id (a repeated id sums its gradients), in order,
    by `_sum_rows_by_id`.
    """
    ids = _integer_ids(ids, "embedding", "ids")
    weight = _floating(weight, "embedding", "weight")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, dim), got shape {weight.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= weight.shape[0]):
        bad = ids[(ids < 0) | (ids >= weight.shape[0])].flat[0]
        raise IndexError(f"embedding: id {bad} is out of range for {weight.shape[0]} embeddings")

    rows = ids.reshape(-1).astype(np.intp)  # a copy: the ids are no parent, a later change must not reach backward

    def backward(g):  # (rows.size, not -1: reshape cannot infer it when dim is 0)
        return (_sum_rows_by_id(rows, g.reshape(rows.size, weight.shape[1]), weight.shape[0]),)

    return make_op(weight.data[ids], (weight,), backward, "embedding")


def cross_entropy(logits: Tensor | ArrayLike, targets: Tensor | ArrayLike, *,
                  ignore_index: int | None = None) -> Tensor:
    """Mean cross-entropy of ``logits`` (..., V) against integer class ``targets`` (...).

    ``loss = mean_n(logsumexp(z_n) - z_n[t_n])`` over the tokens whose target is not
    ``ignore_index`` (an int, or None to count every token). Fused backward:
    ``dz_n = g * (softmax(z_n) - onehot(t_n)) / N``.
    """
    logits = _floating(logits, "cross_entropy", "logits")
    targets = _integer_ids(targets, "cross_entropy", "targets")
    if logits.ndim == 0 or targets.shape != logits.shape[:-1]:
        raise ValueError(f"cross_entropy: targets shape {targets.shape} must be the logits shape {logits.shape} "
                         f"without its last (class) axis")
    classes = logits.shape[-1]
    if classes == 0:
        raise ValueError(f"cross_entropy: logits of shape {logits.shape} have no classes")
    if ignore_index is not None and not _is_int(ignore_index):
        raise TypeError(f"cross_entropy: ignore_index must be an int or None, got {ignore_index!r}")
    z = logits.data.reshape(-1, classes)
    t = targets.reshape(-1)
    valid = t != ignore_index if ignore_index is not None else np.ones(t.shape, dtype=bool)
    bad = valid & ((t < 0) | (t >= classes))
    if bad.any():
        raise IndexError(f"cross_entropy: target {t[bad][0]} is out of range for {classes} classes")
    count = int(valid.sum())
    if count == 0:
        raise ValueError("cross_entropy: no targets to average (empty, or all equal to ignore_index)")
    rows = np.flatnonzero(valid)
    picked_targets = t[rows]
    # only the counted rows: an ignored row (padding, all -inf) takes no part, not even in a warning
    counted = z if count == len(t) else z[rows]
    with np.errstate(over="ignore"):  # (as in softmax: a logit more than FLT_MAX below the max is -inf)
        shifted = counted - counted.max(axis=1, keepdims=True)
    with np.errstate(under="ignore"):  # (as in softmax)
        e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    positions = np.arange(count)
    losses = np.log(total[:, 0]) - shifted[positions, picked_targets]
    out_data = np.asarray(losses.sum() / count, dtype=z.dtype)

    def backward(g):
        with np.errstate(under="ignore"):
            grad = e / total
            grad[positions, picked_targets] -= 1.0
            grad *= g / count
        if count != len(t):  # (the ignored rows' gradient is zero)
            grad, counted_grad = np.zeros(z.shape, dtype=grad.dtype), grad
            grad[rows] = counted_grad
        return (grad.reshape(logits.shape),)

    return make_op(out_data, (logits,), backward, "cross_entropy")


# ---- randomness ----------------------------------------------------------------------------------

def dropout(x: Tensor | ArrayLike, p: float, rng: np.random.Generator, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` (inverted dropout).

    The keep mask is ``rng.random(x.shape, dtype=float32) >= p``, the same in float32 and float64.
    ``training=False`` or ``p == 0`` returns ``x`` itself and draws nothing.
    """
    x = _floating(x, "dropout")
    if not 0.0 <= _real(p, "dropout", "p") <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    _generator(rng, "dropout")
    if not _check_bool(training, "dropout: training") or p == 0.0:
        return x
    if p == 1.0:
        mask = np.zeros(x.shape, dtype=x.dtype)
    else:
        mask = np.multiply(rng.random(x.shape, dtype=np.float32) >= p, 1.0 / (1.0 - p), dtype=x.dtype)
    return make_op(x.data * mask, (x,), lambda g: (g * mask,), "dropout")


# ---- attention ---------------------------------------------------------------------------------

def scaled_dot_product_attention(q: Tensor | ArrayLike, k: Tensor | ArrayLike, v: Tensor | ArrayLike,
                                 causal: bool = False, *, scale: float | None = None,
                                 dropout_p: float = 0.0, rng: np.random.Generator | None = None) -> Tensor:
    """``softmax(q k^T * scale [+ causal mask]) v`` on (..., seq, head_dim) tensors, one fused op.

    Vaswani et al. 2017, eq. 1; ``scale`` defaults to ``1/sqrt(head_dim)``. ``causal`` lets query i
    see keys j <= i (top-left aligned, as torch's ``is_causal``). ``dropout_p`` drops attention
    probabilities (needs ``rng``). With P the probabilities, P' = dropout(P) and g the output
    gradient:
    ``dV = P'^T g``, ``dP = dropout_mask * (g V^T)``, ``dS = P * (dP - sum(dP * P, -1))``,
    ``dQ = scale dS K``, ``dK = scale dS^T Q``.
    """
    q = _floating(q, "scaled_dot_product_attention", "q")
    k = _floating(k, "scaled_dot_product_attention", "k")
    v = _floating(v, "scaled_dot_product_attention", "v")
    causal = _check_bool(causal, "scaled_dot_product_attention: causal")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(f"scaled_dot_product_attention: q, k, v must be at least 2-D (..., seq, head_dim), "
                         f"got {q.shape}, {k.shape}, {v.shape}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"scaled_dot_product_attention: incompatible shapes q {q.shape}, k {k.shape}, v {v.shape}: "
                         "need equal leading axes, q and k the same head_dim, k and v the same seq")
    if k.shape[-2] == 0:
        raise ValueError(f"scaled_dot_product_attention: no keys: k has shape {k.shape}, so the softmax is over nothing")
    if not 0.0 <= _real(dropout_p, "scaled_dot_product_attention", "dropout_p") < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    generator = _generator(rng, "scaled_dot_product_attention") if dropout_p > 0.0 or rng is not None else None
    if dropout_p == 0.0:  # (a given rng is checked, but p == 0 draws nothing from it, as `dropout`)
        generator = None
    if scale is None and q.shape[-1] == 0:
        raise ValueError(f"scaled_dot_product_attention: head_dim 0 (q has shape {q.shape}) has no default scale "
                         "1/sqrt(head_dim); pass scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else _real(scale, "scaled_dot_product_attention", "scale")
    if not math.isfinite(scale):
        raise ValueError(f"scaled_dot_product_attention: scale must be finite, got {scale}")
    q_scaled = q.data * scale
    k_t = k.data.swapaxes(-1, -2)
    probs = q_scaled @ k_t
    if causal:
        rows, cols = probs.shape[-2:]
        probs += np.triu(np.full((rows, cols), -np.inf, dtype=probs.dtype), k=1)
    with np.errstate(over="ignore"):  # (as in softmax)
        probs -= probs.max(axis=-1, keepdims=True)
    with np.errstate(under="ignore"):  # (as in softmax; and the tiny probabilities times v)
        np.exp(probs, out=probs)
        probs /= probs.sum(axis=-1, keepdims=True)
        if generator is not None:  # (dropout_p > 0)
            mask = np.multiply(generator.random(probs.shape, dtype=np.float32) >= dropout_p, 1.0 / (1.0 - dropout_p),
                               dtype=probs.dtype)
            dropped = probs * mask
        else:
            mask, dropped = None, probs
        out_data = dropped @ v.data

    def backward(g):
        with np.errstate(under="ignore"):  # (as in softmax's backward)
            grad_v = dropped.swapaxes(-1, -2) @ g if v.requires_grad else None
            grad_q = grad_k = None
            if q.requires_grad or k.requires_grad:
                grad_s = g @ v.data.swapaxes(-1, -2)
                if mask is not None:
                    grad_s *= mask
                dot = np.einsum("...ij,...ij->...i", grad_s, probs)[..., None]
                grad_s -= dot
                grad_s *= probs
                if q.requires_grad:
                    grad_q = grad_s @ k.data
                    grad_q *= scale
                if k.requires_grad:
                    grad_k = grad_s.swapaxes(-1, -2) @ q_scaled
            return grad_q, grad_k, grad_v

    return make_op(out_data, (q, k, v), backward, "scaled_dot_product_attention")


# ---- joining and splitting ---------------------------------------------------------------------

def _sequence_of_tensors(tensors, op: str):
    """``tensors``, or a TypeError for one Tensor or ndarray: iterating it would join its rows
    (``concat(t)`` flattening ``t`` without a word) instead of the tensors meant."""
    if isinstance(tensors, (Tensor, np.ndarray)):
        raise TypeError(f"{op}: tensors must be a sequence of tensors, got one {type(tensors).__name__} of shape "
                        f"{tensors.shape} (pass [t, ...])")
    return tensors


def concat(tensors: Sequence[Tensor | ArrayLike], axis: int = 0) -> Tensor:
    """Join tensors along an existing ``axis`` (``np.concatenate``)."""
    parts = [_floating(t, "concat") for t in _sequence_of_tensors(tensors, "concat")]
    if not parts:
        raise ValueError("concat: needs at least one tensor")
    axis = _axis(axis, parts[0].ndim, "concat")
    try:
        out_data = np.concatenate([t.data for t in parts], axis=axis)
    except ValueError as error:
        raise ValueError(f"concat along axis {axis}: shapes {[t.shape for t in parts]} do not fit: {error}") from None
    bounds = np.cumsum([t.shape[axis] for t in parts])[:-1]
    return make_op(out_data, parts, lambda g: tuple(np.split(g, bounds, axis=axis)), "concat")


def stack(tensors: Sequence[Tensor | ArrayLike], axis: int = 0) -> Tensor:
    """Join same-shape tensors along a new ``axis`` (``np.stack``)."""
    parts = [_floating(t, "stack") for t in _sequence_of_tensors(tensors, "stack")]
    if not parts:
        raise ValueError("stack: needs at least one tensor")
    if len({t.shape for t in parts}) != 1:
        raise ValueError(f"stack: all tensors need the same shape, got {[t.shape for t in parts]}")
    axis = _axis(axis, parts[0].ndim + 1, "stack")
    out_data = np.stack([t.data for t in parts], axis=axis)
    return make_op(out_data, parts, lambda g: tuple(np.moveaxis(g, axis, 0)), "stack")


def split(x: Tensor | ArrayLike, split_size_or_sections: int | Sequence[int] | np.ndarray,
          axis: int = 0) -> tuple[Tensor, ...]:
    """Split ``x`` along ``axis`` into chunks, as ``torch.split``.

    An int gives chunks of that size (the last may be smaller); a list gives the chunk sizes,
    which must add up to the axis length. The chunks are views of ``x``'s data.
    """
    x = _floating(x, "split")
    axis = _axis(axis, x.ndim, "split")
    length = x.shape[axis]
    sections = split_size_or_sections
    if _is_int(sections):
        if sections <= 0:
            raise ValueError(f"split: split_size_or_sections must be a positive chunk size, got {sections}")
        sizes = [min(sections, length - start) for start in range(0, length, sections)]
        sizes = sizes or [0]  # an empty axis is one empty chunk, as torch.split gives
    else:  # (int() would cut 1.5 down to 1 without a word)
        if (not isinstance(sections, (Sequence, np.ndarray)) or isinstance(sections, str)
                or not all(map(_is_int, sections))):
            raise TypeError(f"split: split_size_or_sections must be an int or a sequence of ints, "
                            f"got {type(sections).__name__} {sections!r}")
        sizes = [int(s) for s in sections]
        if any(s < 0 for s in sizes) or sum(sizes) != length:
            raise ValueError(f"split: split_size_or_sections {sizes} must be >= 0 and add up to the axis length "
                             f"{length}")
    chunks, start = [], 0
    for size in sizes:
        index = (slice(None),) * axis + (slice(start, start + size),)
        chunks.append(x[index])
        start += size
    return tuple(chunks)
