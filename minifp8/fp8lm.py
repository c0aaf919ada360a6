"""FP8-LM techniques: FP8 weight gradients, FP8 optimizer states and a simulated FP8 all-reduce.

FP8-LM (Peng et al. 2023, "FP8-LM: Training FP8 Large Language Models", arXiv:2310.18313; its
implementation is Microsoft's MS-AMP) carries FP8 past the GEMMs into the gradients, the optimizer
and the data-parallel communication. This file simulates those three techniques on one machine, on
NumPy arrays, plus a memory table:

- `FP8Gradients`: weight gradients stored as FP8 with a per-tensor scale and the paper's
  automatic scaling factor ``mu`` (`AutoScale`), all-reduced over N simulated workers by
  `fp8_all_reduce` (N = 1 is the plain local cast).
- `FP8AdamW`: AdamW whose first moment is stored in FP8 (E4M3) and second moment in FP16, each
  with a per-tensor scale, optionally with FP16 master weights. A drop-in for `minifp8.optim.AdamW`.
  ``train_tiny`` names the two ``--fp8-optimizer O2`` and ``O3``; the names are this project's,
  not MS-AMP's levels: MS-AMP's O2 keeps these moments beside FP16 weights (no other master
  copy), and its O3 adds FP8 weights over FP16 master weights for ZeRO (MS-AMP's documentation,
  "Optimization Level"). Our O2 keeps float32 weights; our O3's FP16 master weights hold what
  MS-AMP O2's FP16 weights hold.
- `memory_rows` / `measure_memory` / `format_memory_table`: bytes per parameter
  of weights, master weights, gradients and both moments, read from the arrays actually held (FP8
  gradients as their store; the float32 ``p.grad`` read back from it is a working copy, see Memory).

A training loop (``--fp8-grads``, ``--fp8-optimizer``, ``--fp8-allreduce N``):

    named = list(model.named_parameters())
    optimizer = fp8lm.FP8AdamW([p for _, p in named], lr=3e-4)      # or optim.AdamW(...)
    gradients = fp8lm.FP8Gradients(named, fmt="E4M3")
    for step in range(steps):
        worker_grads = []
        for ids, targets in fp8lm.split_batch(x, y, workers=N):  # N simulated workers
            model.zero_grad()
            model(ids, targets)[1].backward()
            worker_grads.append(gradients.collect())
        report = gradients.reduce(worker_grads)   # p.grad = FP8 all-reduced mean; mu adapts
        optimizer.step()

Scales
------
Every scale here but a gradient's is a float32 power of two, ``2**floor(log2(fp_max / amax))``,
recomputed from the tensor's own amax each time the tensor is stored (MS-AMP ``ScalingMeta.compute_scaling_factor``
with margin 0; ``scaling.scale_from_amax(..., power_of_2=True)`` for FP8, the same rule with
``fp_max = 65504`` for FP16). A tensor is stored as ``cast(x * scale)`` and read back as
``stored * float32(1 / scale)``, TransformerEngine's convention (see `minifp8.scaling`), so
for power-of-two scales the scaling itself is exact and only the cast rounds. A gradient's scale
is that power of two times ``mu = 2**(e / 1000)`` (below), which is not one: there ``x * scale``
rounds to float32 before the cast rounds, as in MS-AMP, and where that product lands on an FP8 tie
the two roundings differ from one (rarely: one value in 2 million in a review's sweep). FP8 casts
saturate.

Automatic scaling of FP8 gradients (FP8-LM section 2.1, Eq. 3)
---------------------------------------------------------------
Pre-dividing the N worker gradients by N before summing underflows; summing first overflows. FP8-LM
multiplies each gradient tensor by an auto-scaling factor ``mu`` that changes during training,
shrinking when too many values reach the FP8 maximum and growing back slowly otherwise. The
paper's threshold is 0.001 % of the values; the growth doubles ``mu`` over 1,000 steps. MS-AMP's
pull requests implement it (MS-AMP #140; the defaults ``--wgrad-auto-scaling-ratio 1e-5`` and
``--wgrad-auto-scaling-window 1000`` of MS-AMP-Examples #21; MS-AMP's released all-reduce divides
by a fixed ``sqrt(N)`` instead, MS-AMP issue #117) as, once per step and per tensor, after the
reduction:

- ``fraction`` = (number of reduced FP8 values whose magnitude is the format's max) / size
  (we count an element that reached the max anywhere: in a worker's cast, the paper's statistic
  on ``g' = mu g``, or in a partial sum; the reduced value alone misses a sum clipped at the max
  and pulled back below it by a later worker of the other sign, and ``mu`` then grew as the
  clipping got worse);
- ``fraction > threshold``: ``mu = mu / 2``;
- otherwise: ``mu = mu * 2**(1 / window)``;
- except that a tensor whose gradient is zero on every worker leaves ``mu`` as it was: it tells
  nothing about overflow, and growing ``mu`` through many such steps would saturate the first
  real gradients, for as many steps as ``mu`` had doubled (`FP8Gradients.reduce`).

We use exactly that rule with the same defaults, ``threshold = 1e-5`` (0.001 %) and
``window = 1000``, and start at ``mu = 1``. ``mu`` multiplies the scale (MS-AMP's ``pre_scale``),
not the gradient: the amax-derived scale would cancel a factor on the values. To keep ``mu``
exact, `AutoScale` stores the integer ``exponent`` with ``mu = 2**(exponent / window)``:
halving subtracts ``window``, growing adds 1. Growth stops at ``mu = 2**256``, where it no longer
changes any scale (`AutoScale`).

FP8 format of the gradients: MS-AMP stores weight gradients as **E4M3** (``msamp/nn/functional.py``
casts the weight gradient to ``kfloat8_e4m3``; ``msamp/nn/distributed.py`` reduces with
``wgrad_qtype = kfloat8_e4m3``). That is our default; ``fmt="E5M2"`` is available for comparison.

The FP8 all-reduce (FP8-LM section 2.1, Eqs. 4-6)
-------------------------------------------------
For one gradient tensor held by N workers, `fp8_all_reduce` computes:

1. each worker's scale ``s_i = mu * 2**floor(log2(fp_max / amax_i))`` (its current FP8 scale);
2. the shared scale, the global minimum over workers (Eq. 4): ``s_g = min_i s_i``, over the
   workers whose gradient is not all zero (a zero tensor sets no limit on the scale: its amax of
   0 gives ``s_i = mu``, which would flush every other worker's values; all zero: ``s_g = mu``);
3. each worker's FP8 tensor with the shared scale (Eq. 5): ``q_i = FP8(s_g * g_i)``;
4. the FP8 sum and its scale (Eq. 6): ``q = q_0 + q_1 + ... + q_(N-1)``, ``s = N * s_g``. Dividing
   the *scale* by N (rather than the values) is how the average is taken: neither pre- nor
   post-division of the values. MS-AMP does the same (``scale_inv`` times ``1 / world_size``,
   then an FP8 SUM all-reduce; MS-AMP issue #111 cites Eqs. 4-6);
5. the reduced gradient ``decode(q) * float32(1 / s)``, the mean of the worker gradients (where
   ``s`` would pass float32's max, for gradients below about 1e-35 or a large ``mu``,
   ``decode(q) / (N s_g)`` in float64, rounded once to float32, and ``scale`` reports the max).

Simulation choices, stated: the FP8 buffers are summed in worker order 0, 1, ..., N-1, each partial
sum computed in float32 (exact for E4M3 values; for E5M2, 4,480 pairs of finite values, such as
57344 + 2^-16, round there, each to a float32 that rounds to the exact sum's E5M2 code) and rounded
back to the FP8 format with saturation (a ring all-reduce stores partial sums in the FP8 buffer too, in an order
that depends on the chunk). In the paper, ``g_i`` is already an FP8 tensor with scale ``s_i`` and
Eq. 5 re-quantises it; we cast the float32 gradient once with ``s_g``. Both scales are powers of two
times the same ``mu``, so the two differ only where values fall into the subnormal range.
N = 1 gives the local cast of the gradient with its own scale: ``--fp8-grads`` is
``--fp8-allreduce 1``.

FP8 optimizer states (FP8-LM section 2.2; MS-AMP opt levels O2 and O3)
----------------------------------------------------------------------
FP8-LM's precision decoupling: the first moment tolerates FP8, while the second moment and the master
weights need more precision (FP16 with a tensor scale). `FP8AdamW` is ``optim.AdamW``'s
algorithm with its state stored as ``(array, float32 scale)`` pairs: each step reads them back to
float32, computes the AdamW update in float32 exactly as ``optim.AdamW`` does, and stores the new
moments with fresh scales (as MS-AMP's ``msamp/optim/adamw.py`` does; the update uses the float32
moments, so their quantisation acts from the next step on).

Memory
------
FP32 AdamW holds 16 bytes per parameter: the weight, its gradient and the two moments, 4 bytes
each. `memory_rows` builds every combination on copies of a model's parameters, runs one step
and reads the bytes from the arrays held. In this simulation the model's weights stay float32
arrays (the autograd engine computes in float32 with fake-quantised FP8 GEMMs), so FP16 master
weights (O3) come *on top* of those 4 bytes; a real FP8 system keeps no float32 copy (the paper
counts the FP16 master as the weight). `MemoryRow.persistent` is that accounting: it leaves
out the float32 copy of the masters' values. FP8 gradients count as their codes and scale: the
float32 ``p.grad`` that the optimizer reads back from them is a working copy of the same kind,
not counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from . import codec, formats, scaling
from .autograd import Tensor
from .formats import _is_int, _is_real, _plain_array, _shown
from .nn import Module
from .optim import AdamW, _adamw_hyperparameters, adamw_update

__all__ = [
    "AllReduceResult", "AutoScale", "FP8AdamW", "FP8Gradients", "GradientReport", "MemoryRow",
    "STORAGE_KINDS", "fp8_all_reduce", "format_memory_table", "load_scaled", "measure_memory",
    "memory_rows", "split_batch", "store_scaled",
]

DEFAULT_THRESHOLD = 1e-5   # FP8-LM section 2.1: 0.001 % of the values at the FP8 max
DEFAULT_WINDOW = 1000      # FP8-LM section 2.1: mu doubles over 1,000 steps
MAX_FACTOR_LOG2 = 256      # mu stops growing at 2**256 (AutoScale)
_MIN_FACTOR_LOG2 = -29     # the least mu a saved state may hold: a worker scale mu * 2**k has k >= -120
                           # (AutoScale), and 2**-29 * 2**-120 is float32's smallest subnormal
FLOAT16_MAX = 65504.0
FP32_ADAMW_BYTES = 16      # weight + gradient + two moments, 4 bytes each
STORAGE_KINDS = ("E4M3", "E5M2", "float16", "float32")
FP8_GRADIENT_FORMATS = ("E4M3", "E5M2")
_FLOAT32_MAX = np.float32(np.finfo(np.float32).max)


# ================================================================================================
# Low-precision storage with a per-tensor scale
# ================================================================================================
def store_scaled(x: ArrayLike, kind: str) -> tuple[np.ndarray, np.float32]:
    """Store a float32 tensor as ``(array, scale)`` in ``kind`` with a power-of-two per-tensor scale.

    Parameters
    ----------
    x : array_like
        Real numbers, converted to float32 first (float64 rounds once; a finite value beyond
        float32's range, a bool or a complex array is an error, as in `minifp8.scaling`).
    kind : {"E4M3", "E5M2", "float16", "float32"}
        FP8 kinds (by any name `minifp8.formats.get` takes, ``formats.E4M3`` too) give uint8
        codes (saturating cast); ``float16`` gives an ``np.float16`` array;
        ``float32`` a float32 copy with scale 1.

    Returns
    -------
    (numpy.ndarray, numpy.float32)
        The stored array (x's shape, 0-d included) and the scale, ``2**floor(log2(fp_max /
        amax))`` with amax over the finite values (1 for amax 0). ``load_scaled`` reads it back as
        ``array * float32(1 / scale)``.
    """
    kind = _check_kind(kind, STORAGE_KINDS, "store_scaled: kind")
    values = codec._to_float32(x)
    if kind == "float32":
        return np.array(values, dtype=np.float32, copy=True), np.float32(1)
    # the amax of the finite values: a NaN or Inf (a moment fed a non-finite gradient) does not set
    # every other element's scale to 1, which flushed the small ones to 0; NaN keeps its code, and
    # Inf keeps its own in float16 but saturates to +-max in E4M3 and E5M2 (a saturating cast)
    amax = np.max(np.abs(values), initial=np.float32(0), where=np.isfinite(values)).astype(np.float32)
    if kind == "float16":
        scale = _float16_scale(amax)
        with np.errstate(over="ignore", under="ignore"):  # (np.asarray: a 0-d product is a NumPy scalar, not an array)
            return np.asarray((values * scale).astype(np.float16)), scale
    scale = np.float32(scaling.scale_from_amax(amax, kind, power_of_2=True))
    return scaling.quantize_with_scale(values, scale, kind), scale


def load_scaled(array: np.ndarray, scale: float | np.floating | np.integer | np.ndarray,
                kind: str) -> np.ndarray:
    """Read back what `store_scaled` stored: ``value(array) * float32(1 / scale)`` in float32 (a new array).

    ``array`` must have the dtype `store_scaled` gives ``kind`` (uint8 codes, float16 or float32)
    and ``scale`` be one number whose float32 is finite and > 0; anything else is an error.
    """
    kind = _check_kind(kind, STORAGE_KINDS, "load_scaled: kind")
    codec._check_float_environment()
    if not isinstance(array, np.ndarray) or array.dtype != _state_dtype(kind):
        raise TypeError(f"load_scaled: array must be a {_state_dtype(kind)} array ({_describe(kind)}, as "
                        f"store_scaled gives it), got {formats._described(array)}")
    scale = _plain_array(scale, "load_scaled: scale") if isinstance(scale, np.ndarray) else scale
    if not (_is_real(scale) or (isinstance(scale, np.ndarray) and scale.shape == () and scale.dtype.kind in "iuf")):
        raise TypeError(f"load_scaled: scale must be one real number (as store_scaled gives it), "
                        f"got {formats._described(scale)}")
    with np.errstate(over="ignore", under="ignore"):
        scale32 = np.float32(scale)
    if not (np.isfinite(scale32) and scale32 > 0):
        raise ValueError(f"load_scaled: scale must be finite and > 0 in float32, got {scale!r}")
    with np.errstate(under="ignore"):  # (the inverse and the products round, down among the subnormals too)
        inverse = np.float32(1) / scale32
        stored = codec.decode(array, kind) if kind in FP8_GRADIENT_FORMATS else array.astype(np.float32)
        return _finite_product(stored, inverse)


def _finite_product(values: np.ndarray, inverse: np.float32) -> np.ndarray:
    """``values * inverse`` in float32 as a new array (0-d too), a finite value kept finite: a value
    stored from near float32's max can round up to ``2**128 * scale`` (E4M3 stores 3.4e38 as
    ``256 * 2**120``), which reads back as +-FLT_MAX, not Inf."""
    with np.errstate(over="ignore"):
        product = np.asarray(values * inverse)  # (asarray: a 0-d array times a scalar is a NumPy scalar)
    if not np.isfinite(product).all():
        overflowed = np.isinf(product) & np.isfinite(values)
        product[overflowed] = np.copysign(_FLOAT32_MAX, product[overflowed])
    return product


def _float16_scale(amax: np.float32) -> np.float32:
    """``scaling.scale_from_amax`` with power_of_2, for FP16: 65504 / amax in float32, rounded down to 2**k."""
    if not (np.isfinite(amax) and amax > 0):
        return np.float32(1)
    with np.errstate(over="ignore"):
        scale = np.float32(FLOAT16_MAX) / amax
    if np.isinf(scale):
        scale = _FLOAT32_MAX
    bits = np.array(scale, np.float32).view(np.uint32) & np.uint32(0xFF80_0000)  # clear the mantissa
    return np.float32(bits.view(np.float32))


def _state_dtype(kind: str) -> np.dtype:
    return np.dtype(np.uint8 if kind in FP8_GRADIENT_FORMATS else kind)


def _describe(kind: str) -> str:
    if kind in FP8_GRADIENT_FORMATS:
        return f"uint8 ({kind} codes) + float32 scale"
    return "float16 + float32 scale" if kind == "float16" else "float32"


# ================================================================================================
# Automatic scaling factor mu
# ================================================================================================
class AutoScale:
    """FP8-LM's automatic scaling factor ``mu`` for one gradient tensor (section 2.1, Eq. 3).

    ``mu = 2**(exponent / window)`` with an integer ``exponent`` starting at 0. After each step,
    `update` takes the fraction of the (reduced) FP8 gradient's values that reached the
    format's max: above ``threshold`` it halves ``mu`` (``exponent -= window``), otherwise it grows
    ``mu`` by ``2**(1/window)`` (``exponent += 1``), doubling it over ``window`` quiet steps.

    Growth stops at ``mu = 2**MAX_FACTOR_LOG2 = 2**256`` (``exponent = 256 * window``), which a
    gradient that stays zero would otherwise pass on its way to overflowing a Python float (after
    ``1024 * window`` steps). The cap changes no cast: a worker scale ``mu * 2**k`` has
    ``k >= -120`` (E4M3 and E5M2, for any finite float32 amax), so from ``mu = 2**248`` on every
    scale is float32's max already. MS-AMP's rule has no cap.

    Parameters
    ----------
    threshold : float
        Largest tolerated saturated fraction, in [0, 1). Default 1e-5 (the paper's 0.001 %).
    window : int
        Steps over which ``mu`` doubles when nothing saturates. Default 1000 (the paper's 1,000).
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, window: int = DEFAULT_WINDOW):
        self.threshold = _check_threshold(threshold)
        self.window = _check_window(window)
        self.exponent = 0

    @property
    def factor(self) -> float:
        """``mu = 2**(exponent / window)`` (a Python float)."""
        return 2.0 ** (self.exponent / self.window)

    def update(self, saturation_fraction: float) -> float:
        """Apply the rule to this step's saturated fraction; return the new ``mu``."""
        if not _is_real(saturation_fraction):
            raise TypeError(f"AutoScale.update: the saturated fraction must be a real number, got "
                            f"{formats._described(saturation_fraction)}")
        fraction = float(saturation_fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"AutoScale.update: the saturated fraction must be in [0, 1], got {saturation_fraction!r}")
        if fraction > self.threshold:
            self.exponent -= self.window
        else:
            self.exponent = min(self.exponent + 1, MAX_FACTOR_LOG2 * self.window)
        return self.factor

    def __repr__(self) -> str:
        return (f"AutoScale(mu=2**({self.exponent}/{self.window}) = {self.factor:.6g}, "
                f"threshold={self.threshold:g}, window={self.window})")


def _check_threshold(threshold) -> float:
    if not _is_real(threshold):
        raise TypeError(f"threshold must be a real number (a fraction in [0, 1)), got {type(threshold).__name__}")
    if not 0.0 <= float(threshold) < 1.0:
        raise ValueError(f"threshold must be a fraction in [0, 1), got {threshold!r}")
    return float(threshold)


def _check_window(window) -> int:
    if not _is_int(window):
        raise TypeError(f"window must be an int >= 1, got {type(window).__name__} {window!r}")
    if window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    return int(window)


# ================================================================================================
# The simulated FP8 all-reduce
# ================================================================================================
@dataclass(frozen=True, eq=False)
class AllReduceResult:
    """One gradient tensor reduced over ``workers`` simulated workers (see `fp8_all_reduce`).

    Attributes
    ----------
    gradient : numpy.ndarray of float32
        The mean gradient, ``decode(codes) * float32(1 / scale)``.
    codes : numpy.ndarray of uint8
        The FP8 sum ``q`` of Eq. 6.
    scale : numpy.float32
        ``s = N * s_g`` (Eq. 6), the scale of ``codes``.
    shared_scale : numpy.float32
        ``s_g = min_i s_i`` (Eq. 4), over the workers whose gradient is not all zero.
    worker_scales : numpy.ndarray of float32
        ``s_i = mu * 2**floor(log2(fp_max / amax_i))``, one per worker.
    factor : float
        The auto-scaling factor ``mu`` used.
    fmt : FloatFormat
        The FP8 format of ``codes`` (E4M3 or E5M2).
    reference : numpy.ndarray of float32
        The FP32 all-reduce of the same gradients: float32 sum in worker order, divided by N (Inf
        where the sum leaves float32's range, as in FP32; the FP8 ``gradient`` stays finite there).
    error_norm, reference_norm : float
        ``||gradient - reference||_2`` and ``||reference||_2`` (float64).
    nonzero_count, underflow_count : int
        Nonzero worker inputs, and those the shared-scale cast (Eq. 5) turned into zero.
    saturation_count, size : int
        Elements that reached the format's max magnitude anywhere in the reduction (a worker's cast,
        a partial sum, ``codes``), and the tensor's size.
    """

    gradient: np.ndarray
    codes: np.ndarray
    scale: np.float32
    shared_scale: np.float32
    worker_scales: np.ndarray
    factor: float
    fmt: formats.FloatFormat
    reference: np.ndarray
    error_norm: float
    reference_norm: float
    nonzero_count: int
    underflow_count: int
    saturation_count: int
    size: int

    @property
    def workers(self) -> int:
        return len(self.worker_scales)

    @property
    def relative_error(self) -> float:
        """``||gradient - reference|| / ||reference||`` (0 when both are zero, Inf when only the reference
        is, NaN when the reference overflowed to Inf)."""
        return _ratio(self.error_norm, self.reference_norm)

    @property
    def underflow_fraction(self) -> float:
        """Fraction of nonzero worker inputs that the FP8 cast turned into zero."""
        return self.underflow_count / self.nonzero_count if self.nonzero_count else 0.0

    @property
    def saturation_fraction(self) -> float:
        """Fraction of the elements that reached the format's max magnitude in the reduction (what drives ``mu``)."""
        return self.saturation_count / self.size if self.size else 0.0


@np.errstate(under="ignore")  # (tiny gradients: their sums, scales and means may round among the subnormals)
def fp8_all_reduce(worker_grads: Sequence[Tensor | ArrayLike], fmt: str | formats.FloatFormat = "E4M3", *,
                   factor: float = 1.0) -> AllReduceResult:
    """Average one gradient tensor over N simulated workers through an FP8 all-reduce (FP8-LM Eqs. 4-6).

    Steps (module docstring for the sources): worker scales ``s_i = factor * 2**floor(log2(fp_max /
    amax_i))``; shared scale ``s_g = min_i s_i`` over the workers whose gradient is not all zero
    (Eq. 4; module docstring); ``q_i = FP8(s_g * g_i)`` with a saturating
    cast (Eq. 5); ``q = q_0 + ... + q_(N-1)`` accumulated in worker order, each partial sum rounded
    to FP8 with saturation; ``s = N * s_g`` (Eq. 6); result ``decode(q) * float32(1 / s)``.
    ``s_i``, ``s_g`` and ``s`` are float32 (``s_i`` is ``factor * 2**k`` rounded once to float32).

    Parameters
    ----------
    worker_grads : sequence of array_like or Tensor
        One floating gradient per worker, all the same shape (float64 is rounded to float32 first).
    fmt : {"E4M3", "E5M2"} or FloatFormat
    factor : float
        The auto-scaling factor ``mu`` (> 0, finite).

    Returns
    -------
    AllReduceResult
        The reduced mean gradient with statistics against the FP32 all-reduce.

    Raises
    ------
    TypeError
        Non-floating gradients (int, bool, complex, object).
    ValueError
        No workers, shapes that differ, NaN or Inf in a gradient (skip the step or lower the loss
        scale first), an unsupported format or a bad factor.
    """
    fmt = _gradient_format(fmt)
    if not _is_real(factor) or not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"fp8_all_reduce: factor must be a finite number > 0, got {factor!r}")
    grads = _check_worker_grads(worker_grads, "fp8_all_reduce")
    for i, g in enumerate(grads):
        if g.size and not np.isfinite(g).all():
            raise ValueError(f"fp8_all_reduce: worker {i}'s gradient holds NaN or Inf; FP8 all-reduce needs "
                             "finite gradients (skip the step or lower the loss scale)")
    workers = len(grads)
    amaxes = [np.max(np.abs(g), initial=np.float32(0)).astype(np.float32) for g in grads]
    worker_scales = np.array([_times_factor(scaling.scale_from_amax(a, fmt, power_of_2=True), factor)
                              for a in amaxes], dtype=np.float32)
    if not worker_scales.all():  # factor * 2**k below float32's smallest subnormal
        worker = int(np.flatnonzero(worker_scales == 0)[0])
        raise ValueError(f"fp8_all_reduce: factor {factor!r} is too small: the scale of worker {worker} "
                         f"(factor * 2**k for its amax {float(amaxes[worker])!r}) underflows float32 to 0")
    limiting = worker_scales[np.array(amaxes) > 0]  # an all-zero gradient limits nothing
    shared_scale = np.float32((limiting if limiting.size else worker_scales).min())     # Eq. 4
    casts = [scaling.quantize_with_scale(g, shared_scale, fmt) for g in grads]         # Eq. 5
    total = codec.decode(casts[0], fmt)
    codes = casts[0]
    # every value that reaches the format's max, in a worker's cast (the paper's g' = mu g) or in a
    # partial sum: a later worker of the other sign can pull a clipped sum back below the max
    reached_max = np.abs(total) == np.float32(fmt.max)
    for cast in casts[1:]:                                                              # Eq. 6, the sum
        term = codec.decode(cast, fmt)
        codes = codec.encode(total + term, fmt, saturate=True)
        total = codec.decode(codes, fmt)
        reached_max |= (np.abs(term) == np.float32(fmt.max)) | (np.abs(total) == np.float32(fmt.max))
    with np.errstate(over="ignore"):
        scale = np.float32(np.float32(workers) * shared_scale)                          # Eq. 6, s = N s_g
    if np.isinf(scale):  # (N s_g beyond float32: reported as its max, the mean taken in float64)
        scale = _FLOAT32_MAX
        gradient = (total.astype(np.float64) / (float(workers) * float(shared_scale))).astype(np.float32)
    else:
        gradient = _finite_product(total, np.float32(1) / scale)  # (the mean of finite values is finite)

    reference = _fp32_all_reduce(grads)
    nonzero = sum(int(np.count_nonzero(g)) for g in grads)
    underflow = sum(int(np.count_nonzero((g != 0) & (codec.decode(c, fmt) == 0))) for g, c in zip(grads, casts))
    saturated = int(np.count_nonzero(reached_max))
    error = (gradient.astype(np.float64) - reference.astype(np.float64)).ravel()
    return AllReduceResult(
        gradient=gradient, codes=codes, scale=scale, shared_scale=shared_scale, worker_scales=worker_scales,
        factor=float(factor), fmt=fmt, reference=reference, error_norm=float(np.sqrt(np.dot(error, error))),
        reference_norm=_norm(reference), nonzero_count=nonzero, underflow_count=underflow,
        saturation_count=saturated, size=int(reference.size))


def _times_factor(power_of_two_scale, factor: float) -> np.float32:
    with np.errstate(over="ignore"):
        scale = np.float32(float(factor) * float(power_of_two_scale))
    return _FLOAT32_MAX if np.isinf(scale) else scale


def _fp32_all_reduce(grads: list[np.ndarray]) -> np.ndarray:
    """The FP32 all-reduce: float32 sum in worker order, then divided by N in float32. A sum beyond
    float32's range is Inf, as an FP32 all-reduce gives it, without a warning (the FP8 all-reduce,
    scaled before it sums, stays finite there, and its relative error against Inf is NaN)."""
    total = np.array(grads[0], dtype=np.float32, copy=True)
    with np.errstate(over="ignore"):
        for g in grads[1:]:
            total += g
    return total / np.float32(len(grads))


def _norm(x: np.ndarray) -> float:
    flat = x.astype(np.float64).ravel()
    return float(np.sqrt(np.dot(flat, flat)))


def _ratio(error: float, reference: float) -> float:
    if reference == 0.0:
        return 0.0 if error == 0.0 else math.inf
    return error / reference


def _check_worker_grads(worker_grads, owner: str) -> list[np.ndarray]:
    if isinstance(worker_grads, np.ndarray) or not isinstance(worker_grads, (list, tuple)):
        raise TypeError(f"{owner}: worker_grads must be a list with one gradient array per worker, "
                        f"got {type(worker_grads).__name__}")
    if not worker_grads:
        raise ValueError(f"{owner}: needs at least one worker's gradient, got an empty list")
    grads = []
    for i, g in enumerate(worker_grads):
        array = g.data if isinstance(g, Tensor) else _plain_array(g, f"{owner}: worker {i}'s gradient")
        if array.dtype.kind != "f" and codec._ml_dtypes_kind(array.dtype) != "float":
            raise TypeError(f"{owner}: worker {i}'s gradient must be a floating array (float16/32/64, or an "
                            f"ml_dtypes float such as bfloat16), got dtype {array.dtype}")
        grads.append(codec._to_float32(array, f"{owner}: worker {i}'s gradient"))  # (float64 beyond float32: an error)
    shapes = {g.shape for g in grads}
    if len(shapes) > 1:
        raise ValueError(f"{owner}: every worker's gradient must have the same shape, got "
                         f"{[g.shape for g in grads]}")
    return grads


def _gradient_format(fmt) -> formats.FloatFormat:
    fmt = formats.get(fmt)
    if fmt.name not in FP8_GRADIENT_FORMATS:
        raise ValueError(f"FP8 gradients are stored as E4M3 or E5M2, got {fmt.name}")
    return fmt


# ================================================================================================
# FP8 weight gradients of a model, with one mu per tensor
# ================================================================================================
@dataclass(frozen=True, eq=False)
class GradientReport:
    """What `FP8Gradients.reduce` did this step: one `AllReduceResult` per FP8 tensor."""

    results: dict
    workers: int
    nonfinite: tuple = ()

    @property
    def relative_error(self) -> float:
        """Pooled over the FP8 tensors: ``sqrt(sum ||error||^2) / sqrt(sum ||reference||^2)``."""
        error = math.sqrt(sum(r.error_norm ** 2 for r in self.results.values()))
        return _ratio(error, math.sqrt(sum(r.reference_norm ** 2 for r in self.results.values())))

    @property
    def underflow_fraction(self) -> float:
        """Pooled: underflowed / nonzero worker inputs over all FP8 tensors."""
        nonzero = sum(r.nonzero_count for r in self.results.values())
        return sum(r.underflow_count for r in self.results.values()) / nonzero if nonzero else 0.0

    @property
    def saturation_fraction(self) -> float:
        """Pooled: saturated / all reduced values over all FP8 tensors."""
        size = sum(r.size for r in self.results.values())
        return sum(r.saturation_count for r in self.results.values()) / size if size else 0.0

    def summary(self) -> dict:
        """Plain numbers for a log line: errors, fractions, and the smallest and largest ``mu`` used."""
        factors = [r.factor for r in self.results.values()]
        return {"workers": self.workers, "relative_error": self.relative_error,
                "underflow_fraction": self.underflow_fraction, "saturation_fraction": self.saturation_fraction,
                "min_factor": min(factors, default=1.0), "max_factor": max(factors, default=1.0),
                "nonfinite": list(self.nonfinite)}


def _weight_matrices(name: str, parameter: Tensor) -> bool:
    return parameter.ndim >= 2


class FP8Gradients:
    """FP8 weight gradients with automatic scaling, all-reduced over N simulated workers (FP8-LM section 2.1).

    Holds one `AutoScale` per selected parameter, and after `reduce` the FP8 gradient
    store: ``codes[name]`` (uint8) and ``scales[name]`` (float32), from which ``p.grad`` is set to
    the dequantised float32 mean (the working copy the optimizer reads, as MS-AMP's optimizer
    upcasts the FP8 gradient). Parameters not selected are reduced by the FP32 all-reduce.

    Parameters
    ----------
    named_parameters : iterable of (str, Tensor), or a Module
        Usually ``model.named_parameters()``.
    fmt : {"E4M3", "E5M2"}
        FP8 format of the gradients (MS-AMP: E4M3).
    threshold, window
        The `AutoScale` rule (defaults: the paper's 0.001 % and 1,000 steps).
    select : callable (name, parameter) -> bool, optional
        Which gradients are FP8. Default: parameters with two or more dimensions (weight
        matrices and embeddings); biases and LayerNorm gains stay float32. MS-AMP casts the
        weights of its FP8 linear layers only.
    """

    def __init__(self, named_parameters: Iterable[tuple[str, Tensor]] | Module,
                 fmt: str | formats.FloatFormat = "E4M3", *, threshold: float = DEFAULT_THRESHOLD,
                 window: int = DEFAULT_WINDOW, select: Callable[[str, Tensor], bool] | None = None) -> None:
        self.fmt = _gradient_format(fmt)
        self.threshold = _check_threshold(threshold)
        self.window = _check_window(window)
        self.parameters = _named(named_parameters, "FP8Gradients")
        select = _weight_matrices if select is None else select
        if not callable(select):
            raise TypeError(f"FP8Gradients: select must be a callable (name, parameter) -> bool, got {select!r}")
        self.auto_scales = {name: AutoScale(self.threshold, self.window)
                            for name, p in self.parameters.items() if select(name, p)}
        self.codes: dict[str, np.ndarray] = {}
        self.scales: dict[str, np.float32] = {}

    def factor(self, name: str) -> float:
        """The current ``mu`` of one FP8 gradient."""
        if name not in self.auto_scales:
            raise KeyError(f"FP8Gradients.factor: {name!r} is not an FP8 gradient; "
                           f"they are {sorted(self.auto_scales)}")
        return self.auto_scales[name].factor

    def collect(self) -> dict:
        """``{name: copy of p.grad}`` for every parameter that has a gradient: one worker's contribution."""
        return {name: np.array(p.grad, copy=True) for name, p in self.parameters.items() if p.grad is not None}

    def reduce(self, worker_grads: Sequence[Mapping] | None = None) -> GradientReport:
        """All-reduce this step's gradients and set every ``p.grad`` to the mean.

        FP8 tensors go through `fp8_all_reduce` with their own ``mu``, which then adapts to
        the reduced tensor's saturated fraction. A tensor with NaN or Inf in any worker's gradient
        gets the FP32 all-reduce instead (so a trainer's overflow check still sees it), is listed in
        ``report.nonfinite``, and its ``mu`` is left alone. Other parameters get the FP32 all-reduce.

        Parameters
        ----------
        worker_grads : list of {name: array}, optional
            One mapping per simulated worker (e.g. from `collect`). ``None`` uses the current
            ``p.grad`` as the only worker: the local FP8 cast of ``--fp8-grads``.

        Returns
        -------
        GradientReport

        Raises
        ------
        TypeError, KeyError, ValueError
            Ill-formed ``worker_grads``: not a list of mappings, unknown names, a gradient on some
            workers only, non-floating or mis-shaped arrays. Every tensor is checked before any is
            reduced, and every reduction computed before any is written, so an error (also a
            ``mu`` too small for float32, `fp8_all_reduce`) changes no ``p.grad`` and no ``mu``.
        """
        if worker_grads is None:
            worker_grads = [self.collect()]
        if isinstance(worker_grads, Mapping) or not isinstance(worker_grads, (list, tuple)) or not worker_grads:
            raise TypeError("FP8Gradients.reduce: worker_grads must be a non-empty list with one "
                            "{name: gradient} mapping per worker")
        for i, grads in enumerate(worker_grads):
            if not isinstance(grads, Mapping):
                raise TypeError(f"FP8Gradients.reduce: worker {i}'s gradients must be a mapping name -> array, "
                                f"got {type(grads).__name__}")
            unknown = set(grads) - set(self.parameters)
            if unknown:
                raise KeyError(f"FP8Gradients.reduce: worker {i} has gradients for unknown parameters "
                               f"{sorted(unknown)}")
        checked = {}  # every tensor is checked before any is reduced: an error changes nothing
        for name, p in self.parameters.items():
            present = [name in grads and grads[name] is not None for grads in worker_grads]
            if not any(present):
                continue
            if not all(present):
                raise ValueError(f"FP8Gradients.reduce: {name!r} has a gradient on workers "
                                 f"{[i for i, ok in enumerate(present) if ok]} only; every worker needs one")
            arrays = _check_worker_grads([grads[name] for grads in worker_grads], f"FP8Gradients.reduce({name!r})")
            if arrays[0].shape != p.shape:
                raise ValueError(f"FP8Gradients.reduce: the gradient of {name!r} has shape {arrays[0].shape}, "
                                 f"the parameter has {p.shape}")
            checked[name] = arrays
        # Every reduction is computed before anything is written, so that one that raises (a mu
        # whose scale underflows) changes nothing either.
        gradients, results, nonfinite = {}, {}, []
        for name, arrays in checked.items():
            auto_scale = self.auto_scales.get(name)
            if auto_scale is None or not all(np.isfinite(a).all() for a in arrays):
                if auto_scale is not None:
                    nonfinite.append(name)
                gradients[name] = _fp32_all_reduce(arrays)
                continue
            results[name] = fp8_all_reduce(arrays, self.fmt, factor=auto_scale.factor)
            gradients[name] = results[name].gradient.copy()  # (p.grad is clipped in place; the report stays)
        self.codes = {name: result.codes for name, result in results.items()}
        self.scales = {name: result.scale for name, result in results.items()}
        for name, result in results.items():
            if result.nonzero_count:  # (an all-zero gradient says nothing of overflow: mu stays)
                self.auto_scales[name].update(result.saturation_fraction)
        for name, gradient in gradients.items():
            self.parameters[name].grad = gradient
        return GradientReport(results, len(worker_grads), tuple(nonfinite))

    def state_dict(self) -> dict:
        """The format, the rule and every ``mu`` (as its integer exponent): all a resume needs."""
        return {"fmt": self.fmt.name, "threshold": self.threshold, "window": self.window,
                "exponents": {name: int(a.exponent) for name, a in self.auto_scales.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore what `state_dict` saved; the format, rule and FP8 tensor names must match."""
        if not isinstance(state, Mapping):
            raise TypeError(f"FP8Gradients.load_state_dict: state must be a mapping (what state_dict returns), "
                            f"got {type(state).__name__}")
        saved = (state.get("fmt"), state.get("threshold"), state.get("window"))
        if saved != (self.fmt.name, self.threshold, self.window):
            raise ValueError(f"FP8Gradients.load_state_dict: saved (fmt, threshold, window) = {saved}, "
                             f"this store has {(self.fmt.name, self.threshold, self.window)}")
        exponents = state.get("exponents")
        if not isinstance(exponents, Mapping):
            raise TypeError(f"FP8Gradients.load_state_dict: state['exponents'] must map each FP8 gradient's name "
                            f"to its mu exponent (an int), got {formats._described(exponents)}")
        exponents = dict(exponents)
        if set(exponents) != set(self.auto_scales):
            raise KeyError(f"FP8Gradients.load_state_dict: saved FP8 gradients {sorted(exponents)} do not "
                           f"match this store's {sorted(self.auto_scales)}")
        for name, exponent in exponents.items():
            if not _is_int(exponent):
                raise TypeError(f"FP8Gradients.load_state_dict: exponent of {name!r} must be an int, "
                                f"got {_shown(exponent)}")
            if exponent > MAX_FACTOR_LOG2 * self.window:
                raise ValueError(f"FP8Gradients.load_state_dict: exponent of {name!r} must be at most "
                                 f"{MAX_FACTOR_LOG2 * self.window} (mu <= 2**{MAX_FACTOR_LOG2}), got {exponent}")
            if exponent < _MIN_FACTOR_LOG2 * self.window:  # (a smaller mu can make a worker scale 0 in reduce)
                raise ValueError(f"FP8Gradients.load_state_dict: exponent of {name!r} must be at least "
                                 f"{_MIN_FACTOR_LOG2 * self.window} (mu >= 2**{_MIN_FACTOR_LOG2}, so that every "
                                 f"worker scale mu * 2**k is a float32 > 0), got {exponent}")
        for name, exponent in exponents.items():
            self.auto_scales[name].exponent = int(exponent)


def split_batch(*arrays: Tensor | ArrayLike, workers: int) -> list[tuple[np.ndarray, ...]]:
    """Split arrays (ids, targets, ...) along axis 0 into ``workers`` equal shards, one per simulated worker.

    The batch size must be a positive multiple of ``workers``: then the mean of the shards'
    mean-loss gradients is the full batch's mean-loss gradient, which is what the all-reduce's
    division by N relies on. (A loss summed over tokens instead gives N times the shard mean.) The
    unit-scaled model's loss is neither (`minifp8.unit.cross_entropy` does not divide its logit
    gradient by the token count, and its ops scale gradients by the square root of the batch), so
    there the mean of the shards' gradients is ``1/sqrt(N)`` times the full batch's: the same
    direction, a smaller size, which AdamW's update sees only through its eps (and the unit family
    trains without gradient clipping).
    Arrays or Tensors (their data) of numbers; the shards are views of them.
    """
    workers = formats._check_int(workers, "split_batch: workers", 1)
    if not arrays:
        raise ValueError("split_batch: give at least one array to split")
    batch = [a.data if isinstance(a, Tensor) else _plain_array(a, "split_batch: an array") for a in arrays]
    for a in batch:
        if a.dtype.kind == "O":
            raise TypeError("split_batch: arrays must be numeric arrays (ids, targets, ...), got an object array")
        if a.ndim == 0 or a.shape[0] != batch[0].shape[0]:
            raise ValueError(f"split_batch: arrays must share their first dimension, got shapes "
                             f"{[x.shape for x in batch]}")
    if batch[0].shape[0] == 0:
        raise ValueError("split_batch: batch size 0; every worker needs at least one example")
    if batch[0].shape[0] % workers:
        raise ValueError(f"split_batch: batch size {batch[0].shape[0]} is not a multiple of workers={workers}")
    shards = [np.split(a, int(workers)) for a in batch]
    return [tuple(shard[i] for shard in shards) for i in range(int(workers))]


def _named(named_parameters, owner: str) -> dict:
    if hasattr(named_parameters, "named_parameters"):
        named_parameters = named_parameters.named_parameters()
    try:
        pairs = list(named_parameters)
    except TypeError:
        raise TypeError(f"{owner}: expected a Module or an iterable of (name, Tensor) pairs such as "
                        f"model.named_parameters(), got {type(named_parameters).__name__}") from None
    result = {}
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], Tensor)):
            raise TypeError(f"{owner}: expected (name, Tensor) pairs such as model.named_parameters(), got {item!r}")
        name, p = item
        if name in result:
            raise ValueError(f"{owner}: the parameter name {name!r} appears twice")
        result[name] = p
    if not result:
        raise ValueError(f"{owner}: got no parameters")
    return result


# ================================================================================================
# FP8 optimizer states: AdamW with an FP8 first moment and an FP16 second moment
# ================================================================================================
class FP8AdamW(AdamW):
    """AdamW with low-precision, per-tensor-scaled states (FP8-LM section 2.2; MS-AMP O2, and O3).

    The algorithm is `minifp8.optim.AdamW`'s: the same function, `minifp8.optim.adamw_update`, in
    float32; only the storage between steps changes. Each step, per parameter:

    1. read back ``m``, ``v`` (and the master weights) to float32: ``array * float32(1 / scale)``;
    2. the AdamW step in float32 (decoupled decay, moments, bias correction, update);
    3. store ``m``, ``v`` (and the master) with fresh power-of-two scales from their new amax.

    With ``master_weights="float16"`` (O3) the optimizer keeps FP16 master weights with a tensor
    scale, updates them as in 1-3, and writes their float32 value into ``p.data``; otherwise
    ``p.data`` (float32) is the master, updated in place. All ``"float32"`` storage reproduces
    ``optim.AdamW`` bit for bit.

    State per parameter: ``step``; ``exp_avg`` and ``exp_avg_sq`` (uint8 FP8 codes, float16 or
    float32 arrays) with ``exp_avg_scale`` and ``exp_avg_sq_scale`` (``np.float32``); with O3,
    ``master`` (float16) and ``master_scale``. ``state_dict`` adds ``"precision"``, which
    ``load_state_dict`` checks along with every array's dtype, so a round trip is bit-exact.

    Parameters
    ----------
    params, lr, betas, eps, weight_decay
        As `minifp8.optim.AdamW`.
    first_moment : {"E4M3", "E5M2", "float16", "float32"}
        Storage of ``m``. Default E4M3 (FP8-LM: first moment in FP8).
    second_moment : {"E4M3", "E5M2", "float16", "float32"}
        Storage of ``v``. Default float16 (FP8-LM: the second moment needs FP16; FP8 is an ablation).
    master_weights : {"float32", "float16"}
        ``"float16"``: FP16 master weights with a tensor scale (O3). ``"float32"``: off.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2, *,
                 first_moment: str = "E4M3", second_moment: str = "float16", master_weights: str = "float32") -> None:
        self.first_moment = _check_kind(first_moment, STORAGE_KINDS, "FP8AdamW: first_moment")
        self.second_moment = _check_kind(second_moment, STORAGE_KINDS, "FP8AdamW: second_moment")
        self.master_weights = _check_kind(master_weights, ("float32", "float16"), "FP8AdamW: master_weights")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            for p in group["params"]:
                if p.data.dtype != np.float32:
                    raise TypeError(f"FP8AdamW: parameters must hold float32 data, got {p.data.dtype} for {p!r}")

    @property
    def precision(self) -> dict:
        return {"first_moment": self.first_moment, "second_moment": self.second_moment,
                "master_weights": self.master_weights}

    @np.errstate(all="ignore")  # (as AdamW.step)
    def step(self) -> None:
        """One AdamW step of every parameter with a gradient (all shapes are checked first: an error updates none)."""
        self._check_before_step()
        for group in self.param_groups:
            lr, beta1, beta2, eps, weight_decay = _adamw_hyperparameters(group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = self._gradient(p)
                state = self.state.setdefault(p, {})
                if not state:
                    self._init_state(p, state)
                state["step"] += 1
                m = load_scaled(state["exp_avg"], state["exp_avg_scale"], self.first_moment)
                v = load_scaled(state["exp_avg_sq"], state["exp_avg_sq_scale"], self.second_moment)
                master = self.master_weights == "float16"
                weights = load_scaled(state["master"], state["master_scale"], "float16") if master else p.data
                adamw_update(weights, g, m, v, state["step"], lr, beta1, beta2, eps, weight_decay)
                # store with fresh scales
                state["exp_avg"], state["exp_avg_scale"] = store_scaled(m, self.first_moment)
                state["exp_avg_sq"], state["exp_avg_sq_scale"] = store_scaled(v, self.second_moment)
                if master:
                    state["master"], state["master_scale"] = store_scaled(weights, "float16")
                    np.copyto(p.data, load_scaled(state["master"], state["master_scale"], "float16"))
                p.bump_version()

    def _init_state(self, p: Tensor, state: dict) -> None:
        zeros = np.zeros(p.shape, np.float32)
        state["step"] = 0
        state["exp_avg"], state["exp_avg_scale"] = store_scaled(zeros, self.first_moment)
        state["exp_avg_sq"], state["exp_avg_sq_scale"] = store_scaled(zeros, self.second_moment)
        if self.master_weights == "float16":
            state["master"], state["master_scale"] = store_scaled(p.data, "float16")

    def _expected_state(self) -> dict:
        kinds = {"exp_avg": self.first_moment, "exp_avg_sq": self.second_moment}
        if self.master_weights == "float16":
            kinds["master"] = "float16"
        return kinds

    def state_dict(self) -> dict:
        """``optim.AdamW``'s state dict plus ``"precision"``; all copies, dtypes kept."""
        state = super().state_dict()
        state["precision"] = dict(self.precision)
        return state

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore a `state_dict`: precision, array dtypes and shapes must match; bit-exact.

        Each ``step`` must be an int >= 1 and each scale a finite float32 > 0; nothing is loaded
        unless all of it is valid.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"FP8AdamW.load_state_dict: state_dict must be a mapping (what state_dict returns), "
                            f"got {type(state_dict).__name__}")
        saved = state_dict.get("precision")
        if saved != self.precision:
            raise ValueError(f"FP8AdamW.load_state_dict: the state was saved with precision {saved}, "
                             f"this optimizer has {self.precision}")
        kinds = self._expected_state()
        expected_keys = {"step"} | set(kinds) | {f"{name}_scale" for name in kinds}
        normalised = {}
        saved_states = state_dict.get("state")
        if not isinstance(saved_states, Mapping):
            raise TypeError(f"FP8AdamW.load_state_dict: 'state' must be a dict of parameter index -> state dict "
                            f"(from state_dict()), got {formats._described(saved_states)}")
        for index, saved_state in saved_states.items():
            if not isinstance(saved_state, Mapping):
                raise TypeError(f"FP8AdamW.load_state_dict: the state of parameter {index!r} must be a dict, got "
                                f"{formats._described(saved_state)}")
            if set(saved_state) != expected_keys:
                raise KeyError(f"FP8AdamW.load_state_dict: parameter {index} has state keys {sorted(saved_state)}, "
                               f"expected {sorted(expected_keys)}")
            entry = dict(saved_state)
            step = saved_state["step"]
            message = f"FP8AdamW.load_state_dict: step of parameter {index} must be an int >= 1, got {_shown(step)}"
            if not _is_int(step):
                raise TypeError(message)
            if step < 1:
                raise ValueError(message)
            for name, kind in kinds.items():
                array = saved_state[name]
                if not isinstance(array, np.ndarray) or array.dtype != _state_dtype(kind):
                    got = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
                    raise TypeError(f"FP8AdamW.load_state_dict: {name!r} of parameter {index} must be a "
                                    f"{_state_dtype(kind)} array ({kind}), got {got}")
                scale = np.asarray(saved_state[f"{name}_scale"])
                if scale.shape != () or scale.dtype != np.float32:
                    raise TypeError(f"FP8AdamW.load_state_dict: {name}_scale of parameter {index} must be a "
                                    f"float32 scalar, got {scale.dtype} of shape {scale.shape}")
                if not (np.isfinite(scale) and scale > 0):
                    raise ValueError(f"FP8AdamW.load_state_dict: {name}_scale of parameter {index} must be finite "
                                     f"and > 0, got {scale}")
                entry[f"{name}_scale"] = np.float32(scale)
            normalised[index] = entry
        super().load_state_dict({"state": normalised, "param_groups": state_dict.get("param_groups")})


def _check_kind(kind, allowed: tuple, what: str) -> str:
    """``kind`` as one of ``allowed``; an FP8 format under any name `formats.get` takes (``"e4m3"``,
    ``"float8_e4m3fn"``, ``formats.E4M3``) becomes its catalogue name, as the gradient casts take it.
    A `FloatFormat` must be the catalogue's own (a custom one named "E4M3" is not E4M3)."""
    if isinstance(kind, formats.FloatFormat):
        name = kind.name if formats.CATALOGUE.get(kind.name) == kind else ""
    else:
        name = str(formats._check_str_choice(kind, what, allowed))
        if name not in allowed:
            try:
                name = formats.get(name).name
            except ValueError:  # (an unknown name: the error below lists what is allowed)
                pass
    if name not in allowed:
        other_names = " (or another name of one)" if set(allowed) & set(FP8_GRADIENT_FORMATS) else ""
        raise ValueError(f"{what} must be one of {', '.join(allowed)}{other_names}, got {kind!r}")
    return name


# ================================================================================================
# Memory: bytes per parameter from the arrays held
# ================================================================================================
COMPONENTS = ("weights", "master_weights", "gradients", "first_moment", "second_moment")


@dataclass(frozen=True)
class MemoryRow:
    """Bytes held per component for one configuration, from the arrays' dtypes and sizes.

    ``bytes[component]`` totals every array of that component (per-tensor float32 scales
    included); ``dtypes[component]`` says what is held. ``weights`` is the model's parameter
    arrays (float32 here), ``master_weights`` the optimizer's separate copy (none unless O3).
    """

    configuration: str
    parameters: int
    bytes: dict = field(default_factory=dict)
    dtypes: dict = field(default_factory=dict)

    def per_parameter(self, component: str) -> float:
        return self.bytes[component] / self.parameters

    @property
    def total(self) -> float:
        """Bytes per parameter over all components."""
        return sum(self.bytes.values()) / self.parameters

    @property
    def versus_fp32_adamw(self) -> float:
        """``total / 16``: the fraction of FP32 AdamW's bytes per parameter."""
        return self.total / FP32_ADAMW_BYTES

    @property
    def persistent(self) -> float:
        """Bytes per parameter that cannot be recomputed from the rest.

        With FP16 master weights, the model's float32 weights are an exact copy of the masters'
        values (``p.data = load(master)`` after every step), so they are left out: this is the
        paper's accounting, where the master is the weight. Otherwise it equals `total`.
        """
        if self.bytes.get("master_weights", 0):
            return (sum(self.bytes.values()) - self.bytes["weights"]) / self.parameters
        return self.total


def measure_memory(named_parameters: Iterable[tuple[str, Tensor]] | Module, optimizer: AdamW,
                   gradients: FP8Gradients | None = None, *, configuration: str = "current") -> MemoryRow:
    """Read the bytes held for weights, master weights, gradients and moments from live objects.

    Call it after an optimizer step and before ``zero_grad`` (so gradients and optimizer state
    exist). A parameter's gradient counts the FP8 store's codes and scale when ``gradients`` holds
    them, else ``p.grad`` (which, beside an FP8 store, holds the float32 values the optimizer reads
    back from it: this simulation's working copy, as the float32 weights are, and not counted).

    Parameters
    ----------
    named_parameters : iterable of (str, Tensor), or a Module
    optimizer : optim.AdamW or FP8AdamW
    gradients : FP8Gradients, optional
    configuration : str
        The row's label, `MemoryRow.configuration` (`memory_rows` passes each configuration's
        name, e.g. ``"FP32 AdamW"``).
    """
    params = _named(named_parameters, "measure_memory")
    if not isinstance(optimizer, AdamW):
        raise TypeError(f"measure_memory: optimizer must be an optim.AdamW or FP8AdamW, got {type(optimizer).__name__}")
    if gradients is not None and not isinstance(gradients, FP8Gradients):
        raise TypeError(f"measure_memory: gradients must be an FP8Gradients or None, got {type(gradients).__name__}")
    totals = dict.fromkeys(COMPONENTS, 0)
    held: dict[str, set[str]] = {component: set() for component in COMPONENTS}
    kinds = optimizer._expected_state() if isinstance(optimizer, FP8AdamW) else \
        {"exp_avg": "float32", "exp_avg_sq": "float32"}
    for name, p in params.items():
        totals["weights"] += p.data.nbytes
        held["weights"].add(str(p.data.dtype))
        if gradients is not None and name in gradients.codes:
            totals["gradients"] += gradients.codes[name].nbytes + np.asarray(gradients.scales[name]).nbytes
            held["gradients"].add(f"uint8 ({gradients.fmt.name} codes) + float32 scale")
        elif p.grad is not None:
            totals["gradients"] += p.grad.nbytes
            held["gradients"].add(str(p.grad.dtype))
        else:
            raise ValueError(f"measure_memory: {name!r} holds no gradient; measure after backward and before zero_grad")
        state = optimizer.state.get(p)
        if not state:
            raise ValueError(f"measure_memory: the optimizer holds no state for {name!r}; measure after a step")
        for component, key in (("first_moment", "exp_avg"), ("second_moment", "exp_avg_sq"),
                               ("master_weights", "master")):
            if key not in kinds:
                continue
            totals[component] += state[key].nbytes
            if f"{key}_scale" in state:
                totals[component] += np.asarray(state[f"{key}_scale"]).nbytes
            held[component].add(_describe(kinds[key]) if isinstance(optimizer, FP8AdamW) else str(state[key].dtype))
    held["master_weights"] = held["master_weights"] or {"none (the weights are the master)"}
    count = sum(p.size for p in params.values())
    if count == 0:
        raise ValueError("measure_memory: the parameters have no elements")
    return MemoryRow(configuration, count, totals, {k: ", ".join(sorted(v)) for k, v in held.items()})


MEMORY_CONFIGURATIONS = (
    # (name, FP8 gradients, optimizer precision or None for optim.AdamW)
    ("FP32 AdamW", False, None),
    ("FP8 gradients", True, None),
    ("FP8 optimizer states (O2)", False, "float32"),
    ("FP8 gradients + FP8 optimizer (O2)", True, "float32"),
    ("FP8 gradients + FP8 optimizer + FP16 master (O3)", True, "float16"),
)


def memory_rows(named_parameters: Iterable[tuple[str, Tensor]] | Module, *, fmt: str | formats.FloatFormat = "E4M3",
                select: Callable[[str, Tensor], bool] | None = None) -> list[MemoryRow]:
    """The memory table for every combination of FP8 gradients, FP8 optimizer states and FP16 masters.

    Each configuration is built on float32 copies of the parameters (the model is untouched), given
    zero gradients and one optimizer step, then measured with `measure_memory`.
    """
    params = _named(named_parameters, "memory_rows")
    rows = []
    for configuration, fp8_grads, master in MEMORY_CONFIGURATIONS:
        copies = [(name, Tensor(np.array(p.data, np.float32, copy=True), requires_grad=True))
                  for name, p in params.items()]
        for _, copy in copies:
            copy.grad = np.zeros(copy.shape, np.float32)
        gradients = FP8Gradients(copies, fmt, select=select) if fp8_grads else None
        if gradients is not None:
            gradients.reduce()
        tensors = [copy for _, copy in copies]
        optimizer = AdamW(tensors) if master is None else FP8AdamW(tensors, master_weights=master)
        optimizer.step()
        rows.append(measure_memory(copies, optimizer, gradients, configuration=configuration))
    return rows


def format_memory_table(rows: Iterable[MemoryRow]) -> str:
    """A plain-text table of bytes per parameter, with the dtypes held underneath.

    ``rows``: `MemoryRow` objects (any iterable), as `memory_rows` returns them.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("format_memory_table: no rows")
    for row in rows:
        if not isinstance(row, MemoryRow):
            raise TypeError(f"format_memory_table: rows must be MemoryRow objects, got {type(row).__name__}")
    headers = ("configuration", "weights", "master", "grads", "1st mom", "2nd mom", "total", "vs 16 B", "persist.")
    width = max(len(headers[0]), *(len(r.configuration) for r in rows))
    lines = [f"Bytes per parameter ({rows[0].parameters:,} parameters; FP32 AdamW = {FP32_ADAMW_BYTES}: "
             "weight, gradient and two moments, 4 bytes each)",
             f"{headers[0]:<{width}} " + " ".join(f"{h:>8}" for h in headers[1:])]
    for r in rows:
        numbers = [r.per_parameter(c) for c in COMPONENTS] + [r.total]
        lines.append(f"{r.configuration:<{width}} " + " ".join(f"{x:8.3f}" for x in numbers)
                     + f" {r.versus_fp32_adamw:8.1%} {r.persistent:8.3f}")
    lines.append("dtypes held:")
    for r in rows:
        lines.append(f"  {r.configuration}: " + "; ".join(f"{c} {r.dtypes[c]}" for c in COMPONENTS))
    lines.append("weights are the model's float32 arrays (the autograd engine computes in float32); an FP16 master "
                 "(O3) is held on top of them. 'persist.' leaves out that float32 copy of the master's values, as the "
                 "paper counts the master as the weight.")
    return "\n".join(lines)
