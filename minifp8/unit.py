"""Unit-scaled ops: ``import minifp8.unit as U``.

Unit scaling (Blake et al. 2023, "Unit Scaling: Out-of-the-Box Low-Precision Training",
arXiv:2303.11257) gives every op fixed scale factors chosen so that, at initialisation, with
unit-variance inputs and unit-variance output gradients, the op's output and its input gradients
also have (about) unit variance. Tensors then sit in the middle of FP8's range without any
loss scaling or per-tensor amax. u-muP (Blake et al. 2024, arXiv:2407.17465) refines the rules
(``mult`` hyperparameters, ``to_output_scale`` constraints, the residual ``tau`` rule).

Everything is built on two primitives:

* ``scale_fwd(x, a)``: the value is ``a * x``; the gradient passes through unchanged.
* ``scale_bwd(x, b)``: the value is ``x``; the gradient is multiplied by ``b``.

and every op but three has the form ``scale_fwd(f(scale_bwd(inputs, b_i)), a)``, where ``f`` is the
ordinary op from ``minifp8.functional``. So the output is ``a * f(inputs)`` and the gradient of
input ``i`` is ``b_i`` times the ordinary gradient of ``f``: the paper's *scaled op*,
``f*(x_1..x_k) = alpha f(x_1..x_k)`` forward and ``f*_grad(x_1..x_k, g)_i = beta_i f_grad(x_1..x_k, g)_i``
backward, with ``alpha = 1 / sigma(output)`` and ``beta_i = 1 / sigma(grad input i)`` for unit inputs
and a unit output gradient. That gradient is *not* the gradient of the scaled forward function
(``a != b_i`` in general): unit scaling chooses the forward and backward scales separately.
The three exceptions are the residual pair and the loss: `residual_add` is a sum of two
``scale_fwd`` (the weights forward only) and `residual_split` two ``scale_bwd`` of one input (the
weights backward only), a scaled op only as a pair around a branch; `cross_entropy` is
``scale_bwd(f(scale_fwd(scale_bwd(logits, b), mult)), N)``, its backward scale after ``f``.

"Scale" is the standard deviation, except in u-muP's softmax model, which models the root mean
square (a flat softmax has std 0 but RMS 1/d); each docstring says which.

Constraints. Where a scale appears both forward and backward on a path that is not a cut edge, the
scales must agree, or the gradient would be wrong (Blake et al. 2023, the cut-edge rule). ``constraint``
ties them:

* ``None``: every scale is its own ideal value;
* ``"to_output_scale"`` (u-muP's default): every tied scale becomes the output scale;
* ``"gmean"`` (the 2023 paper's default): every tied scale becomes their geometric mean.

Weight gradients are never tied (a weight is a cut edge).

The formulas are those of the ``unit_scaling`` library 0.3.x (``unit_scaling.functional``,
``unit_scaling.constraints``, ``unit_scaling.core.functional``), so each op agrees with the library
op of the same name to float32 rounding on the same inputs. Each docstring states its rule. Where we
differ (GELU is the tanh approximation here; the causal attention rule at sequence length 1; the
cross-entropy's mean when tokens are ignored; cross-entropy on ``(..., V)`` logits, where the library
takes 1-D or 2-D logits only; empty batches in `linear` and `embedding`, where the library divides by
the batch size and raises and ours gives zero gradients) the docstring says so. The rules are the
library's, limits included: `scaled_dot_product_attention`'s assumes independent value rows, which a
stack of layers does not give it (its docstring has the measurements).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from . import functional as F
from .autograd import Tensor, as_tensor, make_op
from .formats import _check_bool, _plain_array

__all__ = [
    "CONSTRAINTS", "cross_entropy", "dropout", "embedding", "gelu", "layer_norm", "linear", "linear_readout",
    "logarithmic_interpolation", "matmul", "residual_add", "residual_split", "scale_bwd", "scale_fwd",
    "scaled_dot_product_attention", "softmax",
]

#: The valid values of every ``constraint`` argument.
CONSTRAINTS = (None, "to_output_scale", "gmean")


# ---- the two primitives --------------------------------------------------------------------------

def _scale_factor(scale, op: str) -> float:
    scale = F._real(scale, op, "the scale")  # a Python float keeps float32 data float32 (np.float64 would promote it)
    if not math.isfinite(scale):
        raise ValueError(f"{op}: the scale must be finite, got {scale}")
    return scale


def _floating(x: Tensor | ArrayLike, op: str, name: str = "x") -> Tensor:
    x = as_tensor(x)
    if x.data.dtype.kind != "f":
        raise TypeError(f"{op}: {name} must be a floating tensor, got dtype {x.dtype}")
    return x


def _scale_in(x: Tensor, scale: float, op: str) -> float:
    """``scale``, refused where it does not survive as a number of ``x``'s dtype (NumPy multiplies a
    float32 array by a Python float in float32: 1e39 became inf, and 0 * inf NaN)."""
    with np.errstate(over="ignore", under="ignore"):
        rounded = x.data.dtype.type(scale)
    if not np.isfinite(rounded) or (scale != 0.0 and rounded == 0.0):
        info = np.finfo(x.data.dtype)
        raise ValueError(f"{op}: the scale {scale!r} is {'inf' if not np.isfinite(rounded) else '0'} in "
                         f"{x.data.dtype}, x's dtype: its magnitude must lie in [{info.smallest_subnormal:.3g}, "
                         f"{info.max:.3g}]")
    return scale


def scale_fwd(x: Tensor | ArrayLike, a: float) -> Tensor:
    """``a * x`` in the forward pass; the gradient passes through unchanged.

    Blake et al. 2023 (arXiv:2303.11257): a scaled op applies separate forward and backward scales.
    ``a == 1`` returns ``x`` itself.
    """
    x = _floating(x, "scale_fwd")
    a = _scale_in(x, _scale_factor(a, "scale_fwd"), "scale_fwd")
    if a == 1.0:
        return x
    return make_op(x.data * a, (x,), lambda grad: (grad,), "scale_fwd")


def scale_bwd(x: Tensor | ArrayLike, b: float) -> Tensor:
    """``x`` unchanged in the forward pass; the gradient is multiplied by ``b`` in the backward pass.

    Blake et al. 2023 (arXiv:2303.11257). The output shares ``x``'s data (no copy). ``b == 1`` returns
    ``x`` itself.
    """
    x = _floating(x, "scale_bwd")
    b = _scale_in(x, _scale_factor(b, "scale_bwd"), "scale_bwd")
    if b == 1.0:
        return x
    return make_op(x.data, (x,), lambda grad: (grad * b,), "scale_bwd")


# ---- helpers for the scale rules -----------------------------------------------------------------

def _apply_constraint(constraint, op: str, *scales: float) -> tuple[float, ...]:
    """``scales = (output_scale, *grad_input_scales)`` tied together as ``constraint`` says."""
    if constraint is None:
        return scales
    if constraint == "to_output_scale":
        return (scales[0],) * len(scales)
    if constraint == "gmean":
        mean = math.exp(sum(math.log(s) for s in scales) / len(scales))
        return (mean,) * len(scales)
    raise ValueError(f"{op}: unknown constraint {constraint!r}; valid constraints are "
                     f"{', '.join(repr(c) for c in CONSTRAINTS)}")


def logarithmic_interpolation(alpha: float, lower: float, upper: float) -> float:
    """``exp(alpha ln(upper) + (1 - alpha) ln(lower))``: lower at alpha = 0, upper at alpha = 1.

    The u-muP empirical models of softmax, GELU and attention scales interpolate between two limits
    with this rule (``unit_scaling.core.functional.logarithmic_interpolation``). ``alpha`` must be in
    [0, 1] and ``lower``, ``upper`` finite and > 0 (it interpolates their logarithms).
    """
    op = "logarithmic_interpolation"
    alpha = F._real(alpha, op, "alpha")
    if not 0.0 <= alpha <= 1.0:  # (NaN fails this too)
        raise ValueError(f"{op}: alpha must be in [0, 1] (lower at 0, upper at 1), got {alpha}")
    lower, upper = F._real(lower, op, "lower"), F._real(upper, op, "upper")
    if not (lower > 0 and upper > 0 and math.isfinite(lower) and math.isfinite(upper)):
        raise ValueError(f"{op}: lower and upper must be > 0 and finite (it interpolates their logarithms), "
                         f"got {lower}, {upper}")
    return math.exp(alpha * math.log(upper) + (1.0 - alpha) * math.log(lower))


def _positive(value, name: str, op: str) -> float:
    value = F._real(value, op, name)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{op}: {name} must be a finite number > 0, got {value}")
    return value


MULT_RANGE = (2.0**-30, 2.0**30)
"""The ``mult`` hyperparameters (u-muP's: O(1), swept over a few powers of two) that the scale rules
below take: far outside it, ``mult ** 2`` and the interpolation's logarithms overflow."""


def _mult(value, op: str, name: str = "mult") -> float:
    """A u-muP ``mult``: a real number in `MULT_RANGE`, or a clear error."""
    value = _positive(value, name, op)
    if not MULT_RANGE[0] <= value <= MULT_RANGE[1]:
        raise ValueError(f"{op}: {name} must be in [2**-30, 2**30] (a u-muP multiplier, O(1)), got {value}")
    return value


# ---- matrix products -----------------------------------------------------------------------------

def linear(x: Tensor | ArrayLike, weight: Tensor | ArrayLike, bias: Tensor | ArrayLike | None = None,
           constraint: str | None = "to_output_scale", gemm: Callable | None = None) -> Tensor:
    """Unit-scaled ``x @ weight.T + bias``, weight ``(fan_out, fan_in)``.

    With unit-variance x and W, ``y = x W^T`` has variance fan_in, and ``dx = dy W`` has variance
    fan_out; ``dW = dy^T x`` sums over the batch (all leading axes of x, ``batch`` rows):

    * output ``* fan_in^-1/2``;
    * grad x ``* fan_out^-1/2``;
    * grad weight and grad bias ``* batch^-1/2``, never constrained (cut edges).

    Blake et al. 2023 (arXiv:2303.11257), the matmul rule ``sigma(x W^T) = sqrt(fan_in)``;
    ``unit_scaling.functional.linear`` with scale_power (1/2, 1/2, 1/2). ``constraint`` ties the
    output and grad-x scales (default ``"to_output_scale"``, as u-muP: both fan_in^-1/2).

    An empty batch gets zero weight and bias gradients (the library divides by the batch size and raises).

    ``gemm(x, weight, bias)`` computes the plain ``x @ weight.T + bias`` (default
    ``functional.linear``); FP8 recipes pass their own. It receives the ``scale_bwd``-wrapped
    operands and must return a floating Tensor of shape ``(..., fan_out)``, which goes through ``scale_fwd``.
    """
    return _linear(x, weight, bias, constraint, gemm, output_power=0.5, op="linear")


def linear_readout(x: Tensor | ArrayLike, weight: Tensor | ArrayLike, bias: Tensor | ArrayLike | None = None,
                   constraint: str | None = None, gemm: Callable | None = None) -> Tensor:
    """Unit-scaled linear for the network's final output (the logits).

    As `linear` but output ``* fan_in^-1`` (u-muP, arXiv:2407.17465: the readout multiplier
    is 1/fan_in, as in muP), grad x ``* fan_out^-1/2``, grad weight/bias ``* batch^-1/2``, and
    unconstrained by default. ``unit_scaling.functional.linear_readout`` (scale_power (1, 1/2, 1/2)).

    So at initialisation, with unit x and W, the *output* is deliberately not unit-scaled: its std
    is ``fan_in^-1/2`` (muP's small initial logits); both gradients are unit-scaled. The constraint
    can be dropped because the readout's input is a cut edge (the only path to the loss): the
    mismatch ``fan_out^-1/2 / fan_in^-1`` multiplies every upstream gradient by the same factor,
    which rescales the gradient without turning it (Blake et al. 2023, the cut-edge rule).
    """
    return _linear(x, weight, bias, constraint, gemm, output_power=1.0, op="linear_readout")


def _linear(x, weight, bias, constraint, gemm, output_power: float, op: str) -> Tensor:
    if gemm is None:
        gemm = F.linear
    elif not callable(gemm):
        raise TypeError(f"{op}: gemm must be None or a callable gemm(x, weight, bias) -> Tensor, "
                        f"got {type(gemm).__name__} {gemm!r}")
    x = _floating(x, op, "x")
    weight = _floating(weight, op, "weight")
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-D (fan_out, fan_in), got shape {weight.shape}")
    fan_out, fan_in = weight.shape
    if weight.size == 0:
        raise ValueError(f"{op}: weight of shape {weight.shape} is empty; the unit scales need fan_in, fan_out > 0")
    if x.ndim == 0 or x.shape[-1] != fan_in:
        raise ValueError(f"{op}: x has shape {x.shape}, its last axis must be fan_in={fan_in} "
                         f"(weight shape {weight.shape})")
    batch = max(x.size // fan_in, 1)  # an empty batch has zero gradients: any finite scale will do
    output_scale, grad_x_scale = _apply_constraint(constraint, op, fan_in ** -output_power, fan_out ** -0.5)
    grad_weight_scale = batch ** -0.5
    x = scale_bwd(x, grad_x_scale)
    weight = scale_bwd(weight, grad_weight_scale)
    if bias is not None:
        bias = _floating(bias, op, "bias")
        if bias.shape != (fan_out,):
            raise ValueError(f"{op}: bias must have shape ({fan_out},) (fan_out), got {bias.shape}")
        bias = scale_bwd(bias, grad_weight_scale)
    out = gemm(x, weight, bias)
    if not isinstance(out, Tensor) or out.dtype.kind != "f":  # (an ndarray would cut the graph: no gradients)
        got = f"a Tensor of dtype {out.dtype}" if isinstance(out, Tensor) else type(out).__name__
        raise TypeError(f"{op}: gemm must return a floating Tensor, got {got}")
    if out.shape != x.shape[:-1] + (fan_out,):
        raise ValueError(f"{op}: gemm returned shape {out.shape}, expected {x.shape[:-1] + (fan_out,)} "
                         f"(x {x.shape} @ weight.T {weight.shape[::-1]})")
    return scale_fwd(out, output_scale)


def matmul(left: Tensor | ArrayLike, right: Tensor | ArrayLike, constraint: str | None = "to_output_scale") -> Tensor:
    """Unit-scaled ``left @ right`` (both at least 2-D; leading axes broadcast as in NumPy).

    With ``left (..., m, k)`` and ``right (..., k, n)``: output ``* k^-1/2``, grad left ``* n^-1/2``,
    grad right ``* m^-1/2``. ``constraint`` ties all three (default ``"to_output_scale"``: all
    ``k^-1/2``). Blake et al. 2023 (arXiv:2303.11257); ``unit_scaling.functional.matmul``.
    An operand broadcast over leading axes (a weight shared by a batch) has its gradient summed
    over them, so its std is about ``sqrt(batch)`` times larger: the rule, as the library's, counts
    ``m`` rows only. Fold the batch into ``m`` (a 2-D product) where that gradient must be unit.
    """
    left = _floating(left, "matmul", "left")
    right = _floating(right, "matmul", "right")
    if left.ndim < 2 or right.ndim < 2:
        raise ValueError(f"matmul: both operands must be at least 2-D, got shapes {left.shape} and {right.shape}")
    rows, inner = left.shape[-2:]
    columns = right.shape[-1]
    output_scale, left_scale, right_scale = _apply_constraint(
        constraint, "matmul", max(inner, 1) ** -0.5, max(columns, 1) ** -0.5, max(rows, 1) ** -0.5)
    out = F.matmul(scale_bwd(left, left_scale), scale_bwd(right, right_scale))
    return scale_fwd(out, output_scale)


# ---- nonlinearities ------------------------------------------------------------------------------

def gelu(x: Tensor | ArrayLike, mult: float = 1.0, constraint: str | None = "to_output_scale") -> Tensor:
    """Unit-scaled GELU with u-muP's ``mult``: ``f(x) = gelu(mult x) / mult`` (tanh approximation).

    u-muP (arXiv:2407.17465) models the std of f for unit-normal x by interpolating between the
    small-mult limit (f ~ x/2: output std 1/2) and the large-mult limit (f ~ relu(x)), with
    ``alpha = 1 / (1 + 1/(4 mult^2))`` and ``interp(alpha; lo, hi) = exp(alpha ln hi + (1-alpha) ln lo)``:

    * output ``* interp(alpha; 2, sqrt(2 / (1 - 1/pi)))``;
    * grad x ``* interp(alpha; 2, sqrt(2))``;

    then ``constraint`` (default ``"to_output_scale"``) ties them, so grad x takes the output's
    scale: its std is about 1.2 for unit-normal x and a unit-normal gradient (1.19 at mult 1, 1.23
    at mult 4, measured). ``unit_scaling.functional.gelu``. The model is of the std, and GELU's
    output has a mean (0.28 at mult 1, std 0.59): the scaled output's std is ~1.04 but its RMS,
    which sets the std of a following linear layer's output, is ~1.15. (Before u-muP,
    ``unit_scaling`` releases used the fixed scales 1/0.588 and 1/0.675, the std of GELU's output
    and the RMS of its derivative for unit-normal x, tied by ``"gmean"``.)
    The library uses the exact erf GELU by default; ours is GPT-2's tanh approximation
    (`minifp8.functional.gelu`), so we agree with the library's ``approximate="tanh"``.
    """
    x = _floating(x, "gelu")
    mult = _mult(mult, "gelu")
    alpha = 1.0 / (1.0 + 0.25 / mult ** 2)
    output_scale = logarithmic_interpolation(alpha, 2.0, math.sqrt(2.0 / (1.0 - 1.0 / math.pi)))
    grad_scale = logarithmic_interpolation(alpha, 2.0, math.sqrt(2.0))
    output_scale, grad_scale = _apply_constraint(constraint, "gelu", output_scale, grad_scale)
    x = scale_bwd(x, grad_scale)
    out = F.gelu(x) if mult == 1.0 else F.gelu(x * mult) * (1.0 / mult)
    return scale_fwd(out, output_scale)


def softmax(x: Tensor | ArrayLike, axis: int = -1, mult: float = 1.0,
            constraint: str | None = "to_output_scale") -> Tensor:
    """Unit-scaled ``softmax(mult * x)`` along ``axis`` (length d).

    Softmax outputs average 1/d, so their root mean square is 1/d when the logits are flat (small
    mult; the std is then 0) and 1/sqrt(d) when they are one-hot (large mult). In the flat limit the
    gradient is ``mult/d (g - mean(g))``, RMS ~ mult/d. u-muP's model of these RMS values, with
    ``alpha = 1 / (1 + 4/mult^2)``:

    * output ``* interp(alpha; d, sqrt(d))``;
    * grad x ``* interp(alpha; d/mult, sqrt(d/mult))`` (the one-hot end is the model's, not a limit:
      an exactly one-hot softmax has zero gradient);

    then ``constraint`` (default ``"to_output_scale"``) ties them: grad x takes the output's scale,
    the gradient model's times ``mult**(1 - alpha/2)`` (the same at mult 1; at mult 16 the gradient
    RMS is 3-4, measured). u-muP (arXiv:2407.17465); ``unit_scaling.functional.softmax``.
    """
    x = _floating(x, "softmax")
    mult = _mult(mult, "softmax")
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one axis")
    length = x.shape[F._axis(axis, x.ndim, "softmax")]
    if length == 0:
        raise ValueError(f"softmax: axis {axis} of shape {x.shape} is empty")
    alpha = 1.0 / (1.0 + 4.0 / mult ** 2)
    output_scale = logarithmic_interpolation(alpha, length, math.sqrt(length))
    grad_scale = logarithmic_interpolation(alpha, length / mult, math.sqrt(length / mult))
    output_scale, grad_scale = _apply_constraint(constraint, "softmax", output_scale, grad_scale)
    x = scale_bwd(x, grad_scale)
    out = F.softmax(x if mult == 1.0 else x * mult, axis=axis)
    return scale_fwd(out, output_scale)


def layer_norm(x: Tensor | ArrayLike, weight: Tensor | ArrayLike | None = None, bias: Tensor | ArrayLike | None = None,
               eps: float = 1e-5) -> Tensor:
    """Unit-scaled layer norm over the last axis (D features).

    The output of a layer norm is unit-scaled whatever x's scale, and grad x is for unit-scaled x
    (it scales as ``1 / std(x)``): no scale. The weight and bias gradients sum over the
    ``numel / D`` rows, so both are ``* sqrt(D / numel)``.
    ``unit_scaling.functional.layer_norm``; Blake et al. 2023 (arXiv:2303.11257).
    """
    x = _floating(x, "layer_norm", "x")
    if x.ndim == 0:
        raise ValueError("layer_norm: x must have at least one axis")
    features = x.shape[-1]
    scale = math.sqrt(features / x.size) if x.size else 1.0
    if weight is not None:
        weight = scale_bwd(_floating(weight, "layer_norm", "weight"), scale)
    if bias is not None:
        bias = scale_bwd(_floating(bias, "layer_norm", "bias"), scale)
    return F.layer_norm(x, weight, bias, eps)


# ---- lookups, dropout and residuals --------------------------------------------------------------

def embedding(ids: Tensor | ArrayLike, weight: Tensor | ArrayLike) -> Tensor:
    """Unit-scaled embedding lookup: grad weight ``* sqrt(num_embeddings / ids.size)``.

    Each row's gradient sums the ``ids.size / num_embeddings`` output gradients (on average) of
    that id. The output is the rows themselves (unit-scaled when W ~ N(0, 1)).
    ``unit_scaling.functional.embedding``; Blake et al. 2023. Empty ``ids`` give a zero gradient (the
    library divides by ``ids.size`` and raises).
    """
    weight = _floating(weight, "embedding", "weight")
    ids_data = ids.data if isinstance(ids, Tensor) else _plain_array(ids, "embedding: ids")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, dim), got shape {weight.shape}")
    scale = math.sqrt(weight.shape[0] / ids_data.size) if ids_data.size else 1.0
    return F.embedding(ids, scale_bwd(weight, scale))


def dropout(x: Tensor | ArrayLike, p: float, rng: np.random.Generator, training: bool = True) -> Tensor:
    """Unit-scaled inverted dropout: ``* sqrt(1 - p)`` forward and backward, unconstrained.

    Inverted dropout (``mask / (1 - p)``) leaves the mean alone but raises the variance to
    ``1 / (1 - p)``; the extra ``sqrt(1 - p)`` restores unit variance both ways. The scale is applied
    in evaluation mode too (``training=False``: the output is ``sqrt(1 - p) x``), which keeps the
    expected output equal to the training-time mean, as ``unit_scaling.functional.dropout`` does.
    Blake et al. 2023 (arXiv:2303.11257).
    """
    x = _floating(x, "dropout")
    if not 0.0 <= F._real(p, "dropout", "p") <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    _check_bool(training, "dropout: training")
    scale = math.sqrt(1.0 - p)
    return scale_fwd(F.dropout(scale_bwd(x, scale), p, rng, training=training), scale)


def _residual_weights(tau, op: str, *tensors: Tensor) -> tuple[float, float]:
    """``(tau / sqrt(1 + tau^2), 1 / sqrt(1 + tau^2))`` for a finite ``tau > 0``. Past about 1e154,
    where ``tau^2`` overflows, the root comes from ``math.hypot`` (the plain formula gave two zeros).

    A weight that is 0 in a tensor's dtype is refused here, naming ``tau``: in float32 that is a tau
    beyond about 1e45 or below about 1e-45, so the hypot path matters for float64 data only.
    """
    tau = _positive(tau, "tau", op)
    denominator = math.sqrt(1.0 + tau * tau)
    if math.isinf(denominator):
        denominator = math.hypot(1.0, tau)
    weights = tau / denominator, 1.0 / denominator
    for tensor in tensors:
        for name, weight in zip(("branch", "skip"), weights):
            if weight != 0.0 and tensor.data.dtype.type(weight) == 0.0:
                raise ValueError(f"{op}: tau={tau!r} gives the {name} weight {weight:.3g}, which is 0 in "
                                 f"{tensor.data.dtype}: pick a tau whose weights tau / sqrt(1 + tau^2) and "
                                 f"1 / sqrt(1 + tau^2) are both representable")
    return weights


def residual_split(x: Tensor | ArrayLike, tau: float = 1.0) -> tuple[Tensor, Tensor]:
    """Split ``x`` into ``(residual, skip)`` before a residual branch with weight ``tau``.

    Both are ``x`` in the forward pass; their gradients are ``* tau / sqrt(1 + tau^2)`` (residual)
    and ``* 1 / sqrt(1 + tau^2)`` (skip), mirroring `residual_add` so the gradient reaching
    ``x`` is a unit-scaled weighted sum. ``tau`` is the ratio of the branch's scale to the skip's
    (u-muP, arXiv:2407.17465; ``unit_scaling.functional.residual_split``). Not the 2023 paper's
    ``sqrt(tau), sqrt(1 - tau)`` weights.
    """
    x = _floating(x, "residual_split")
    residual_weight, skip_weight = _residual_weights(tau, "residual_split", x)
    return scale_bwd(x, residual_weight), scale_bwd(x, skip_weight)


def residual_add(residual: Tensor | ArrayLike, skip: Tensor | ArrayLike, tau: float = 1.0) -> Tensor:
    """``tau / sqrt(1 + tau^2) * residual + 1 / sqrt(1 + tau^2) * skip``; gradients pass unchanged.

    Two unit-scaled, independent inputs give a unit-scaled sum (``tau^2 + 1`` over ``1 + tau^2``).
    The forward weights are applied with ``scale_fwd``, so both inputs receive the output gradient
    itself; `residual_split` applies the matching backward weights.
    ``unit_scaling.functional.residual_add``; u-muP (arXiv:2407.17465).
    """
    residual = _floating(residual, "residual_add", "residual")
    skip = _floating(skip, "residual_add", "skip")
    residual_weight, skip_weight = _residual_weights(tau, "residual_add", residual, skip)
    try:
        np.broadcast_shapes(residual.shape, skip.shape)
    except ValueError:
        raise ValueError(f"residual_add: residual {residual.shape} and skip {skip.shape} do not broadcast (NumPy "
                         f"rules: trailing axes must be equal or 1)") from None
    return scale_fwd(residual, residual_weight) + scale_fwd(skip, skip_weight)


# ---- attention and loss --------------------------------------------------------------------------

def scaled_dot_product_attention(q: Tensor | ArrayLike, k: Tensor | ArrayLike, v: Tensor | ArrayLike,
                                 causal: bool = False, *, mult: float = 1.0,
                                 dropout_p: float = 0.0, rng: np.random.Generator | None = None) -> Tensor:
    """Unit-scaled attention on ``(..., seq, d_head)`` tensors (q, k and v the same d_head).

    The logits are ``q k^T * mult / d_head`` (u-muP's muP-style 1/d_head, not 1/sqrt(d_head)).
    With ``s`` the key length, u-muP models the output std by interpolating between flat attention
    (an average of s values: std ``sqrt(1/s)``; causal, row i averages i values: std
    ``sqrt(H_s / s)``, H_s the harmonic number, which the model takes as ``sqrt(ln(s) / s)``) and
    one-hot attention (std 1), with ``alpha = 1 / (1 + 4 d_head / mult^2)``:

    ``scale = sqrt(1 - dropout_p) / interp(alpha; sqrt((ln s if causal else 1) / s), 1)``.

    The output and the q, k and v gradients are all ``* scale`` (one scale both ways, so no
    constraint). u-muP (arXiv:2407.17465); ``unit_scaling.functional.scaled_dot_product_attention``.
    The v gradient has the output's std, but near-flat attention (at ``mult = 1`` alpha is
    ``1 / (1 + 4 d_head)``) passes little gradient to q and k: their std at initialisation is well
    below 1 (about 0.12 at s = 256, d_head = 64), and above 1 at large mult (2 to 4 at mult 64,
    measured), where the rule models only the output and v. Causal attention's output std is
    ``sqrt(H_s / ln s)`` in the flat limit (1.05 at s = 256), not 1.
    At ``s = 1`` with ``causal`` the rule's lower limit is 0 (the library fails there); we use
    the exact value 1 (the output is v itself).

    The rule assumes that the s value rows are independent, so that averaging shrinks them. In a
    stack of layers they are not, and the output grows with depth (a limit of u-muP's rule, not of
    this transcription). At initialisation attention is nearly flat, so each layer's output row is a
    mean (causal: a prefix mean) of its value rows: nearly one vector per sequence, which the residual
    add passes to every row of the next layer's input. That layer's value rows then share a
    per-sequence component that averaging no longer shrinks, yet the scale still multiplies it.
    Measured in 4 `minifp8.uu.TransformerLayer` layers (dim 64, 4 heads, seq 128, batch 8, weights
    from seed 0, input from seed 1), layer by layer: the attention output's std is 0.98, 4.93, 10.4,
    11.6 as the RMS of the per-sequence mean of v over std(v) rises 0.08, 0.45, 0.91, 0.98
    (independent rows: 1/sqrt(128) = 0.09); causal, 1.01, 2.20, 3.36, 4.21 as it rises 0.08, 0.34,
    0.59, 0.79. The library's ``TransformerStack`` does the same (``torch.manual_seed(0)``, the same
    shapes: 1.07 to 9.96; causal 1.05 to 3.91).
    The backward pass mirrors it, from the top down (see `minifp8.uu.TransformerLayer`).

    With ``causal`` the rule also assumes as many queries as keys: s is the key length, and the mask
    is top-left aligned (query i sees keys 0..i, as torch's ``is_causal``), so with q < s queries
    row i averages i + 1 values and the flat-limit std is ``scale * sqrt(H_q / q)``: 3.10 for 16
    queries of 256 keys and 6.74 for one (d_head 64; measured 3.07 and 6.61), as in the library
    (a decoding step with a cache needs a bottom-right mask, which this op does not offer). Without
    ``causal`` every row averages all s keys and the rule holds for any number of queries.
    """
    op = "scaled_dot_product_attention"
    q, k, v = (_floating(t, op, name) for t, name in ((q, "q"), (k, "k"), (v, "v")))
    mult = _mult(mult, op)
    causal = _check_bool(causal, f"{op}: causal")
    if q.ndim < 2 or q.ndim != k.ndim or k.ndim != v.ndim:
        raise ValueError(f"{op}: q, k, v must have the same number (>= 2) of axes (..., seq, d_head), "
                         f"got shapes q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"{op}: q, k, v must have the same leading (batch, heads) axes, "
                         f"got shapes q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{op}: k and v must have the same sequence length, got shapes k {k.shape}, v {v.shape}")
    if not q.shape[-1] == k.shape[-1] == v.shape[-1]:
        raise ValueError(f"{op}: q, k, v must have the same d_head (last axis), "
                         f"got shapes q {q.shape}, k {k.shape}, v {v.shape}")
    seq, d_head = v.shape[-2:]
    if seq == 0 or d_head == 0:
        raise ValueError(f"{op}: empty sequence or head dimension, got shapes q {q.shape}, k {k.shape}, v {v.shape}")
    if not 0.0 <= F._real(dropout_p, op, "dropout_p") < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    flat = math.sqrt((math.log(seq) if causal else 1.0) / seq) if not (causal and seq == 1) else 1.0
    alpha = 1.0 / (1.0 + 4.0 * d_head / mult ** 2)
    scale = math.sqrt(1.0 - dropout_p) / logarithmic_interpolation(alpha, flat, 1.0)
    q, k, v = (scale_bwd(t, scale) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, causal=causal, scale=mult / d_head, dropout_p=dropout_p, rng=rng)
    return scale_fwd(out, scale)


def cross_entropy(logits: Tensor | ArrayLike, targets: Tensor | ArrayLike, *, mult: float = 1.0,
                  ignore_index: int | None = None) -> Tensor:
    """Unit-scaled cross-entropy of ``mult * logits`` (..., V) against integer ``targets`` (...).

    The loss value is the usual mean over the N counted tokens of ``logsumexp(mult z) - mult z[t]``.
    The gradient to the logits is ``(softmax(mult z) - onehot(t)) * V / sqrt(V - 1)``: it is
    **not** divided by N, and ``mult`` does not multiply it (``mult`` enters through ``scale_fwd``).
    ``softmax - onehot`` has ``sum of squares ~ 1`` per row, i.e. std ~ sqrt(V - 1) / V; the factor
    makes it unit-scaled (Blake et al. 2023, arXiv:2303.11257: the loss is the start of the backward
    pass, a cut edge, so its gradient can be scaled freely). Rows whose target is ``ignore_index``
    get a zero gradient.

    ``unit_scaling.functional.cross_entropy``: there ``scale_bwd(logits, V / sqrt(V - 1))``, then
    ``scale_fwd(., mult)``, a *sum* cross-entropy, and ``scale_fwd(loss, 1/N)`` for the mean. We
    compute the same thing from ``functional.cross_entropy`` (a mean) whose incoming gradient is
    multiplied by N. With ``ignore_index`` our loss is the mean over the counted tokens (as
    ``functional.cross_entropy`` and torch); the library divides the sum by all rows. The gradient
    is the same either way. Logits may have any number of leading axes; the library's take one
    (2-D) or none (1-D).
    """
    logits = _floating(logits, "cross_entropy", "logits")
    mult = _mult(mult, "cross_entropy")
    if logits.ndim == 0:
        raise ValueError("cross_entropy: logits must have a class axis (..., V)")
    classes = logits.shape[-1]
    if classes < 2:
        raise ValueError(f"cross_entropy: needs at least 2 classes, got logits of shape {logits.shape}")
    target_data = targets.data if isinstance(targets, Tensor) else _plain_array(targets, "cross_entropy: targets")
    count = int(target_data.size if ignore_index is None else np.count_nonzero(target_data != ignore_index))
    z = scale_fwd(scale_bwd(logits, classes / math.sqrt(classes - 1)), mult)
    loss = F.cross_entropy(z, targets, ignore_index=ignore_index)
    return scale_bwd(loss, count)
