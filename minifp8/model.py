"""A character-level GPT in two families: standard (nanoGPT) and unit-scaled (u-muP).

``GPT(GPTConfig(...), rng=rng)`` is one model written top to bottom, like nanoGPT's ``model.py``
(Karpathy 2022; GPT-2, Radford et al. 2019): token and position embeddings, ``n_layer`` pre-norm
blocks (causal self-attention, then a GELU MLP, each added to the residual stream), a final layer
norm and a linear LM head, trained with a mean cross-entropy. ``config.family`` picks the bricks:

* ``"standard"``: `minifp8.nn` layers with nanoGPT's initialisation, after the GPT-2 paper's:
  weights N(0, 0.02^2), the residual output projections N(0, (0.02 / sqrt(2 n_layer))^2) (the
  paper's 1/sqrt(N) for residual layers; GPT-2's released code draws wpe with std 0.01 and does not
  scale the projections), zero biases. Activations are
  small (std ~0.02-1) and, because the loss is a *mean* over the B*T tokens of a batch, so are the
  gradients: every gradient carries a factor 1/(B T). With enough tokens per batch they fall below
  E5M2's smallest normal (2^-14), which is why naive FP8 training of this model degrades.
* ``"unit"``: `minifp8.uu` layers (Blake et al. 2023, arXiv:2303.11257; u-muP, Blake et al.
  2024, arXiv:2407.17465). Weights are N(0, 1) and fixed scale factors in the ops keep the
  activations and gradients near unit scale at initialisation, so FP8 needs no loss scaling and
  no per-tensor scales. Near, not at, and less so with depth: at 8 layers, width 128 and 4 heads
  (seeds 0 and 1, 8 x 64 random ids of a 14-character vocabulary, the default corpus's, at initialisation) the attention outputs' std grows from 1.3
  in the first layer to 3.4-3.5 in the last and the residual stream's to 1.8-2.1, since u-muP's attention rule assumes the values
  independent across positions and causal averaging makes them less so. That is the rule's own
  drift (`minifp8.unit.scaled_dot_product_attention`), and far inside E4M3's and E5M2's ranges.
  The residual stream uses u-muP's tau rule (`minifp8.uu.residual_taus`), the LM head is a
  `minifp8.uu.LinearReadout` (output ``* 1/fan_in``) and the loss `minifp8.unit.cross_entropy`
  (its logit gradient is not divided by the token count).

FP8 enters through the integration hooks, not through this file: every linear layer computes its
GEMM through ``module.gemm`` and every attention module its core through
``module.attention_core(q, k, v, causal)``, and `minifp8.fp8.apply_recipe` replaces those. The
model calls `minifp8.fp8.track` at the embedding, after every block, on the final norm and the
logits, and the attention and MLP modules of both families (here, and `minifp8.uu.MHSA` and
`minifp8.uu.MLP`) call it on q, k, v, the attention output and the MLP hidden layer under the same
names: identity ops that record scales inside a `minifp8.fp8.ScaleTracker` and cost nothing
outside one.

Examples
--------
>>> import numpy as np
>>> from minifp8.model import GPT, GPTConfig
>>> config = GPTConfig(vocab_size=14, block_size=16, n_layer=2, n_head=2, n_embd=32, family="unit")
>>> model = GPT(config, rng=np.random.default_rng(0))
>>> ids = np.zeros((4, 16), dtype=np.int64)
>>> logits, loss = model(ids, ids)
>>> logits.shape
(4, 16, 14)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from . import functional as F
from . import nn
from . import unit as U
from . import uu
from .autograd import Tensor, as_tensor
from .formats import _check_bool, _check_int, _check_str_choice, _plain_array
from .fp8 import track

__all__ = ["FAMILIES", "GPT", "GPTConfig"]

#: The values of ``GPTConfig.family``.
FAMILIES = ("standard", "unit")


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a `GPT`.

    Every field is checked on creation (``TypeError`` for a wrong type, ``ValueError`` for a value out
    of range, each naming the field) and stored as a plain Python int, float or bool, so `to_dict`
    goes to JSON even from NumPy numbers.

    Attributes
    ----------
    vocab_size : int
        Number of token ids (the character vocabulary), at least 2: the model predicts one token out
        of them (the unit family's cross-entropy is undefined for one class).
    block_size : int
        Longest sequence the model sees (rows of the position embedding).
    n_layer, n_head, n_embd : int
        Blocks, attention heads per block, width of the residual stream (a multiple of n_head).
    family : {"standard", "unit"}
        nanoGPT's layers and initialisation, or unit-scaled (u-muP) layers (module docstring).
    dropout : float
        Dropout on each residual branch's output (and, standard family, on the embedding).
        0 by default, as tiny models on small data rarely need it.
    bias : bool
        Biases in the standard family's linears and layer norms (nanoGPT's ``bias``). The unit
        family has none, as the ``unit_scaling`` library's layers default to.
    attention_mult, mlp_mult : float
        u-muP's ``mult`` hyperparameters of the unit family's attention (logits ``* mult/d_head``)
        and GELU. Ignored by the standard family.
    """

    vocab_size: int
    block_size: int
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    family: str = "standard"
    dropout: float = 0.0
    bias: bool = True
    attention_mult: float = 1.0
    mlp_mult: float = 1.0

    def __post_init__(self):
        # every field is checked and stored as a plain Python value (NumPy numbers would not go to JSON)
        # (vocab_size >= 2: a model that predicts one of a single token has nothing to learn)
        for name, minimum in (("vocab_size", 2), ("block_size", 1), ("n_layer", 1), ("n_head", 1), ("n_embd", 1)):
            object.__setattr__(self, name, _check_int(getattr(self, name), f"GPTConfig: {name}", minimum))
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        _check_str_choice(self.family, "GPTConfig: family", FAMILIES)
        if self.family not in FAMILIES:
            raise ValueError(f"GPTConfig: family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if not 0.0 <= F._real(self.dropout, "GPTConfig", "dropout") < 1.0:
            raise ValueError(f"GPTConfig: dropout must be in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "dropout", float(self.dropout))
        object.__setattr__(self, "bias", _check_bool(self.bias, "GPTConfig: bias"))
        for name in ("attention_mult", "mlp_mult"):
            object.__setattr__(self, name, U._mult(getattr(self, name), "GPTConfig", name))

    def to_dict(self) -> dict:
        """The fields as a plain dict (for JSON): ``GPTConfig(**config.to_dict()) == config``."""
        return asdict(self)


# ================================================================================================
# The standard family: nanoGPT's blocks
# ================================================================================================
class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one projection to q | k | v, the attention core, ``c_proj``.

    The core is the hook ``self.attention_core(q, k, v, causal)`` on ``(batch, heads, seq,
    head_dim)`` tensors (default `minifp8.functional.scaled_dot_product_attention`, logits scaled
    by ``1/sqrt(head_dim)``). The hook has no dropout argument, so attention probabilities are not
    dropped; ``dropout`` applies to the output, as nanoGPT's ``resid_dropout``.
    """

    def __init__(self, config: GPTConfig, *, rng: np.random.Generator):
        self.n_head, self.n_embd = config.n_head, config.n_embd
        std = 0.02
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias, rng=rng, std=std)
        # GPT-2: the projections that write into the residual stream are scaled by 1/sqrt(2 n_layer)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias, rng=rng,
                                std=std / math.sqrt(2 * config.n_layer))
        self.resid_dropout = nn.Dropout(config.dropout, rng=rng)
        self.attention_core: Callable[..., Tensor] = F.scaled_dot_product_attention

    def forward(self, x: Tensor) -> Tensor:
        x = as_tensor(x)
        if x.ndim != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"CausalSelfAttention: x must have shape (batch, seq, {self.n_embd}), got {x.shape}")
        batch, seq, width = x.shape
        head_dim = width // self.n_head
        q, k, v = (t.reshape(batch, seq, self.n_head, head_dim).transpose(0, 2, 1, 3)
                   for t in F.split(self.c_attn(x), width, axis=-1))
        q, k, v = track("q", q), track("k", k), track("v", v)
        y = track("attention", self.attention_core(q, k, v, True))
        y = y.transpose(0, 2, 1, 3).reshape(batch, seq, width)  # heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """``c_fc`` (n_embd -> 4 n_embd), GELU (GPT-2's tanh approximation; nanoGPT's ``nn.GELU()`` is the
    exact erf form), ``c_proj`` back to n_embd."""

    def __init__(self, config: GPTConfig, *, rng: np.random.Generator):
        std = 0.02
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias, rng=rng, std=std)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias, rng=rng,
                                std=std / math.sqrt(2 * config.n_layer))
        self.dropout = nn.Dropout(config.dropout, rng=rng)

    def forward(self, x: Tensor) -> Tensor:
        hidden = track("mlp_hidden", self.c_fc(x))
        return self.dropout(self.c_proj(F.gelu(hidden)))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: GPTConfig, *, rng: np.random.Generator):
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, rng=rng)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config, rng=rng)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# ================================================================================================
# The model
# ================================================================================================
class GPT(nn.Module):
    """A GPT language model of either family (module docstring); ``forward(ids, targets)``.

    Parameters
    ----------
    config : GPTConfig
    rng : np.random.Generator
        Draws every initial weight (and, with dropout, the dropout masks).

    Attributes
    ----------
    wte, wpe : Embedding
        Token and position embeddings (``nn.Embedding`` N(0, 0.02^2), or ``uu.Embedding`` N(0, 1)).
    blocks : list
        ``n_layer`` blocks: `Block` (standard) or ``uu.TransformerLayer`` (unit).
    ln_f : LayerNorm
        The final norm.
    lm_head : Linear
        ``n_embd -> vocab_size`` without bias (``nn.Linear`` N(0, 0.02^2), or ``uu.LinearReadout``).
        Not tied to ``wte`` (nanoGPT ties them): the two families then have the same weight
        matrices. The standard family adds its LayerNorms' gains, and with ``bias`` its linears'
        and LayerNorms' biases (1,792 parameters in all at ``train_tiny``'s size).
    """

    # (declared for type checkers: __init__ builds one family's modules into these attributes)
    wte: nn.Embedding | uu.Embedding
    wpe: nn.Embedding | uu.Embedding
    blocks: list[Block] | list[uu.TransformerLayer]
    ln_f: nn.LayerNorm | uu.LayerNorm
    lm_head: nn.Linear | uu.LinearReadout

    def __init__(self, config: GPTConfig, *, rng: np.random.Generator):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT needs a GPTConfig, got {type(config).__name__}")
        nn._check_generator(rng, "GPT")
        self.config = config
        width = config.n_embd
        if config.family == "standard":
            self.wte = nn.Embedding(config.vocab_size, width, rng=rng, std=0.02)
            self.wpe = nn.Embedding(config.block_size, width, rng=rng, std=0.02)
            self.drop = nn.Dropout(config.dropout, rng=rng)
            self.blocks = [Block(config, rng=rng) for _ in range(config.n_layer)]
            self.ln_f = nn.LayerNorm(width, bias=config.bias)
            self.lm_head = nn.Linear(width, config.vocab_size, bias=False, rng=rng, std=0.02)
        else:
            self.wte = uu.Embedding(config.vocab_size, width, rng=rng)
            self.wpe = uu.Embedding(config.block_size, width, rng=rng)
            self.blocks = [uu.TransformerLayer(width, config.n_head, rng=rng, tau_attn=tau_attn, tau_mlp=tau_mlp,
                                               causal=True, mult=config.attention_mult, mlp_mult=config.mlp_mult,
                                               dropout=config.dropout)
                           for tau_attn, tau_mlp in uu.residual_taus(config.n_layer)]
            self.ln_f = uu.LayerNorm(width)
            self.lm_head = uu.LinearReadout(width, config.vocab_size, rng=rng)

    def forward(self, ids: Tensor | ArrayLike,
                targets: Tensor | ArrayLike | None = None) -> tuple[Tensor, Tensor | None]:
        """Logits ``(batch, seq, vocab_size)`` for integer ``ids (batch, seq)``, and the mean
        cross-entropy against ``targets (batch, seq)`` (None without targets)."""
        ids = ids.data if isinstance(ids, Tensor) else _plain_array(ids, "GPT: ids")
        if ids.dtype.kind not in "iu":
            raise TypeError(f"GPT: ids must be an integer array, got dtype {ids.dtype}")
        if ids.ndim != 2:
            raise ValueError(f"GPT: ids must have shape (batch, seq), got shape {ids.shape}")
        batch, seq = ids.shape
        if not 1 <= seq <= self.config.block_size:
            raise ValueError(f"GPT: sequence length {seq} must be in [1, block_size={self.config.block_size}]")
        # (batch, seq) position ids, so that the unit embedding's gradient scale counts every token
        positions = np.broadcast_to(np.arange(seq), (batch, seq))
        if self.config.family == "standard":
            x = self.drop(self.wte(ids) + self.wpe(positions))
        else:
            # two independent unit-variance embeddings: their sum has variance 2
            x = U.scale_fwd(self.wte(ids) + self.wpe(positions), 1.0 / math.sqrt(2.0))
        x = track("embedding", x)
        for block in self.blocks:
            x = track("residual", block(x))
        logits = track("logits", self.lm_head(track("ln_f", self.ln_f(x))))
        if targets is None:
            return logits, None
        if self.config.family == "standard":
            return logits, F.cross_entropy(logits, targets)
        return logits, U.cross_entropy(logits, targets)

    def center_lm_head(self) -> None:
        """Subtract the mean of the LM head's weight rows from every row, in place.

        Adding one vector ``m`` to every row of the LM head adds ``m . x`` to every logit of a
        token, which the softmax ignores: the predictions and the loss stay as they were (up to
        float32 rounding of the logits). So an exact cross-entropy gradient has no part along ``m``
        (each token's logit gradient, softmax minus one-hot, sums to zero): SGD never moves ``m``,
        and Adam's per-element steps move it only a little. A rounded gradient pushes it: an E5M2
        cast breaks those sums, and ``m`` may then drift, turning the rounding of the logit
        gradient into a large error in the gradient the LM head passes back (tutorial 7b). Calling
        this after every optimizer step keeps ``m`` at zero (``train_tiny --center-lm-head``).
        """
        weight = self.lm_head.weight.data
        weight -= weight.mean(axis=0)
        self.lm_head.weight.bump_version()  # (written in place: a graph that read the old rows refuses backward)

    def optimizer_groups(self, lr: float, weight_decay: float = 0.0) -> list[dict]:
        """Parameter groups for `minifp8.optim.AdamW`, one per parameter, with its peak learning rate.

        Weight decay applies to 2-D weights only, never to biases and norm gains (nanoGPT's
        ``configure_optimizers``). The standard family uses ``lr`` everywhere. The unit family follows
        u-muP's Adam rule (``unit_scaling.optim.lr_scale_func_adam``): a hidden weight or an embedding
        gets ``lr / sqrt(fan_in)`` (an embedding's fan-in is its width), the readout ``lr``, and every
        parameter inside the residual blocks a further ``1 / sqrt(n_layer)`` (the depth rule). With
        N(0, 1) weights this makes an Adam update change a hidden layer's or the readout's output by
        about the same amount whatever the width (muP's aim, for a batch much smaller than the width).
        The embedding's ``lr / sqrt(width)`` is u-muP's empirical rule, not muP's (which keeps an
        embedding's ``lr`` whatever the width): an embedding's output moves by ``lr / sqrt(width)``
        per element, half as much at 4x the width.

        Weight decay is AdamW's, coupled to each group's learning rate: a step shrinks a weight by
        its own (scaled) ``lr`` times ``weight_decay``, so in the unit family a hidden weight, its
        ``lr`` scaled down, decays more slowly than the readout. ``unit_scaling.optim.AdamW`` defaults instead to
        ``independent_weight_decay=True``, which divides each group's decay by its peak ``lr``: every
        weight then shrinks by ``weight_decay`` times the schedule's factor, whatever its ``lr``.
        To train that way, divide each returned group's ``weight_decay`` by its ``lr``.
        """
        lr = U._positive(lr, "lr", "optimizer_groups")
        weight_decay = F._non_negative(weight_decay, "optimizer_groups", "weight_decay")
        groups = []
        for name, p in self.named_parameters():
            scale = 1.0
            if self.config.family == "unit":
                if p.ndim == 2 and not name.startswith("lm_head."):
                    scale = p.shape[1] ** -0.5
                if name.startswith("blocks."):
                    scale /= math.sqrt(self.config.n_layer)
            groups.append({"params": [p], "lr": lr * scale, "weight_decay": weight_decay if p.ndim >= 2 else 0.0})
        return groups
