"""FP8 training, simulated: casts placed in the graph and driven by a recipe.

``state = apply_recipe(model, "current")`` finds every linear layer and every attention core of a
model and makes them compute through FP8, the way TransformerEngine's HYBRID format and the
unit-scaling FP8 demo do (Micikevicius et al., "FP8 formats for deep learning", arXiv:2209.05433:
E4M3 for weights and activations, E5M2 for gradients, section 3; FP8 simulated by casting to FP8
and back, section 4):

- In the forward pass the inputs and weights of every linear, and q, k and v of every attention,
  are cast to E4M3. Every linear: the LM head too, which DeepSeek-V3 (section 3.3.1) keeps in
  higher precision, with the embedding, the norms and the attention operators.
- In the backward pass the gradient flowing into each of those ops (its output gradient) is cast
  to E5M2.
- Casts are *fake quantization*: encode then decode, so every GEMM still runs in float32 on
  values that FP8 can represent, and accumulates in float32. (That idealises the hardware:
  DeepSeek-V3, arXiv:2412.19437 section 3.3.2, found H800's FP8 GEMMs keep about 14 bits of
  their sums, and a scaled GEMM applies the scales to its sums, not to each element.) Gradients
  pass straight through the casts.

Each GEMM operand is quantized along that GEMM's contraction axis, as hardware scales it. For a
linear ``y = x W^T`` (x: tokens x in, W: out x in) that means three GEMMs with their own copies:

| GEMM | computes | operands (the axis their scales run along) | roles |
|---|---|---|---|
| forward | ``y = x W^T`` | x (in), W (in) | ``x``, ``w`` |
| dgrad | ``dx = dy W`` | dy (out), W (out) | ``grad``, ``w_t`` |
| wgrad | ``dW = dy^T x`` | dy (tokens), x (tokens) | ``grad_t``, ``x_t`` |

`apply_recipe`'s ``exclude`` can run one of the three on its unrounded operands (``"lm_head:wgrad"``,
`GEMMS`). TransformerEngine's ``override_linear_precision=(False, False, True)`` does so for wgrad, the
only GEMM it accepts, in every linear of the recipe; here any one GEMM of the matched modules.

Per-tensor recipes have one scale per tensor, so the copies coincide and only ``x``, ``w`` and
``grad`` are cast. The block recipes (``mxfp8``, ``blockwise``) cast the ``_t`` copies
separately; a 128x128 weight tile is the same tile along either axis, so ``blockwise`` reuses
``w`` for ``w_t``. In training, ``x_t`` and ``w_t`` are cast in the forward pass, together with
``x`` and ``w`` (the two casts of one operand share their work), and kept for the backward pass.
The bias gradient is summed from the unquantized gradient, as TransformerEngine does.

Recipes (`RECIPES`) choose the scale at every cast point:

- ``fp32``: no casts at all (`apply_recipe` removes earlier FP8 hooks).
- ``fp8`` and ``unit``: naive casts, scale 1 (``unit`` is meant for a unit-scaled model, whose
  tensors sit near 1 by construction): ``codec.quantize``.
- ``current``: ``scaling.quantize_current``, one scale per tensor from its own amax. A scale that
  is not a power of two makes ``x * scale`` round in float32 before the cast, and the way back
  multiplies by ``float32(1 / scale)``, as TransformerEngine's Float8CurrentScaling does; both
  roundings are part of the recipe (``power_of_2=True`` makes them exact).
- ``delayed``: ``scaling.DelayedScaling``, one amax history per tensor role per cast point. The
  history advances exactly once per `FP8State.step`, so the casts of step t use the scale
  computed from the amaxes of the steps up to t-1; several forward and backward passes in one
  step (gradient accumulation) record one running max. ``margin`` must suit both E4M3 and
  E5M2, whose scalers it builds: from -112 to 8.
- ``mxfp8``: ``mx.quantize``, MXFP8 with E4M3 elements forward and E5M2 backward: 32-element
  blocks along the contraction axis, each with an E8M0 (power-of-two) scale. (E5M2 gradients are
  the HYBRID option of TransformerEngine's MXFP8BlockScaling and Float8BlockScaling; their
  default casts the gradients to E4M3 too; tutorial 7.)
- ``blockwise``: ``scaling.quantize_blockwise``, 1x128 tiles for activations and gradients,
  128x128 tiles for weights (DeepSeek-V3, arXiv:2412.19437 section 3.3.2), with float32 scales
  rounded down to powers of two, as TransformerEngine's Float8BlockScaling does by default.
  DeepSeek-V3 casts every tensor to E4M3, gradients included; here, as in every recipe of this
  module, the gradients go to E5M2 (the HYBRID option, above).

`fake_quantize` applies one recipe's cast to an array, with its statistics.

Saturation. Forward E4M3 casts saturate (overflow and Inf clamp to +-448), as TransformerEngine's
do. Backward E5M2 casts of ``fp8``, ``unit``, ``current`` and ``blockwise`` do **not** saturate by
default: overflow and Inf give +-Inf, NaN stays NaN, so an overflowing gradient stays visible, which
is what dynamic loss scaling needs to back off. For ``current`` and ``blockwise``, whose scaling.py
functions always saturate, the gradient elements those clamp come out as +-Inf instead (their scale
comes from the gradient itself, so only an Inf or NaN in it can overflow). ``delayed``'s E5M2
casts saturate by default, as TransformerEngine's do: they use last step's scale, and a gradient
whose amax outgrows the history's by more than 61440/57344 (7%) overflows, as early gradients do
(a small GPT with plain AdamW overflowed at its second step, and its loss was NaN at its third,
without clamping). ``mxfp8`` follows OCP MX v1.0 section
6.3 unchanged: elements saturate inside a block (the floor scale rule makes that part of the
format). Under the ``floor``, ``ceil`` and ``even`` scale rules a block holding Inf or NaN decodes
to NaN (`minifp8.mx`'s rule, microxcaling's), so a non-finite gradient shows there too; under
``scale_mode="rceil"`` (NVIDIA's conversion) an Inf gets the scale 2^127 and stays Inf, in E4M3
forward casts too (its element saturates, and the maximum times 2^127 overflows float32), while the
block's finite elements flush to zero (counted as underflow).
The recipe option ``saturate_gradients`` chooses: True gives TransformerEngine's saturating E5M2
casts, False the overflow to +-Inf (``delayed`` with dynamic loss scaling needs False; ``margin``
adds headroom instead of clamping). Under ``delayed`` an overflow's Inf reaches the gradient casts
below it, and each holds its scale while the Inf stays in its amax history (``history_len`` steps
under ``"max"``; `minifp8.scaling.DelayedScaler`): steps the loss scaler skips, until its scale
has shrunk the gradients to fit the held scales. `minifp8.train_tiny`'s ``--saturate-gradients auto`` clamps
for ``current``, ``delayed`` and ``blockwise``.

Attention. The attention core is one fused op that sees a single copy of each input, so each of
q, k and v is quantized once, along the contraction axis of its forward GEMM: q and k along
head_dim (``S = q k^T``), v along the key (sequence) axis (``O = P v``). The output gradient is
quantized along head_dim, the contraction axis of ``dP = dO v^T``, the GEMM that feeds dq and dk.
For per-tensor recipes the axis makes no difference. A scale taken from the current tensor lets
later tokens change earlier ones' values: under ``current`` (one amax over every token) and
``mxfp8`` (v's 32-token blocks along the sequence), changing the tokens from position 30 on moved
the logits before it (by up to 0.03, at init), where the other recipes left them exactly as they
were. ``blockwise`` can too, rarely: v's 1x128 tiles also span tokens, but its power-of-two scales
move only the values that scale into E4M3's subnormals (a value of 2.2e-5 among 0.5s moved by a
third when a later token became 3.0). Real per-tensor and block scaling do the same; a causality
test, or decoding with cached keys and values, sees it.

Statistics. Every cast records (`CastStats`, in ``state.points[name].stats[role]``) the amax of
its unscaled input, the number of nonzero inputs that became zero (underflow) and the number of
elements that saturated: the scaled input lay beyond the rounding interval of the largest finite
value (it was clamped to +-max, or became Inf), or the output is NaN. Both fractions are over all
elements of the tensor. The counts are exact, taken on the very scaled values the cast rounded.

Speed. The casts are fastcast.py's: they compute what the reference functions compute, bit for
bit, with the same float32 operations, but without materialising codes (that module's docstring
says how). This module places them in the graph.

Scale tracking. `track` is an identity op that, inside a `ScaleTracker` context, records the
std and mean |x| of a tensor and of its gradient: what ``plots.scale_plot`` draws.
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import math
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from . import codec, fastcast, formats, mx, scaling
from . import functional as F
from .autograd import Tensor, as_tensor, is_grad_enabled, make_op
from .fastcast import BACKWARD_FORMAT, FORWARD_FORMAT, PER_TENSOR_RECIPES, CastStats
from .formats import _check_int, _is_int, _plain_array, _shown

__all__ = [
    "GEMMS", "GRADIENT_ROLES", "RECIPES", "RECIPE_OPTIONS", "ROLES", "CastPoint", "CastStats", "FP8Attention",
    "FP8Linear", "FP8State", "ScaleRecord", "ScaleTracker", "apply_recipe", "fake_quantize", "track",
]

RECIPES = ("fp32", "fp8", "unit", "current", "delayed", "mxfp8", "blockwise")

# The options each recipe takes (apply_recipe(model, recipe, **options)) and their defaults.
# saturate_gradients=True clamps E5M2 gradient casts to +-max as TransformerEngine does, False lets
# them overflow to Inf (module docstring, "Saturation": delayed clamps by default, the others not).
RECIPE_OPTIONS: dict[str, dict] = {
    "fp32": {},
    "fp8": {"saturate_gradients": False},
    "unit": {"saturate_gradients": False},
    "current": {"power_of_2": False, "saturate_gradients": False},
    "delayed": {"history_len": 1024, "amax_compute_algo": "max", "margin": 0, "saturate_gradients": True},
    "mxfp8": {"scale_mode": "floor"},
    "blockwise": {"power_of_2": True, "saturate_gradients": False},
}
_DELAYED_SCALING_OPTIONS = ("history_len", "amax_compute_algo", "margin")
_OPTION_TYPES = {bool: (bool, np.bool_), int: (int, np.integer), str: (str,)}  # by the default's type
_OPTION_TYPE_NAMES = {bool: "a bool", int: "an int", str: "a str"}

_GEMM_ROLES = ("x", "w", "grad")
_ATTENTION_ROLES = ("q", "k", "v", "grad")
# The roles of each tensor that apply_recipe's exclude can leave in float32 ("module:tensor"): a
# tensor's columnwise copy goes with it.
_TENSOR_ROLES = {"x": ("x", "x_t"), "w": ("w", "w_t"), "grad": ("grad", "grad_t"), "q": ("q",), "k": ("k",),
                 "v": ("v",)}
#: A linear's three GEMMs (TransformerEngine's names) and the copies each reads (the table above).
#: apply_recipe's exclude can run one of them in float32 ("module:wgrad"); TransformerEngine's
#: ``override_linear_precision=(fprop, dgrad, wgrad)`` accepts only wgrad, for every linear.
GEMMS = {"fprop": ("x", "w"), "dgrad": ("grad", "w_t"), "wgrad": ("grad_t", "x_t")}
_GEMM_TENSORS = frozenset(_GEMM_ROLES) | frozenset(GEMMS)
_GEMM_COPIES = ("x", "w", "grad", "x_t", "w_t", "grad_t")  # (every role a gemm's point can cast)
_ATTENTION_TENSORS = frozenset(_ATTENTION_ROLES)
#: Every role a cast point records (`CastPoint.stats`); the ``_t`` casts are the block recipes'
#: copies along the other axis.
ROLES = ("x", "w", "grad", "x_t", "w_t", "grad_t", "q", "k", "v")
#: The backward pass's casts (E5M2), the ones that see the gradients.
GRADIENT_ROLES = ("grad", "grad_t")


# ================================================================================================
# Cast points and their statistics (CastStats)
# ================================================================================================

def _unshared_reference_count() -> int:
    """``sys.getrefcount`` of an array that only a dict holds, read as `CastPoint._output` reads it."""
    outputs = {"role": np.empty(1)}
    array = outputs.get("role")
    return sys.getrefcount(array)


_UNSHARED_REFERENCE_COUNT = _unshared_reference_count()


class CastPoint:
    """One place in the model where tensors are cast: a linear's GEMM or an attention core.

    Attributes
    ----------
    name : str
        The module's dotted name.
    kind : {"gemm", "attention"}
    stats : dict of str -> CastStats
        The latest cast of each role cast so far: ``x``, ``w``, ``grad`` (and ``x_t``, ``grad_t``
        for block recipes, and ``w_t`` for ``mxfp8``: ``blockwise``'s weight tiles serve both
        axes) for a GEMM; ``q``, ``k``, ``v``, ``grad`` for attention. Block recipes cast only what
        the backward pass needs: no ``grad`` (nor ``w_t``) where x needs no gradient, no ``x_t``
        or ``grad_t`` where the weight needs none.
    scalers : dict of str -> scaling.DelayedScaling
        One per role under the ``delayed`` recipe (the ``_t`` copies share their tensor's);
        empty otherwise.
    uncast : frozenset of str
        The roles left in float32 (`apply_recipe`'s ``exclude``, ``"module:tensor"``, and the copies
        that only float32 GEMMs read): they pass through unchanged, with no statistics and no scaler.
    float32_gemms : frozenset of str
        The GEMMs of a linear (`GEMMS`) that run on its unrounded operands (``"module:wgrad"``).
    """

    def __init__(self, name: str, kind: str, recipe: str, options: dict, uncast: frozenset = frozenset(),
                 float32_gemms: frozenset = frozenset()):
        self.name, self.kind, self.uncast, self.float32_gemms = name, kind, uncast, float32_gemms
        self.stats: dict[str, CastStats] = {}
        self.scalers: dict[str, scaling.DelayedScaling] = {}
        self._outputs: dict[str, np.ndarray] = {}
        if recipe == "delayed":
            for role in (_GEMM_ROLES if kind == "gemm" else _ATTENTION_ROLES):
                if role in uncast:
                    continue
                fmt = BACKWARD_FORMAT if role == "grad" else FORWARD_FORMAT
                delayed_options = {key: options[key] for key in _DELAYED_SCALING_OPTIONS}
                self.scalers[role] = scaling.DelayedScaling(fmt, **delayed_options)

    @contextlib.contextmanager
    def _all_or_nothing(self, roles: tuple):
        """Casts of ``roles`` in this block leave no trace if the block raises: each role's
        statistics and its scaler's amax of this step are put back (`DelayedScaling.quantize`'s
        rule, "a cast that raises records nothing", for a hook that casts several tensors and then
        calls what may still refuse them)."""
        stats = {role: self.stats.get(role) for role in roles}
        scalers = {id(scaler): scaler for scaler in map(self.scalers.get, roles) if scaler is not None}
        amaxes = [(scaler, scaler.amax_history[0].copy()) for scaler in scalers.values()]
        try:
            yield
        except BaseException:
            for role, cast_stats in stats.items():
                if cast_stats is None:
                    self.stats.pop(role, None)
                else:
                    self.stats[role] = cast_stats
            for scaler, amax in amaxes:
                scaler.amax_history[0] = amax
            raise

    def _output(self, role, shape: tuple, dtype) -> np.ndarray:
        """An array for the values of a cast of ``role`` (or of a tuple of roles cast together, stacked):
        the previous cast's, once nothing but this point refers to it any more (the graph that used
        it is gone), else a new one.

        Each step's casts would otherwise write into fresh memory, which the operating system
        must hand out and zero page by page. The check counts references (CPython's
        ``sys.getrefcount``): a view, a Tensor or a closure that still holds the array keeps it
        from being reused. What an unshared array counts (this dict's reference, the local name's,
        the call's own) depends on the interpreter (3.14 borrows locals), so it is measured once,
        by `_unshared_reference_count`, in the same steps.
        """
        array = self._outputs.get(role)
        if array is None or array.shape != shape or array.dtype != dtype or \
                sys.getrefcount(array) > _UNSHARED_REFERENCE_COUNT:
            array = self._outputs[role] = np.empty(shape, dtype)
        return array

    def __getstate__(self) -> dict:
        """What pickle and ``copy.deepcopy`` keep: everything but the reused output arrays, scratch
        memory that the next cast refills (and allocates where missing), often many times the size
        of the model's parameters."""
        return {**self.__dict__, "_outputs": {}}

    def __repr__(self) -> str:
        uncast = f", uncast={sorted(self.uncast)}" if self.uncast else ""
        float32_gemms = f", float32_gemms={[gemm for gemm in GEMMS if gemm in self.float32_gemms]}" \
            if self.float32_gemms else ""
        return f"CastPoint({self.name!r}, {self.kind}, roles={sorted(self.stats)}{uncast}{float32_gemms})"


class FP8State:
    """The cast points a recipe installed, with their statistics and delayed-scaling histories.

    Returned by `apply_recipe`. Call `step` once per optimizer step.

    One thread at a time runs the model it belongs to (as with any model here): casts at one
    cast point from two threads at once would race on its statistics, its delayed-scaling
    histories and its reused output arrays (`CastPoint`). Models of their own, with states of
    their own, may run in threads side by side.

    A model's hooks hold its state: ``copy.deepcopy`` or pickle the model and its state in one call
    (``copy.deepcopy((model, state))``), or the copied model casts with a copied state that the
    original's ``state.step()`` never advances. Copies keep the statistics and histories, not the
    cast points' reused output arrays (scratch memory).

    Attributes
    ----------
    recipe : str
    options : dict
        The recipe's options, defaults filled in.
    points : dict of str -> CastPoint
        Keyed by the module's dotted name.
    steps : int
        How many times `step` was called.
    """

    def __init__(self, recipe: str, options: dict):
        self.recipe, self.options = recipe, dict(options)
        self.points: dict[str, CastPoint] = {}
        self.steps = 0

    def _add_point(self, name: str, kind: str, uncast: frozenset = frozenset(),
                   float32_gemms: frozenset = frozenset()) -> CastPoint:
        if name in self.points:  # its statistics and histories would be lost
            raise ValueError(f"apply_recipe: two cast points would be named {name!r}")
        point = CastPoint(name, kind, self.recipe, self.options, uncast, float32_gemms)
        self.points[name] = point
        return point

    def step(self) -> None:
        """End of an optimizer step: advance every delayed-scaling history exactly once.

        A step that loss scaling skips (its gradients overflowed, so the optimizer does not update)
        advances it too: its casts ran and recorded their amaxes.
        """
        for point in self.points.values():
            for scaler in point.scalers.values():
                scaler.update()
        self.steps += 1

    def summary(self, roles: Iterable[str] | None = None) -> dict:
        """The worst cast of the latest statistics.

        Parameters
        ----------
        roles : iterable of str, optional
            Only the casts of these roles, e.g. `GRADIENT_ROLES` (the backward pass's E5M2 casts:
            which of them overflowed, when the gradients did). Default: every role.

        Returns
        -------
        dict
            ``max_underflow`` and ``max_saturation`` (fractions), and ``max_underflow_at`` /
            ``max_saturation_at`` naming that cast as ``"point:role"`` (None while the fraction
            is 0).

        Raises
        ------
        TypeError
            ``roles`` is a string (not a collection of them) or holds a non-string.
        ValueError
            ``roles`` names a role no cast point has.
        """
        if roles is not None:
            names = list(roles) if isinstance(roles, Iterable) and not isinstance(roles, (str, bytes)) else None
            if names is None or not all(isinstance(role, str) for role in names):
                raise TypeError(f"FP8State.summary: roles must be a collection of role names such as "
                                f"{GRADIENT_ROLES}, got {_shown(roles)}")
            roles = names
            unknown = sorted(set(roles) - set(ROLES))
            if unknown:
                raise ValueError(f"FP8State.summary: unknown role(s) {unknown}; the roles are {', '.join(ROLES)}")
        result: dict[str, Any] = {"max_underflow": 0.0, "max_underflow_at": None,  # (floats, and str or None)
                                  "max_saturation": 0.0, "max_saturation_at": None}
        for point in self.points.values():
            for role, stats in point.stats.items():
                if roles is not None and role not in roles:
                    continue
                for key, value in (("max_underflow", stats.underflow_fraction),
                                   ("max_saturation", stats.saturation_fraction)):
                    if value > result[key]:
                        result[key], result[key + "_at"] = value, f"{point.name}:{role}"
        return result

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to resume bit-exactly: the recipe, its options (keys ``"options.<name>"``),
        the step count and, for ``delayed``, every history and scale (keys
        ``"<point>.<role>.amax_history"``, ``.scale``, ``.scale_inv``)."""
        state = {"recipe": np.array(self.recipe), "steps": np.array(self.steps, np.int64)}
        state.update({f"options.{name}": np.array(value) for name, value in self.options.items()})
        for point in self.points.values():
            for role, scaler in point.scalers.items():
                prefix = f"{point.name}.{role}."
                state[prefix + "amax_history"] = scaler.amax_history.copy()
                state[prefix + "scale"] = np.array(scaler.scale, np.float32)
                state[prefix + "scale_inv"] = np.array(scaler.scale_inv, np.float32)
        return state

    def load_state_dict(self, state: Mapping[str, ArrayLike]) -> None:
        """Restore `state_dict` output. Everything is checked before anything is loaded.

        Raises
        ------
        TypeError
            ``state`` is not a mapping, or an entry is not a floating array.
        KeyError
            Missing or unexpected keys (another model's).
        ValueError
            Another recipe (named, whatever its keys), or the same one with other options (another
            ``margin``, say: the scales would differ from the saved run's), an entry of another
            shape (another ``history_len``), a negative amax, a scale that is not finite and > 0, or
            ``steps`` not an integer >= 0.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"FP8State.load_state_dict: state must be a mapping (what state_dict returns), "
                            f"got {type(state).__name__}")
        expected = self.state_dict()
        if "recipe" in state and str(np.asarray(state["recipe"])) != self.recipe:  # (before the keys, which differ)
            raise ValueError(f"FP8State.load_state_dict: the state is for recipe {str(np.asarray(state['recipe']))!r}, "
                             f"this model uses {self.recipe!r}")
        missing = [key for key in expected if key not in state]
        unexpected = [key for key in state if key not in expected]
        if missing or unexpected:
            raise KeyError(f"FP8State.load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        option_keys = {f"options.{name}" for name in self.options}
        for name, value in self.options.items():
            saved = np.asarray(state[f"options.{name}"])
            if saved.shape != () or saved.dtype.kind != np.asarray(value).dtype.kind or saved.item() != value:
                shown = _shown(saved.item() if saved.shape == () else saved)
                raise ValueError(f"FP8State.load_state_dict: the state is for {self.recipe} with {name}={shown}, "
                                 f"this model uses {name}={value!r}")
        steps = np.asarray(state["steps"])
        if steps.shape != () or steps.dtype.kind not in "iu" or not 0 <= int(steps) < 2**63:  # (saved as int64)
            shown = _shown(steps.item() if steps.shape == () else steps)
            raise ValueError(f"FP8State.load_state_dict: steps must be an integer in [0, 2**63), got {shown}")
        arrays = {}
        for key, current in expected.items():
            if key in ("recipe", "steps") or key in option_keys:  # (a module may be named "options")
                continue
            array = np.asarray(state[key])
            if array.dtype.kind != "f":
                raise TypeError(f"FP8State.load_state_dict: {key} must be a floating array, got dtype {array.dtype}")
            if array.shape != current.shape:
                raise ValueError(f"FP8State.load_state_dict: {key} has shape {array.shape}, expected {current.shape}")
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                converted = array.astype(np.float32)
                lost = (np.isfinite(array) & ~np.isfinite(converted)) | ((converted == 0) & (array != 0))
            if lost.any():  # (a review's find: 1e39 became an Inf amax, which froze a scale for history_len steps)
                raise ValueError(f"FP8State.load_state_dict: {key} holds {float(array[lost].flat[0])!r}, which float32 "
                                 f"cannot hold (a state that minifp8 saved holds float32 values)")
            array = converted
            if key.endswith(".amax_history") and (array < 0).any():  # amaxes are |x| (NaN and Inf are recorded)
                raise ValueError(f"FP8State.load_state_dict: {key} holds a negative amax, {array[array < 0][0]}")
            if not key.endswith(".amax_history") and not (np.isfinite(array) and array > 0):
                raise ValueError(f"FP8State.load_state_dict: {key} must be finite and > 0, got {array}")
            arrays[key] = array
        for point in self.points.values():  # scale_inv is float32(1 / scale) (DelayedScaling.update)
            for role in point.scalers:
                prefix = f"{point.name}.{role}."
                scale, scale_inv = arrays[prefix + "scale"], arrays[prefix + "scale_inv"]
                inverse = scaling._inverse(scale)  # (1 / FLT_MAX: subnormal; 1 / a subnormal scale: Inf, refused)
                if scale_inv != inverse:  # (the casts use 1 / scale, the reference scale_inv)
                    raise ValueError(f"FP8State.load_state_dict: {prefix}scale_inv must be float32(1 / scale) = "
                                     f"{inverse!r}, got {scale_inv!r}")
        for point in self.points.values():
            for role, scaler in point.scalers.items():
                prefix = f"{point.name}.{role}."
                scaler.amax_history = arrays[prefix + "amax_history"]
                scaler.scale = np.float32(arrays[prefix + "scale"])
                scaler.scale_inv = np.float32(arrays[prefix + "scale_inv"])
        self.steps = int(steps)

    def __repr__(self) -> str:
        return f"FP8State(recipe={self.recipe!r}, points={len(self.points)}, steps={self.steps})"


# ================================================================================================
# The casts (fastcast.py computes them): one array, and a cast point's in the graph
# ================================================================================================
def fake_quantize(x: ArrayLike, recipe: str, fmt: str | formats.FloatFormat = "E4M3", *, axis: int = -1,
                  weight: bool = False, scaler: scaling.DelayedScaling | None = None,
                  **options: bool | int | str) -> tuple[np.ndarray, CastStats]:
    """Quantize and dequantize an array as a cast point of ``recipe`` does, with its statistics.

    Parameters
    ----------
    x : array_like
        float16, float32 or float64 values in either byte order, or an ml_dtypes float array
        (bfloat16, ``float8_*``, ``float6_*``, ``float4_*``); float16 and ml_dtypes floats convert to float32
        exactly (the result is that for ``x.astype(np.float32)``). Any shape (0-d only for the
        per-tensor recipes), views too. It is never written to.
    recipe : str
        One of `RECIPES` (``fp32`` returns float32 ``x`` unchanged).
    fmt : {"E4M3", "E5M2"}
        E4M3 is a forward cast and saturates; E5M2 is a gradient cast and does not (overflow and
        Inf give Inf), except inside MX blocks and where ``saturate_gradients`` is True (by
        default under ``delayed``; module docstring).
    axis : int
        The contraction axis the scales run along (block recipes; per-tensor recipes ignore it).
    weight : bool
        128x128 tiles instead of 1x128 under ``blockwise`` (2-d ``x`` only); the other recipes have
        no weight tiles, and refuse ``weight=True``.
    scaler : scaling.DelayedScaling, optional
        Required by ``delayed``, refused by the others: the history to record ``max|x|`` in and
        take the scale from (its format must be ``fmt``). Its ``update`` is left to the caller.
    **options
        The recipe's options (`RECIPE_OPTIONS`).

    Returns
    -------
    (numpy.ndarray, CastStats)
        The dequantized values (float32, x's shape) and what the cast did.

    Raises
    ------
    ValueError
        An unknown recipe or format, a format other than E4M3/E5M2, a bad option value, a 0-d
        ``x`` under a block recipe, an axis out of range for ``x`` (any recipe; a 0-d ``x`` has
        none to check), ``weight=True`` under a recipe other than ``blockwise`` or on a non-2-d
        ``x`` under it, a scaler of another format, or float64 ``x`` beyond float32's range under
        a recipe other than ``fp8`` and ``unit`` (which round float64 exactly: E4M3 saturates,
        E5M2 overflows to Inf).
    TypeError
        ``x`` not float16/32/64 or an ml_dtypes float (int, ml_dtypes' int4, bool, complex,
        object), an ill-typed ``recipe``, ``fmt``, option, ``axis`` or ``weight``, a missing
        scaler under ``delayed`` or one given to another recipe, or a scaler's own options
        (``history_len``, ``amax_compute_algo``, ``margin``) under ``delayed``: the scaler holds
        them.

    Notes
    -----
    Each recipe equals its scaling.py / mx.py function bit for bit (tests/test_fp8.py): ``fp8``
    is ``codec.quantize``; ``current`` is ``scaling.quantize_current(...).dequantize()``;
    ``delayed`` is ``scaler.quantize(x, update=False).dequantize()``; ``mxfp8`` is
    ``mx.quantize(x, MXFP8_E4M3 or MXFP8_E5M2, axis=axis).dequantize()``; ``blockwise`` is
    ``scaling.quantize_blockwise(x, block_shape=(1, 128) or (128, 128), axis=axis).dequantize()``;
    with E5M2 clamps turned into Inf outside MX. The fast paths only skip materialising the codes.
    """
    _check_recipe(recipe, "fake_quantize")
    scaler_options = [key for key in _DELAYED_SCALING_OPTIONS if key in options]
    if recipe == "delayed" and scaler_options:  # (apply_recipe builds the scalers from them; here it is given)
        raise TypeError(f"fake_quantize: recipe 'delayed' casts with its scaler's own history, so it takes no "
                        f"{', '.join(scaler_options)}; set them on the scaler: "
                        f"scaler=scaling.DelayedScaling(fmt, {', '.join(f'{k}=...' for k in scaler_options)})")
    options = _recipe_options(recipe, options, "fake_quantize")
    fmt = formats.get(fmt)
    if fmt not in (FORWARD_FORMAT, BACKWARD_FORMAT):
        raise ValueError(f"fake_quantize casts to E4M3 (forward) or E5M2 (gradients), got {fmt.name}")
    array = _plain_array(x)
    array = codec._ml_floats_as_float32(array)  # bfloat16, float8_*, ...: float32 holds them exactly
    if array.dtype.kind == "f" and not array.dtype.isnative:  # a big-endian float32 is a float32
        array = array.astype(array.dtype.newbyteorder("="))
    if codec._ml_dtypes_kind(array.dtype):  # int4, complex32, ...
        raise TypeError(f"fake_quantize: x must be a float16, float32 or float64 array (any byte order) or an "
                        f"ml_dtypes float array (bfloat16, float8_*, ...), got dtype {array.dtype}")
    if array.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"fake_quantize: x must be a float16, float32 or float64 array (any byte order), "
                        f"got dtype {array.dtype}")
    if array.dtype == np.float16:
        array = array.astype(np.float32)  # exact
    elif array.dtype == np.float64 and recipe not in ("fp8", "unit"):  # float32 work, or float32 values
        # beyond its range (mxfp8 rounds float64 exactly, but a block of 1e39 dequantizes to Inf)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # (invalid: a signalling NaN)
            codec._check_fits(array, array.astype(np.float32))
    weight = formats._check_bool(weight, "fake_quantize: weight")
    if weight and recipe != "blockwise":  # (fp8.py's cast points pass it for every recipe, to fastcast.cast)
        raise ValueError(f"fake_quantize: weight=True (128x128 weight tiles) applies to recipe 'blockwise' only, "
                         f"got recipe {recipe!r}")
    if recipe in ("mxfp8", "blockwise"):
        if array.ndim == 0:
            raise ValueError(f"recipe {recipe!r} scales blocks along an axis; got a 0-d array")
        axis = scaling._axis(axis, array.ndim)
        if recipe == "blockwise" and weight and array.ndim != 2:
            raise ValueError(f"128x128 weight tiles need a 2-d array, got shape {array.shape}")
    elif array.ndim:  # (per-tensor recipes do not use it, but a wrong one is still an error)
        axis = scaling._axis(axis, array.ndim)
    elif not _is_int(axis):
        raise TypeError(f"axis must be an int, got {type(axis).__name__} {axis!r}")
    if recipe == "delayed":
        if not isinstance(scaler, scaling.DelayedScaling):
            raise TypeError("recipe 'delayed' needs scaler=scaling.DelayedScaling(...) holding the amax history")
        if scaler.fmt != fmt:
            raise ValueError(f"the scaler casts to {scaler.fmt.name}, but fmt is {fmt.name}")
    elif scaler is not None:
        raise TypeError(f"fake_quantize: scaler is only used by recipe 'delayed', got recipe {recipe!r}")
    return fastcast.cast(array, recipe, options, fmt, axis, weight, scaler)


def _cast(state: FP8State, point: CastPoint, role: str, x: np.ndarray, fmt, axis: int,
          weight: bool = False) -> np.ndarray:
    """The cast of ``role`` at ``point``: returns the values and stores the statistics on the point
    (``x`` itself where the role is left uncast)."""
    if role in point.uncast:
        return x
    values, point.stats[role] = fastcast.cast(x, state.recipe, state.options, fmt, axis, weight,
                                              point.scalers.get(role), functools.partial(point._output, role))
    return values


def _cast_both(state: FP8State, point: CastPoint, roles: tuple, x: np.ndarray, fmt) -> tuple:
    """The rowwise (axis -1) and columnwise (axis 0) casts of a 2-D ``x`` under a block recipe, for
    ``roles`` (e.g. ``("x", "x_t")``): `fastcast.cast_pair`, or two `_cast` calls where it declines
    (``x`` itself for a role left uncast)."""
    pair = None if not point.uncast.isdisjoint(roles) else fastcast.cast_pair(
        x, state.recipe, state.options, fmt, functools.partial(point._output, roles))
    if pair is None:
        return tuple(_cast(state, point, role, x, fmt, axis) for role, axis in zip(roles, (-1, 0)))
    for role, (_, stats) in zip(roles, pair):
        point.stats[role] = stats
    return tuple(values for values, _ in pair)


def _quantize_forward(state, point, role, x: Tensor, axis: int) -> Tensor:
    """A forward cast to E4M3; the gradient passes straight through (straight-through estimator)."""
    values = _cast(state, point, role, x.data, FORWARD_FORMAT, axis).astype(x.data.dtype, copy=False)
    return make_op(values, (x,), lambda grad: (grad,), f"fp8_cast_{role}")


def _quantize_backward(state, point, role, x: Tensor, axis: int) -> Tensor:
    """Identity in the forward pass; casts the gradient to E5M2 in the backward pass."""

    def backward(grad):
        return (_cast(state, point, role, grad, BACKWARD_FORMAT, axis).astype(grad.dtype, copy=False),)

    return make_op(x.data, (x,), backward, f"fp8_cast_{role}")


# ================================================================================================
# The hooks: an FP8 GEMM for linear layers and casts around attention cores
# ================================================================================================
class FP8Linear:
    """``gemm(x, weight, bias) = x @ weight.T + bias`` with FP8 casts of every GEMM operand.

    Installed by `apply_recipe` as a linear module's ``gemm``. Forward: x and W in E4M3
    along in_features. Backward: dgrad from dy (E5M2) and W, both along out_features; wgrad from
    dy (E5M2) and x, both along the token axis (module docstring). Gradients are straight-through:
    each is the GEMM of the quantized operands, in the dtype `minifp8.functional.linear` promotes
    the operands to (float32, or float64 where one of them is).
    """

    def __init__(self, state: FP8State, point: CastPoint):
        self.state, self.point = state, point

    def __repr__(self) -> str:
        return f"FP8Linear({self.point.name!r}, recipe={self.state.recipe!r})"

    def __call__(self, x: Tensor | ArrayLike, weight: Tensor | ArrayLike,
                 bias: Tensor | ArrayLike | None = None) -> Tensor:
        x, weight = as_tensor(x), as_tensor(weight)
        if weight.ndim != 2:
            raise ValueError(f"FP8 gemm {self.point.name!r}: weight must be 2-D (out_features, in_features), "
                             f"got shape {weight.shape}")
        out_features, in_features = weight.shape
        if x.ndim == 0 or x.shape[-1] != in_features:
            raise ValueError(f"FP8 gemm {self.point.name!r}: x has shape {x.shape}, its last axis must be "
                             f"in_features={in_features} (weight shape {weight.shape})")
        if bias is not None:
            bias = as_tensor(bias)
            if bias.shape != (out_features,):
                raise ValueError(f"FP8 gemm {self.point.name!r}: bias must have shape ({out_features},), "
                                 f"got {bias.shape}")
        for name, t in (("x", x), ("weight", weight), ("bias", bias)):
            if t is not None and t.data.dtype.kind != "f":
                raise TypeError(f"FP8 gemm {self.point.name!r}: {name} must be a floating tensor, got dtype {t.dtype}")
        state, point = self.state, self.point
        # the dtype functional.linear's x @ weight.T + bias promotes to (float64 weights and a float32 x
        # gave float32 here, float64 there)
        dtype = np.result_type(*(t.data.dtype for t in (x, weight, bias) if t is not None))
        per_tensor = state.recipe in PER_TENSOR_RECIPES
        x2 = x.data.reshape(math.prod(x.shape[:-1]), in_features)  # (-1 cannot size a 0-feature reshape)
        # Which GEMMs run on FP8 copies: all but those left in float32 ("module:wgrad"); a float32
        # GEMM reads the unrounded operands, as functional.linear does. Of the backward GEMMs, those
        # this pass will run, as far as forward can tell (an operand that starts requiring grad
        # later gets its copies cast in backward).
        fprop = "fprop" not in point.float32_gemms
        dgrad = "dgrad" not in point.float32_gemms and is_grad_enabled() and x.requires_grad
        wgrad = "wgrad" not in point.float32_gemms and is_grad_enabled() and weight.requires_grad
        # What wgrad reads as x_t and dgrad as w_t (_serving_cast): the rowwise cast itself where one
        # serves every GEMM (per-tensor recipes; blockwise's 128x128 weight tiles), else a columnwise
        # copy, which is cast now where backward will need it, together with the rowwise one (they
        # share work: _cast_both).
        input_read, weight_read = _serving_cast("x_t", state.recipe), _serving_cast("w_t", state.recipe)
        x_q = w_q = x_t = w_t = None
        with point._all_or_nothing(("x", "x_t", "w", "w_t")):  # (w's cast may refuse what x's recorded)
            if fprop and wgrad and input_read == "x_t":
                x_q, x_t = _cast_both(state, point, ("x", "x_t"), x2, FORWARD_FORMAT)
            elif fprop or (wgrad and input_read == "x"):
                x_q = _cast(state, point, "x", x2, FORWARD_FORMAT, axis=-1)
            if fprop and dgrad and weight_read == "w_t":
                w_q, w_t = _cast_both(state, point, ("w", "w_t"), weight.data, FORWARD_FORMAT)
            elif fprop or (dgrad and weight_read == "w"):
                w_q = _cast(state, point, "w", weight.data, FORWARD_FORMAT, axis=-1, weight=True)
        if fprop:
            assert x_q is not None and w_q is not None  # (both cast above whenever fprop runs in FP8)
            out = x_q.astype(dtype, copy=False) @ w_q.astype(dtype, copy=False).T
        else:
            out = (x2 @ weight.data.T).astype(dtype, copy=False)
        if bias is not None:
            out += bias.data
        out = out.reshape(x.shape[:-1] + (out_features,))

        def backward(grad):
            g2 = grad.reshape(len(x2), out_features)
            grad_x = grad_w = grad_b = None
            # (requires_grad read again: an operand may have started requiring grad after forward)
            fp8_dgrad = x.requires_grad and "dgrad" not in point.float32_gemms
            fp8_wgrad = weight.requires_grad and "wgrad" not in point.float32_gemms
            g_q = g_t = None
            if per_tensor and (fp8_dgrad or fp8_wgrad):  # one scale per tensor: the copies coincide
                g_q = g_t = _cast(state, point, "grad", g2, BACKWARD_FORMAT, axis=-1).astype(dtype, copy=False)
            elif fp8_dgrad and fp8_wgrad:
                g_q, g_t = _cast_both(state, point, ("grad", "grad_t"), g2, BACKWARD_FORMAT)
            if x.requires_grad:  # dgrad: contraction over out_features
                if not fp8_dgrad:
                    grad_x = g2 @ weight.data
                else:
                    if g_q is None:
                        g_q = _cast(state, point, "grad", g2, BACKWARD_FORMAT, axis=-1)
                    weight_t = w_q if weight_read == "w" else w_t
                    if weight_t is None:  # (not cast in forward: cast it along the contraction axis)
                        weight_t = _cast(state, point, weight_read, weight.data, FORWARD_FORMAT,
                                         axis=0 if weight_read == "w_t" else -1, weight=True)
                    grad_x = g_q.astype(dtype, copy=False) @ weight_t.astype(dtype, copy=False)
                grad_x = grad_x.reshape(x.shape)
            if weight.requires_grad:  # wgrad: contraction over the tokens
                if not fp8_wgrad:
                    grad_w = g2.T @ x2
                else:
                    if g_t is None:
                        g_t = _cast(state, point, "grad_t", g2, BACKWARD_FORMAT, axis=0)
                    input_t = x_q if input_read == "x" else x_t
                    if input_t is None:
                        input_t = _cast(state, point, input_read, x2, FORWARD_FORMAT,
                                        axis=0 if input_read == "x_t" else -1)
                    grad_w = g_t.astype(dtype, copy=False).T @ input_t.astype(dtype, copy=False)
            if bias is not None and bias.requires_grad:
                grad_b = g2.sum(axis=0)
            return (grad_x, grad_w) if bias is None else (grad_x, grad_w, grad_b)

        parents = (x, weight) if bias is None else (x, weight, bias)
        return make_op(out, parents, backward, "fp8_linear")


class FP8Attention:
    """Wraps an attention core ``core(q, k, v, causal)`` with E4M3 casts of q, k, v and an E5M2
    cast of the output gradient (axes in the module docstring)."""

    def __init__(self, core: Callable, state: FP8State, point: CastPoint):
        self.core, self.state, self.point = core, state, point

    def __repr__(self) -> str:
        return f"FP8Attention({self.point.name!r}, recipe={self.state.recipe!r}, core={self.core!r})"

    def __call__(self, q: Tensor | ArrayLike, k: Tensor | ArrayLike, v: Tensor | ArrayLike,
                 causal: bool = False) -> Tensor:
        q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.data.dtype.kind != "f":
                raise TypeError(f"FP8 attention {self.point.name!r}: {name} must be a floating tensor, "
                                f"got dtype {t.dtype}")
            if t.ndim < 2:
                raise ValueError(f"FP8 attention {self.point.name!r}: {name} must have shape (..., seq, head_dim), "
                                 f"got shape {t.shape}")
        state, point = self.state, self.point
        with point._all_or_nothing(("q", "k", "v")):  # (the core checks the shapes, after the casts)
            q = _quantize_forward(state, point, "q", q, axis=-1)   # S = q k^T contracts head_dim
            k = _quantize_forward(state, point, "k", k, axis=-1)
            v = _quantize_forward(state, point, "v", v, axis=-2)   # O = P v contracts the key axis
            out = self.core(q, k, v, causal)
        return _quantize_backward(state, point, "grad", out, axis=-1)  # dP = dO v^T contracts head_dim


class _ModuleTree(Protocol):
    """What `apply_recipe` needs of a model: ``named_modules()``, as `nn.Module` has it (typed by
    its shape, since fp8.py sits above nn.py in the one-way imports)."""

    def named_modules(self) -> Iterable[tuple[str, Any]]: ...


def apply_recipe(model: _ModuleTree, recipe: str, *, exclude: Iterable[str] = (),
                 **options: bool | int | str) -> FP8State:
    """Install FP8 casts into every linear GEMM and attention core of ``model``.

    Every module (from ``model.named_modules()``) with a ``gemm`` attribute gets an
    `FP8Linear` bound to a cast point named after the module; every module with an
    ``attention_core`` gets it wrapped in `FP8Attention`, at a point named after the module too
    (``"<module>.attention_core"`` where the module also has a gemm); ``model`` itself, where it has
    one, is named by its class (``"Linear"``), in ``exclude`` too. Hooks from an earlier call are
    replaced, and ``"fp32"`` restores the plain ones (``functional.linear`` and the unwrapped core),
    as does ``exclude`` for the modules it names.

    Parameters
    ----------
    model : nn.Module
    recipe : str
        One of `RECIPES`.
    exclude : iterable of str, optional
        Modules to leave in float32, with no cast point, each a name as ``named_modules`` gives it
        or a shell-style pattern over those names (`fnmatch.fnmatchcase`, where ``*`` spans dots):
        ``("lm_head",)`` keeps a GPT's output head in higher precision, as DeepSeek-V3 does (its
        section 3.3.1), and ``("*.mlp.*",)`` every MLP linear of a `model.GPT`. Each must match
        a module with a gemm or an attention core. ``"name:tensor"`` leaves one tensor of the
        matched modules in float32 and casts the rest: ``x``, ``w`` or ``grad`` of a gemm, ``q``,
        ``k``, ``v`` or ``grad`` of an attention core (the ``_t`` copies go with their tensor), so
        ``("lm_head:grad",)`` keeps only the LM head's E5M2 gradient cast out. ``"name:fprop"``,
        ``":dgrad"`` or ``":wgrad"`` runs one GEMM of a linear (`GEMMS`) on its unrounded operands
        and the other two in FP8 (TransformerEngine's ``override_linear_precision`` does this for
        wgrad only, in every linear):
        ``("lm_head:wgrad",)`` computes the LM head's weight gradient from the float32 logits'
        gradient while the gradient it passes back is cast. A cast that only float32 GEMMs read is
        not made. A point whose every cast is left out is not made.
    **options
        Recipe options (`RECIPE_OPTIONS`): ``current``: ``power_of_2=False``; ``delayed``:
        ``history_len=1024, amax_compute_algo="max", margin=0`` (scaling.DelayedScaling);
        ``mxfp8``: ``scale_mode="floor"`` (mx.quantize); ``blockwise``: ``power_of_2=True``.
        Every recipe but ``fp32`` and ``mxfp8`` takes ``saturate_gradients`` (default False, True
        under ``delayed``): True clamps the E5M2 gradient casts to +-max (TransformerEngine)
        instead of overflowing to Inf.

    Returns
    -------
    FP8State
        The cast points and their statistics; call ``state.step()`` once per optimizer step.

    Raises
    ------
    ValueError
        For an unknown recipe (the message lists the valid ones), a bad option value of the right
        type (``history_len=0``, ``scale_mode="round"``), or a model in which a recipe other than
        ``fp32`` finds nothing to cast (no linear, no attention core).
    TypeError
        For an option the recipe does not take, an option value of the wrong type (each option
        has its default's type: ``margin=0.5``, ``history_len=2.0``, ``power_of_2=1``), a
        ``recipe`` that is not a str, a model without ``named_modules``, or an ``exclude`` that is
        a str or holds anything but strs.
    ValueError
        Also for an ``exclude`` name or pattern that matches no module with a gemm or an attention
        core.
    """
    _check_recipe(recipe, "apply_recipe")
    options = _recipe_options(recipe, options)
    if not hasattr(model, "named_modules"):
        raise TypeError(f"apply_recipe needs a Module (with named_modules()), got {type(model).__name__}")
    # (walked once: checked in full before any module changes; the model itself is named by its class,
    # the name its cast point, its statistics and ``exclude`` all use)
    modules = [(name or type(module).__name__, module) for name, module in model.named_modules()]
    point_names = [point for name, module in modules for point in _point_names(name, module).values()]
    clash = next((name for index, name in enumerate(point_names) if name in point_names[:index]), None)
    if clash is not None:  # (its statistics and histories would be lost)
        raise ValueError(f"apply_recipe: two cast points would be named {clash!r} (the model is named by its "
                         f"class, {type(model).__name__!r})")
    castable = {name: tensors for name, module in modules if (tensors := _module_tensors(module))}
    uncast = _uncast_tensors(exclude, castable)
    plans = {name: _point_plans(tensors, uncast.get(name, frozenset()), recipe) for name, tensors in castable.items()}
    excluded = {name for name, plan in plans.items() if not any(plan.values())}
    if recipe != "fp32" and not set(castable) - excluded:  # (checked before any module changes)
        left_out = f" outside exclude ({', '.join(sorted(excluded))})" if excluded else ""
        raise ValueError(f"apply_recipe: found no linear (a module with a gemm) or attention core (attention_core) "
                         f"in {type(model).__name__}{left_out}; recipe {recipe!r} would cast nothing")
    state = FP8State(recipe, options)
    for name, module in modules:
        plan, point_names_of = plans.get(name, {}), _point_names(name, module)
        if hasattr(module, "gemm"):
            if recipe != "fp32" and plan["gemm"]:
                point = state._add_point(point_names_of["gemm"], "gemm", *plan["gemm"])
                module.gemm = FP8Linear(state, point)
            elif isinstance(module.gemm, FP8Linear):
                module.gemm = F.linear
        if hasattr(module, "attention_core"):
            core = module.attention_core
            core = core.core if isinstance(core, FP8Attention) else core
            if recipe != "fp32" and plan["attention"]:
                point = state._add_point(point_names_of["attention"], "attention", *plan["attention"])
                core = FP8Attention(core, state, point)
            module.attention_core = core
    return state


def _point_names(name: str, module) -> dict[str, str]:
    """The cast points a module gets, by kind: its gemm's named after it, and its attention core's too,
    or ``"<module>.attention_core"`` where the module also has a gemm (a point of its own)."""
    names = {"gemm": name} if hasattr(module, "gemm") else {}
    if hasattr(module, "attention_core"):
        names["attention"] = f"{name}.attention_core" if names else name
    return names


def _module_tensors(module) -> frozenset[str]:
    """What ``exclude`` can name after a module's ``:``: x, w and grad and the GEMMs fprop, dgrad and
    wgrad for a gemm, q, k, v and grad for an attention core (none for a module with neither)."""
    return (_GEMM_TENSORS if hasattr(module, "gemm") else frozenset()) | (
        _ATTENTION_TENSORS if hasattr(module, "attention_core") else frozenset())


def _point_plans(tensors: frozenset[str], uncast: frozenset[str], recipe: str) -> dict[str, tuple | None]:
    """For each kind of cast point a module has (``"gemm"``, ``"attention"``; ``tensors`` is
    `_module_tensors`), the ``uncast`` roles and float32 GEMMs of the point that ``exclude`` leaves
    it (``uncast`` holds the tensors and GEMMs it names), or None where every role is left uncast."""
    plans: dict[str, tuple | None] = {}
    for kind, kind_tensors, kind_roles in (("gemm", _GEMM_TENSORS, _GEMM_COPIES),
                                           ("attention", _ATTENTION_TENSORS, _ATTENTION_ROLES)):
        if kind_tensors <= tensors:
            left = uncast & kind_tensors
            uncast_roles = _uncast_roles(left, recipe)
            plans[kind] = None if uncast_roles >= set(kind_roles) else (uncast_roles, left & GEMMS.keys())
    return plans


def _uncast_roles(tensors: frozenset[str], recipe: str) -> frozenset[str]:
    """The roles (`ROLES`) that leaving ``tensors`` in float32 leaves uncast: each tensor's, its
    ``_t`` copies with them, and each copy that only the float32 GEMMs among ``tensors`` read.

    A GEMM reads the copies `GEMMS` names; a per-tensor recipe casts each tensor once for all
    three GEMMs, and ``blockwise``'s 128x128 weight tiles serve ``w_t`` too, so such a cast stays
    while any GEMM that reads it runs in FP8."""
    roles = {role for tensor in tensors - GEMMS.keys() for role in _TENSOR_ROLES[tensor]}
    float32_gemms = tensors & GEMMS.keys()
    if float32_gemms:
        readers: dict[str, set[str]] = {}
        for gemm, operands in GEMMS.items():
            for operand in operands:
                readers.setdefault(_serving_cast(operand, recipe), set()).add(gemm)
        roles |= {role for role in _GEMM_COPIES if readers[_serving_cast(role, recipe)] <= float32_gemms}
    return frozenset(roles)


def _serving_cast(role: str, recipe: str) -> str:
    """The cast whose values a GEMM reads as ``role``: ``x`` for ``x_t`` under a per-tensor recipe
    (one scale, one copy), ``w`` for ``w_t`` under ``blockwise``; else ``role`` itself."""
    if recipe in PER_TENSOR_RECIPES or (recipe == "blockwise" and role == "w_t"):
        return role.removesuffix("_t")
    return role


def _uncast_tensors(exclude, castable: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """What `apply_recipe`'s ``exclude`` leaves in float32: for each module it matches, the tensors
    (every one of the module's, or the one an entry names after ``:``). ``castable`` maps the
    names of the modules with a gemm or an attention core to their tensors (`_module_tensors`).
    Each entry must be a str that matches (`fnmatch.fnmatchcase`) such a module, one with the
    tensor it names (TypeError, ValueError)."""
    if isinstance(exclude, (str, bytes)):  # (a str is an iterable of one-letter names)
        raise TypeError(f"apply_recipe: exclude must be an iterable of module names, such as ('lm_head',), "
                        f"got the {type(exclude).__name__} {exclude!r}")
    try:
        names = list(exclude)
    except TypeError:
        raise TypeError(f"apply_recipe: exclude must be an iterable of module names, got "
                        f"{type(exclude).__name__}") from None
    not_names = [name for name in names if not isinstance(name, str)]
    if not_names:
        raise TypeError(f"apply_recipe: exclude must hold module names (str), got {not_names[0]!r} "
                        f"({type(not_names[0]).__name__})")
    uncast: dict[str, frozenset[str]] = {}
    unknown = []
    for entry in names:
        pattern, colon, tensor = entry.partition(":")  # (no ':': the whole entry is the pattern, tensor "")
        if colon and not tensor:  # ("lm_head:", a tensor's name left out, would leave every tensor uncast)
            raise ValueError(f"apply_recipe: exclude entry {entry!r} names no tensor after ':'; write the module "
                             f"alone for all its tensors, or one of x, w, grad, fprop, dgrad, wgrad, q, k, v after ':'")
        if tensor and tensor not in _TENSOR_ROLES.keys() | GEMMS.keys():
            raise ValueError(f"apply_recipe: exclude entry {entry!r} names the tensor {tensor!r}; after ':' comes "
                             f"x, w, grad, fprop, dgrad or wgrad (a gemm's tensors and GEMMs) or q, k, v or grad "
                             f"(an attention core's)")
        found = [name for name in castable if (name == pattern or fnmatch.fnmatchcase(name, pattern))
                 and (not tensor or tensor in castable[name])]
        if not found:
            unknown.append(entry)
        for name in found:
            uncast[name] = uncast.get(name, frozenset()) | (frozenset({tensor}) if tensor else castable[name])
    if unknown:
        with_tensor = (" that has the tensor named after ':' (a gemm has x, w and grad and the GEMMs fprop, dgrad "
                       "and wgrad, an attention core q, k, v and grad)")
        raise ValueError(f"apply_recipe: exclude matches no module with a gemm or an attention core"
                         f"{with_tensor if any(':' in entry for entry in unknown) else ''}: "
                         f"{', '.join(map(repr, unknown))}; such modules are {', '.join(sorted(castable))}")
    return uncast


def _check_recipe(recipe, caller: str) -> None:
    """TypeError for a recipe that is not a str (``in RECIPES`` would compare an array elementwise),
    ValueError naming the valid ones for an unknown one."""
    formats._check_str_choice(recipe, f"{caller}: recipe", RECIPES)
    if recipe not in RECIPES:
        raise ValueError(f"unknown FP8 recipe {recipe!r}; choose one of {', '.join(RECIPES)}")


def _recipe_options(recipe: str, options: dict, caller: str = "apply_recipe") -> dict:
    allowed = RECIPE_OPTIONS[recipe]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = f"takes the options {', '.join(allowed)}" if allowed else "takes no options"
        raise TypeError(f"{caller}: recipe {recipe!r} {takes}; got {', '.join(map(repr, unknown))}")
    merged = {**allowed, **options}
    for key, value in options.items():  # each option has its default's type
        kind = type(allowed[key])
        if not isinstance(value, _OPTION_TYPES[kind]) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"{caller}: {key} must be {_OPTION_TYPE_NAMES[kind]}, "
                            f"got {type(value).__name__} {value!r}")
    if "scale_mode" in options and options["scale_mode"] not in mx.SCALE_MODES:
        raise ValueError(f"{caller}: unknown scale_mode {options['scale_mode']!r}; "
                         f"choose one of {', '.join(mx.SCALE_MODES)}")
    if recipe == "delayed":  # its own checks, with clear errors
        margin = merged["margin"]
        ranges = [scaling._margin_range(fmt) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)]
        lowest, highest = max(low for low, _ in ranges), min(high for _, high in ranges)
        if _is_int(margin) and not lowest <= margin <= highest:  # (E4M3's [-119, 8] and E5M2's [-112, 15])
            raise ValueError(f"{caller}: delayed's margin must lie in [{lowest}, {highest}], which suits both "
                             f"{FORWARD_FORMAT.name} and {BACKWARD_FORMAT.name} (it builds scalers of both), got {margin}")
        scaling.DelayedScaling(FORWARD_FORMAT, **{key: merged[key] for key in _DELAYED_SCALING_OPTIONS})
    return merged


# ================================================================================================
# Scale tracking
# ================================================================================================
@dataclass
class ScaleRecord:
    """Scale statistics of one tracked tensor: its value (forward) and its gradient (backward).

    ``std`` is the population standard deviation, ``mean_abs`` the mean of |x|, both accumulated
    in float64. The backward fields stay None until a gradient flows through.
    ``forward_shared_fraction`` is the fraction of the value's mean square that its mean over
    every axis but the last (over every position) holds: the part of it that every position
    shares, which a LayerNorm, normalising each position over its features, does not remove. It
    is 1 when every position holds the same vector and about 1/positions for independent
    zero-mean ones (tutorial 7b: naive FP8's residual stream grows by such a vector).
    """

    name: str
    shape: tuple
    forward_std: float
    forward_mean_abs: float
    backward_std: float | None = None
    backward_mean_abs: float | None = None
    forward_shared_fraction: float = math.nan


class ScaleTracker:
    """Context manager: while active, `track` records scales into ``records`` (those that the thread
    which entered it tracks: a model run in another thread meanwhile records nothing here).

    ``records`` maps names to `ScaleRecord` in the order first tracked; a name tracked
    again gets a suffix (``"q#2"``, ``"q#3"``, ...), so a layer's ops tracked in a loop over layers
    give one row each. Gradients are recorded when ``backward`` reaches the tracked tensors, also
    after the context has exited:

        with ScaleTracker() as tracker:
            loss = model(ids, targets)[1]
            loss.backward()
        figure = plots.scale_plot(tracker.records)
    """

    def __init__(self):
        self.records: dict[str, ScaleRecord] = {}

    def __enter__(self) -> "ScaleTracker":
        _active.trackers.append(self)
        return self

    def __exit__(self, *exc_info) -> None:
        _active.trackers.remove(self)

    @staticmethod
    def record_name(name: str, occurrence: int) -> str:
        """The key of the ``occurrence``-th tensor tracked as ``name`` (from 1): ``name`` itself, then
        ``name#2``, ``name#3``, ... (``record_name("residual", n_layer)`` is a GPT's last block output)."""
        if not isinstance(name, str):
            raise TypeError(f"record_name: name must be a str, got {type(name).__name__} {name!r}")
        occurrence = _check_int(occurrence, "record_name: occurrence (counted from 1)", 1)
        return name if occurrence == 1 else f"{name}#{occurrence}"

    def _new_record(self, name: str, data: np.ndarray) -> ScaleRecord:
        occurrence = 1
        while (key := self.record_name(name, occurrence)) in self.records:
            occurrence += 1
        std, mean_abs = _scale_statistics(data)
        record = ScaleRecord(key, tuple(data.shape), std, mean_abs, forward_shared_fraction=_shared_fraction(data))
        self.records[key] = record
        return record


class _ActiveTrackers(threading.local):
    """Each thread's stack of entered `ScaleTracker` contexts, innermost last. One stack for all
    threads would let one thread's ``track`` record into another's tracker, or find the stack
    emptied between its check and its look-up (an IndexError)."""

    def __init__(self):
        self.trackers: list[ScaleTracker] = []


_active = _ActiveTrackers()


def _scale_statistics(data: np.ndarray) -> tuple[float, float]:
    if data.size == 0:
        return float("nan"), float("nan")
    with np.errstate(invalid="ignore", over="ignore"):  # (an Inf gives a NaN std, quietly)
        return float(np.std(data, dtype=np.float64)), float(np.mean(np.abs(data), dtype=np.float64))


def _shared_fraction(data: np.ndarray) -> float:
    """The mean square of ``data``'s mean over every axis but the last (a 0-d or 1-D array is one
    position) over the mean square of ``data``, in float64; NaN where there are no elements or all
    are zero."""
    if data.size == 0:  # (before the reshape: -1 cannot size a 0-feature one)
        return float("nan")
    positions = data.reshape(-1, data.shape[-1] if data.ndim else 1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # (an Inf gives NaN, quietly)
        total = np.mean(positions * positions)
        if not total > 0:  # (all zero, or NaN)
            return float("nan")
        shared = positions.mean(axis=0)
        return float(np.mean(shared * shared) / total)


_Tracked = TypeVar("_Tracked", bound="Tensor | ArrayLike")


def track(name: str, x: _Tracked) -> _Tracked | Tensor:
    """Identity op that records the scale of ``x`` and of its gradient into the active tracker.

    Outside a `ScaleTracker` context (of this thread) it returns ``x`` itself and builds nothing;
    inside one, a Tensor (``x`` itself, or a new one holding it or tracking its gradient).
    """
    if not isinstance(name, str):  # (outside a tracker too: the same call must not pass or fail by context)
        raise TypeError(f"track: name must be a str, got {type(name).__name__}")
    trackers = _active.trackers
    if not trackers:
        return x
    tensor = as_tensor(x)
    if tensor.data.dtype.kind != "f":
        raise TypeError(f"track: {name!r} must be a floating tensor, got dtype {tensor.dtype}")
    record = trackers[-1]._new_record(name, tensor.data)
    if not (tensor.requires_grad and is_grad_enabled()):
        return tensor

    def backward(grad):
        record.backward_std, record.backward_mean_abs = _scale_statistics(grad)
        return (grad,)

    return make_op(tensor.data, (tensor,), backward, "track")

