"""Unit-scaled layers, like the ``unit_scaling`` library's ``uu`` modules, built on `minifp8.unit`.

Every weight is initialised N(0, 1): the scale factors live in the ops (Blake et al. 2023,
arXiv:2303.11257; u-muP, Blake et al. 2024, arXiv:2407.17465), not in the weights. Every random
draw takes an explicit ``rng: np.random.Generator``.

Hooks (the integration contract with ``minifp8.fp8``):

* Linear layers compute their GEMM through the instance attribute ``self.gemm``, a callable
  ``gemm(x, weight, bias) -> Tensor`` returning the plain ``x @ weight.T + bias`` (default
  ``functional.linear``). The unit scales are applied around it by ``U.linear``.
* `MHSA` computes the attention core through ``self.attention_core(q, k, v, causal)`` on
  ``(batch, heads, seq, head_dim)`` tensors (default: ``U.scaled_dot_product_attention`` with the
  module's ``mult``).

Both are plain attributes: module discovery ignores callables, so ``state_dict`` is unaffected.
Scale tracking (`minifp8.fp8.track`, identity ops that cost nothing outside a ``ScaleTracker``)
records q, k, v, the attention output and the MLP's hidden layer under the names the standard
model (`minifp8.model`) uses, so the scale plots of the two families line up row for row.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from . import functional as F
from . import unit as U
from .autograd import Tensor
from .formats import _check_bool
from .fp8 import track
from .nn import Module, Parameter, _check_feature_axis, _check_generator, _check_size

__all__ = ["Embedding", "LayerNorm", "Linear", "LinearReadout", "MHSA", "MLP", "TransformerLayer", "residual_taus"]


def _check_constraint(constraint: str | None, owner: str) -> str | None:
    if constraint not in U.CONSTRAINTS:
        raise ValueError(f"{owner}: unknown constraint {constraint!r}; valid constraints are "
                         f"{', '.join(repr(c) for c in U.CONSTRAINTS)}")
    return constraint


# ---- the u-muP residual rule ---------------------------------------------------------------------

def residual_taus(n_layer: int, *, residual_mult: float = 1.0,
                  residual_attn_ratio: float = 1.0) -> list[tuple[float, float]]:
    """``[(tau_attn, tau_mlp)]`` for each of ``n_layer`` pre-norm transformer layers (u-muP rule).

    u-muP, arXiv:2407.17465 (Appendix G, as the library's docstring cites);
    ``unit_scaling.core.functional.transformer_residual_scaling_rule``, which ``TransformerStack``
    calls as ``rule(branch index, 2 n_layer)``. Number the ``2 n_layer`` residual branches
    ``i = 0, 1, ...`` (attention even, MLP odd). Give the embedding the variance weight ``n_layer``,
    every attention branch ``alpha_attn^2`` and every MLP branch ``alpha_mlp^2``, with
    ``alpha_mlp = residual_mult * sqrt(2 / (1 + residual_attn_ratio^2))`` and
    ``alpha_attn = residual_attn_ratio * alpha_mlp``. Before branch i the stream holds the weight
    ``V_i = n_layer + n_attn(i) alpha_attn^2 + n_mlp(i) alpha_mlp^2`` (branches so far), and

        tau_i = alpha_i / sqrt(V_i)

    is the ratio of the new branch's scale to the stream's, which is what
    ``U.residual_add(branch, skip, tau)`` expects. Hence every attention branch contributes the same
    variance to the final stream, and so does every MLP branch. With both hyperparameters 1 (the
    default), ``tau_i = 1 / sqrt(n_layer + i)``: the embedding, all attention branches together and
    all MLP branches together each make up a third of the final variance. ``residual_mult`` is the
    std ratio to the embedding of a whole family of branches (the mean of the variances of all
    attention branches together and all MLP branches together is ``residual_mult^2`` times the
    embedding's; one branch alone has ``1 / n_layer`` of its family's); ``residual_attn_ratio`` is the
    std ratio of an attention branch to an MLP branch.
    """
    n_layer = _check_size(n_layer, "n_layer", "residual_taus")
    residual_mult = U._positive(residual_mult, "residual_mult", "residual_taus")
    residual_attn_ratio = U._positive(residual_attn_ratio, "residual_attn_ratio", "residual_taus")
    try:  # (Python's float ** raises a bare OverflowError)
        alpha_mlp = residual_mult * math.sqrt(2.0 / (1.0 + residual_attn_ratio ** 2))
        alpha_attn = residual_attn_ratio * alpha_mlp
        taus = []
        for i in range(2 * n_layer):
            n_attn, n_mlp = (i + 1) // 2, i // 2
            stream = n_layer + n_attn * alpha_attn ** 2 + n_mlp * alpha_mlp ** 2
            taus.append((alpha_attn if i % 2 == 0 else alpha_mlp) / math.sqrt(stream))
    except OverflowError:
        raise ValueError(f"residual_taus: residual_mult {residual_mult:g} and residual_attn_ratio "
                         f"{residual_attn_ratio:g} are too large for its float64 arithmetic (a square of one "
                         f"overflows)") from None
    if not all(0.0 < tau < math.inf for tau in taus):
        raise ValueError(f"residual_taus: residual_mult {residual_mult:g} and residual_attn_ratio "
                         f"{residual_attn_ratio:g} give branch weights {min(taus):g} to {max(taus):g}; each must be "
                         "finite and > 0 (in float64)")
    return [(taus[2 * layer], taus[2 * layer + 1]) for layer in range(n_layer)]


# ---- layers --------------------------------------------------------------------------------------

class Linear(Module):
    """Unit-scaled ``x @ weight.T + bias`` (``U.linear``); weight ``(out_features, in_features)`` ~ N(0, 1).

    The bias (off by default, as in ``unit_scaling``) starts at zero. ``constraint`` ties the
    output and grad-x scales (see ``U.linear``).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 rng: np.random.Generator, constraint: str | None = "to_output_scale"):
        self.in_features = _check_size(in_features, "in_features", type(self).__name__)
        self.out_features = _check_size(out_features, "out_features", type(self).__name__)
        _check_generator(rng, type(self).__name__)
        self.constraint = _check_constraint(constraint, type(self).__name__)
        bias = _check_bool(bias, f"{type(self).__name__}: bias")
        self.weight = Parameter(rng.standard_normal((self.out_features, self.in_features)))
        self.bias = Parameter(np.zeros(self.out_features)) if bias else None
        self.gemm: Callable[..., Tensor] = F.linear

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return U.linear(x, self.weight, self.bias, constraint=self.constraint, gemm=self.gemm)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, constraint={self.constraint!r})")


class LinearReadout(Linear):
    """Unit-scaled output layer (``U.linear_readout``: output ``* 1/fan_in``), unconstrained by default."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 rng: np.random.Generator, constraint: str | None = None):
        super().__init__(in_features, out_features, bias, rng=rng, constraint=constraint)

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return U.linear_readout(x, self.weight, self.bias, constraint=self.constraint, gemm=self.gemm)


class Embedding(Module):
    """Unit-scaled lookup table (``U.embedding``), ``weight (num_embeddings, embedding_dim)`` ~ N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, rng: np.random.Generator):
        self.num_embeddings = _check_size(num_embeddings, "num_embeddings", "Embedding")
        self.embedding_dim = _check_size(embedding_dim, "embedding_dim", "Embedding")
        _check_generator(rng, "Embedding")
        self.weight = Parameter(rng.standard_normal((self.num_embeddings, self.embedding_dim)))

    def forward(self, ids: Tensor | ArrayLike) -> Tensor:
        return U.embedding(ids, self.weight)

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"


class LayerNorm(Module):
    """Unit-scaled layer norm over the last axis (``U.layer_norm``).

    No parameters by default (``elementwise_affine=False``), as ``unit_scaling.LayerNorm``; with
    ``elementwise_affine=True`` a weight of ones and (if ``bias``) a bias of zeros.
    """

    def __init__(self, features: int, eps: float = 1e-5, *, elementwise_affine: bool = False, bias: bool = True):
        self.features = _check_size(features, "features", "LayerNorm")
        self.eps = F._non_negative(eps, "LayerNorm", "eps")
        bias = _check_bool(bias, "LayerNorm: bias")
        elementwise_affine = _check_bool(elementwise_affine, "LayerNorm: elementwise_affine")
        self.weight = Parameter(np.ones(features)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(features)) if elementwise_affine and bias else None

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        _check_feature_axis(x, self.features, "LayerNorm")
        return U.layer_norm(x, self.weight, self.bias, self.eps)

    def __repr__(self) -> str:
        return f"LayerNorm({self.features}, eps={self.eps}, elementwise_affine={self.weight is not None})"


class MHSA(Module):
    """Unit-scaled multi-head self-attention on ``(batch, seq, dim)``.

    ``linear_qkv`` (dim -> 3 dim, split as q | k | v, each ``(heads, head_dim)``), the attention core
    ``self.attention_core(q, k, v, causal)`` (``U.scaled_dot_product_attention`` with ``mult``: logits
    ``* mult / head_dim``), then ``linear_o``. ``dropout`` is unit-scaled dropout on the output (the
    hook has no dropout argument, so attention-probability dropout is not offered).
    """

    def __init__(self, dim: int, heads: int, *, rng: np.random.Generator, causal: bool = True,
                 mult: float = 1.0, dropout: float = 0.0):
        dim = _check_size(dim, "dim", "MHSA")
        heads = _check_size(heads, "heads", "MHSA")
        if dim % heads:
            raise ValueError(f"MHSA: dim {dim} must be a multiple of heads {heads}")
        if not 0.0 <= F._real(dropout, "MHSA", "dropout") < 1.0:
            raise ValueError(f"MHSA: dropout must be in [0, 1), got {dropout}")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.causal = _check_bool(causal, "MHSA: causal")
        self._mult = U._mult(mult, "MHSA")
        self.dropout = float(dropout)
        self.rng = _check_generator(rng, "MHSA")
        self.linear_qkv = Linear(dim, 3 * dim, rng=rng)
        self.linear_o = Linear(dim, dim, rng=rng)
        self.attention_core: Callable[..., Tensor] = functools.partial(U.scaled_dot_product_attention, mult=self._mult)

    @property
    def mult(self) -> float:
        """The logits' multiplier, fixed at construction: the attention core binds it."""
        return self._mult

    @mult.setter
    def mult(self, value) -> None:
        raise AttributeError(f"MHSA: mult is fixed at construction, where the attention core binds it (an FP8 "
                             f"recipe may wrap that core); build a new MHSA(..., mult={value!r}) instead")

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        x = U._floating(x, "MHSA")
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"MHSA: x must have shape (batch, seq, {self.dim}), got {x.shape}")
        batch, seq, _ = x.shape
        qkv = self.linear_qkv(x)
        q, k, v = (t.reshape(batch, seq, self.heads, self.head_dim).transpose(0, 2, 1, 3)
                   for t in F.split(qkv, self.dim, axis=-1))
        q, k, v = track("q", q), track("k", k), track("v", v)
        attention = track("attention", self.attention_core(q, k, v, self.causal))
        attention = attention.transpose(0, 2, 1, 3).reshape(batch, seq, self.dim)
        out = self.linear_o(attention)
        return U.dropout(out, self.dropout, self.rng, training=self.training)

    def __repr__(self) -> str:
        return (f"MHSA(dim={self.dim}, heads={self.heads}, causal={self.causal}, mult={self.mult}, "
                f"dropout={self.dropout})")


class MLP(Module):
    """Unit-scaled MLP: ``linear_1`` (dim -> hidden_multiplier dim), ``U.gelu(mult)``, ``linear_2``.

    Both linears are unconstrained (``constraint=None``), as in ``unit_scaling.MLP``: their forward
    scales (dim^-1/2, (h dim)^-1/2) and backward scales ((h dim)^-1/2, dim^-1/2) mirror each other, so
    along the MLP the product of the forward scales equals that of the backward scales and the
    gradient of its input is still the true gradient (the GELU is tied by its own constraint), while
    every activation and gradient inside is about unit-scaled. The library's MLP (0.3.x) is a SwiGLU
    (``silu_glu`` with a third, gate, linear); this one is GPT-2's GELU MLP, as `minifp8.model`'s
    standard family. With the GELU's scales tied to its output scale, its output's mean (see
    ``U.gelu``) makes the MLP's output std ~1.15 and its input-gradient std ~1.19 at mult 1, not 1.
    """

    def __init__(self, dim: int, hidden_multiplier: int = 4, *, rng: np.random.Generator, mult: float = 1.0):
        dim = _check_size(dim, "dim", "MLP")
        hidden_multiplier = _check_size(hidden_multiplier, "hidden_multiplier", "MLP")
        _check_generator(rng, "MLP")
        self.dim, self.hidden = dim, hidden_multiplier * dim
        self.mult = U._mult(mult, "MLP")
        self.linear_1 = Linear(dim, self.hidden, rng=rng, constraint=None)
        self.linear_2 = Linear(self.hidden, dim, rng=rng, constraint=None)

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        hidden = track("mlp_hidden", self.linear_1(x))
        return self.linear_2(U.gelu(hidden, mult=self.mult))

    def __repr__(self) -> str:
        return f"MLP(dim={self.dim}, hidden={self.hidden}, mult={self.mult})"


class TransformerLayer(Module):
    """A unit-scaled pre-norm transformer layer (Xiong et al. 2020) with u-muP residual weights.

    ``x = residual_add(attn(attn_norm(r)), s, tau_attn)`` with ``r, s = residual_split(x, tau_attn)``,
    then the same with ``mlp_norm``, ``mlp`` and ``tau_mlp``. Take the taus from
    `residual_taus`. ``dropout`` is unit-scaled dropout on each branch's output; ``mult`` is the
    attention's, ``mlp_mult`` the GELU's. Where the library's layer (``unit_scaling.TransformerLayer``,
    0.3.x) uses parameter-free RMS norms and a SwiGLU MLP, this one uses parameter-free layer norms and
    a GELU MLP, as GPT-2 (`minifp8.model`'s standard family); and where the library also passes its
    ``dropout_p`` to its MHSA, which drops attention probabilities, this one's MHSA has no dropout
    (`MHSA`'s attention-core hook takes no dropout argument).

    A stack of these layers is unit-scaled at initialisation only approximately: it drifts above 1 with
    depth, more so for longer sequences. u-muP's attention rule assumes independent value rows, but each
    layer's nearly flat attention gives the next layer's value rows a shared per-sequence vector that
    averaging does not shrink (``U.scaled_dot_product_attention`` has the mechanism and the attention
    outputs, measured). Through 4 layers (dim 64, 4 heads, batch 8, taus from `residual_taus`, weights
    from seed 0, input from seed 1) the residual stream's std grows from 1 to 4.81 at seq 128 (causal
    1.97; at seq 32, 2.38 and causal 1.40), the attention branches dominating it (their std reaches
    12.0, causal 4.5; the MLP branches' stays below 1.25). The backward pass mirrors it from the top
    down: the top layer's v gradient is unit-scaled but largely shared by the rows of a sequence, so the
    attention of the layers below sums it coherently. The v gradient's std is 0.89, 1.10, 2.17, 8.81
    from the top layer down and the stack input's gradient 3.98 (causal 1.00, 1.32, 2.04, 4.06 and
    2.07). The library's ``TransformerStack`` does the same (``torch.manual_seed(0)``: stream 4.31,
    input gradient 4.97; causal 1.79 and 2.25).
    """

    def __init__(self, dim: int, heads: int, *, rng: np.random.Generator, tau_attn: float, tau_mlp: float,
                 causal: bool = True, mult: float = 1.0, mlp_mult: float = 1.0, hidden_multiplier: int = 4,
                 dropout: float = 0.0, eps: float = 1e-5):
        _check_generator(rng, "TransformerLayer")
        if not 0.0 <= F._real(dropout, "TransformerLayer", "dropout") < 1.0:
            raise ValueError(f"TransformerLayer: dropout must be in [0, 1), got {dropout}")
        self.tau_attn = U._positive(tau_attn, "tau_attn", "TransformerLayer")
        self.tau_mlp = U._positive(tau_mlp, "tau_mlp", "TransformerLayer")
        self.dropout = float(dropout)
        self.rng = rng
        self.attn_norm = LayerNorm(dim, eps)
        self.attn = MHSA(dim, heads, rng=rng, causal=causal, mult=mult)
        self.mlp_norm = LayerNorm(dim, eps)
        self.mlp = MLP(dim, hidden_multiplier, rng=rng, mult=mlp_mult)

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        residual, skip = U.residual_split(x, self.tau_attn)
        attention = U.dropout(self.attn(self.attn_norm(residual)), self.dropout, self.rng, training=self.training)
        x = U.residual_add(attention, skip, self.tau_attn)
        residual, skip = U.residual_split(x, self.tau_mlp)
        mlp = U.dropout(self.mlp(self.mlp_norm(residual)), self.dropout, self.rng, training=self.training)
        x = U.residual_add(mlp, skip, self.tau_mlp)
        return x

    def __repr__(self) -> str:
        return (f"TransformerLayer(tau_attn={self.tau_attn:.4g}, tau_mlp={self.tau_mlp:.4g},\n  attn={self.attn!r},\n"
                f"  mlp={self.mlp!r})")
