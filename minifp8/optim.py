"""Optimizers (SGD, AdamW), gradient-norm clipping and a warmup + cosine learning-rate schedule.

Optimizers update ``p.data`` in place from ``p.grad``, skipping parameters whose grad is None, and
bump each updated parameter's version (so a graph built before the step refuses ``backward``); a
grad that is not an ndarray shaped like its parameter, or a parameter holding a read-only array,
raises before any update. Parameters must be leaf tensors.
Like torch, ``params`` is a list of tensors or a list of *parameter groups*, dicts with a
``"params"`` list and any hyperparameter to override for that group (for example
``{"params": biases, "weight_decay": 0.0}``). Set ``group["lr"]`` to change the learning rate,
or use `Optimizer.set_lr` when every group has the same one.

``state_dict()`` returns copies of every hyperparameter and state array; ``load_state_dict``
restores them bit-exactly, so a resumed run continues exactly as the uninterrupted one. It checks
everything first (hyperparameters, state keys, array dtypes and shapes) and loads nothing if any
check fails.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Iterable, Mapping

import numpy as np

from . import codec
from .autograd import Tensor
from .formats import _check_bool, _check_int, _described, _is_int, _shown
from .functional import _non_negative, _real

__all__ = ["AdamW", "Optimizer", "SGD", "clip_grad_norm", "warmup_cosine_lr", "zero_grad"]


def zero_grad(params: Iterable[Tensor] | Tensor) -> None:
    """``p.grad = None`` for every tensor in ``params`` (one Tensor: that one)."""
    for p in _tensors(params, "zero_grad: params"):
        p.grad = None


class Optimizer:
    """Base class: parameter groups, ``zero_grad``, ``set_lr`` and the state round trip."""

    defaults: dict = {}

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict) -> None:
        groups = _parameter_list(params, f"{type(self).__name__}: params",
                                 "an iterable of Tensors or of parameter groups", " (pass [t])",
                                 "pass [group] for one group, or list(d.values()) for a dict of Tensors")
        if not groups:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups: list[dict] = []
        self.state: dict[Tensor, dict] = {}
        seen: set[int] = set()
        for group in groups:
            if not isinstance(group, dict) or "params" not in group:
                raise TypeError(f"{type(self).__name__}: a parameter group must be a dict with a 'params' list")
            unknown = set(group) - set(defaults) - {"params"}
            if unknown:
                raise ValueError(f"{type(self).__name__}: unknown hyperparameter(s) {sorted(unknown)}")
            settings = {**defaults, **group, "params": _parameter_list(
                group["params"], f"{type(self).__name__}: a group's 'params'", "a list of Tensors", "",
                "pass list(d.values())")}
            for p in settings["params"]:
                if not isinstance(p, Tensor) or not p.requires_grad:
                    raise TypeError(f"{type(self).__name__}: parameters must be Tensors that require grad, "
                                    f"got {p!r}")
                if not p.is_leaf:
                    raise ValueError(f"{type(self).__name__}: {p!r} is a non-leaf tensor (the output of an op): "
                                     "backward never gives it a .grad, so it would never be updated")
                if id(p) in seen:
                    raise ValueError(f"{type(self).__name__}: a parameter appears twice: {p!r}")
                seen.add(id(p))
            self._check(settings)
            self.param_groups.append(settings)

    def _check(self, group: dict) -> None:
        """Raise unless the group's hyperparameters are valid, and store each in ``group`` as a plain
        Python number (subclasses add theirs): under NumPy 2's promotion rules an ``np.float64`` learning
        rate would take parts of a float32 update to float64, and change its bits."""
        for name in ("lr", "weight_decay"):
            if name in group:
                group[name] = _non_negative(group[name], type(self).__name__, name)

    def _check_before_step(self) -> None:
        """Raise before any update if a group's hyperparameter is invalid (values set directly,
        ``group["lr"] = ...``, are checked here: a NaN or negative rate updated every weight wrongly, and
        a None in a later group failed after the earlier groups had stepped), if a gradient is not a
        floating ndarray shaped like its parameter (it would broadcast; a complex one would fail part way
        through the update, or lose its imaginary part), or if a parameter to update holds a read-only
        array (the update would stop at it, part way)."""
        for index, group in enumerate(self.param_groups):
            try:
                self._check({key: value for key, value in group.items() if key != "params"})
            except (TypeError, ValueError) as error:
                raise type(error)(f"{type(self).__name__}.step: param_groups[{index}], as set there: {error}") from None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and (not isinstance(p.grad, np.ndarray) or p.grad.dtype.kind != "f"):
                    raise TypeError(f"{type(self).__name__}: the gradient of parameter {p!r} must be a floating "
                                    f"ndarray (as backward leaves it), got {_described(p.grad)}")
                if p.grad is not None and p.grad.shape != p.shape:
                    raise ValueError(f"{type(self).__name__}: gradient of shape {p.grad.shape} for a parameter "
                                     f"of shape {p.shape}")
                if p.grad is not None and not p.data.flags.writeable:
                    raise ValueError(f"{type(self).__name__}: parameter {p!r} holds a read-only array, which a "
                                     "step updates in place; give the Tensor a writeable copy (np.array(data))")

    @staticmethod
    def _gradient(p: Tensor) -> np.ndarray:
        """``p.grad`` in the parameter's dtype, in which the update runs (a float16 gradient set by hand
        made AdamW's ``g * g`` overflow to Inf and froze the parameter; a float64 one took parts of a
        float32 update to float64)."""
        assert p.grad is not None  # (step skips a parameter without one)
        return p.grad.astype(p.data.dtype, copy=False)

    def _state_template(self, p: Tensor) -> dict | None:
        """The state that ``step`` creates for ``p`` (keys, array dtypes and shapes), for `load_state_dict`;
        None: not checked."""
        return None

    def zero_grad(self) -> None:
        """``p.grad = None`` for every parameter."""
        for group in self.param_groups:
            zero_grad(group["params"])

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group (for a schedule); a finite number >= 0.

        Raises ``ValueError`` when the groups hold different learning rates (as
        `minifp8.model.GPT.optimizer_groups` gives them): one rate for all would erase them. Scale
        each group's own ``group["lr"]`` instead (its peak times the schedule's factor, as
        ``train_tiny`` does).
        """
        self._check({**self.param_groups[0], "lr": lr})
        rates = sorted({group["lr"] for group in self.param_groups})
        if len(rates) > 1:
            raise ValueError(f"{type(self).__name__}.set_lr: the groups hold {len(rates)} different learning rates "
                             f"({rates[0]:g} to {rates[-1]:g}), which one rate for all would erase; set each "
                             "group's 'lr' instead (its peak times the schedule's factor)")
        for group in self.param_groups:
            group["lr"] = float(lr)

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [...]}``; parameters are named by index; all copies."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            settings = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            settings["params"] = []
            for p in group["params"]:
                index[id(p)] = len(index)
                settings["params"].append(index[id(p)])
            groups.append(settings)
        state = {index[id(p)]: copy.deepcopy(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state saved by `state_dict` (same parameter layout).

        Everything is checked before anything is loaded: the hyperparameters as in the constructor,
        and each parameter's state against what ``step`` would create (the same keys, arrays of the
        same kind and shape, cast to the parameter's dtype; ``step`` an int; no value no step makes,
        such as a negative second moment of `AdamW`). The state's keys are
        parameter indices, ints, as ``state_dict`` gives them (a dict that went through JSON has
        strings there: convert them back first). On error the optimizer is unchanged.
        """
        owner = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            raise TypeError(f"{owner}: expected a dict with 'state' and 'param_groups' (from state_dict()), "
                            f"got {type(state_dict).__name__}")
        groups, saved_state = state_dict["param_groups"], state_dict["state"]
        if not isinstance(saved_state, Mapping):
            raise TypeError(f"{owner}: 'state' must be a dict of parameter index -> state dict, "
                            f"got {_described(saved_state)}")
        if not isinstance(groups, (list, tuple)) or not all(
                isinstance(saved, Mapping) and isinstance(saved.get("params"), (list, tuple)) for saved in groups):
            raise TypeError(f"{owner}: 'param_groups' must be a list of dicts, each with a 'params' list "
                            f"(as state_dict() gives), got {_described(groups)}")
        if len(groups) != len(self.param_groups) or any(
                len(saved["params"]) != len(group["params"]) for saved, group in zip(groups, self.param_groups)):
            raise ValueError(f"{owner}: parameter groups of sizes "
                             f"{[len(g['params']) for g in groups]} do not match this optimizer's "
                             f"{[len(g['params']) for g in self.param_groups]}")
        params = [p for group in self.param_groups for p in group["params"]]
        new_state = {}
        for i, saved in saved_state.items():
            if not _is_int(i):  # (int() would take 0.5 for parameter 0, and fail on "a" without naming it)
                raise TypeError(f"{owner}: state keys must be parameter indices (ints, as state_dict() gives), "
                                f"got {_described(i)}")
            if not 0 <= i < len(params):
                raise KeyError(f"{owner}: state for unknown parameter index {i} (this optimizer has {len(params)})")
            if not isinstance(saved, Mapping):
                raise TypeError(f"{owner}: the state of parameter {i} must be a dict, got {_described(saved)}")
            p = params[int(i)]
            new_state[p] = self._checked_state(owner, i, p, saved)
        new_groups = []
        for saved, group in zip(groups, self.param_groups):
            unknown = set(saved) - set(group)
            if unknown:
                raise ValueError(f"{owner}: unknown hyperparameter(s) {sorted(unknown)}")
            settings = {**group, **{k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}}
            self._check(settings)
            new_groups.append(settings)
        for settings, group in zip(new_groups, self.param_groups):
            group.update(settings)
        self.state = new_state

    def _checked_state(self, owner: str, i, p: Tensor, saved: Mapping) -> dict:
        """A copy of one parameter's saved state, checked against `_state_template`."""
        template = self._state_template(p)
        if template is None or not saved:  # (an empty state is filled in by the next step)
            for name, value in saved.items():
                if isinstance(value, np.ndarray) and value.shape != p.shape:
                    raise ValueError(f"{owner}: state {name!r} of parameter {i} has shape {value.shape}, "
                                     f"the parameter has {p.shape}")
            return copy.deepcopy(dict(saved))
        if set(saved) != set(template):
            raise KeyError(f"{owner}: parameter {i} has state keys {sorted(saved)}, expected {sorted(template)}")
        state: dict[str, np.ndarray | int | float] = {}
        for name, example in template.items():
            value = saved[name]
            if isinstance(example, np.ndarray):
                kind = "floating" if example.dtype.kind == "f" else str(example.dtype)
                if not isinstance(value, np.ndarray) or value.dtype.kind != example.dtype.kind:
                    got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
                    raise TypeError(f"{owner}: {name!r} of parameter {i} must be a {kind} array, got {got}")
                if value.shape != example.shape:
                    raise ValueError(f"{owner}: state {name!r} of parameter {i} has shape {value.shape}, "
                                     f"the parameter has {p.shape}")
                with np.errstate(over="ignore"):
                    converted = np.array(value, dtype=example.dtype, copy=True)
                if example.dtype == np.float32:  # (1e300 became Inf, and the next step -Inf)
                    codec._check_fits(value, converted, f"{owner}: {name!r} of parameter {i}")
                state[name] = converted
            elif isinstance(example, (int, np.integer)):
                if not _is_int(value):
                    raise TypeError(f"{owner}: {name!r} of parameter {i} must be an int >= 0, got {_shown(value)}")
                if value < 0:
                    raise ValueError(f"{owner}: {name!r} of parameter {i} must be an int >= 0, got {value!r}")
                state[name] = int(value)
            else:
                state[name] = type(example)(_real(value, owner, f"{name!r} of parameter {i}"))
        return state


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, as ``torch.optim.SGD`` (its documented algorithm).

    ``g = grad + weight_decay * p``; with momentum, ``b = g`` at the first step, then
    ``b = momentum * b + (1 - dampening) * g``, and ``g = g + momentum * b`` (Nesterov) or
    ``g = b``; finally ``p = p - lr * g``. The buffer ``b`` has the parameter's dtype.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _check(self, group: dict) -> None:
        super()._check(group)
        momentum, dampening = _real(group["momentum"], "SGD", "momentum"), _real(group["dampening"], "SGD", "dampening")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"SGD: momentum must be in [0, 1), got {group['momentum']}")
        if not 0.0 <= dampening <= 1.0:
            raise ValueError(f"SGD: dampening must be in [0, 1], got {group['dampening']}")
        nesterov = _check_bool(group["nesterov"], "SGD: nesterov")
        if nesterov and (momentum == 0.0 or dampening != 0.0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening 0")
        group.update(momentum=momentum, dampening=dampening, nesterov=nesterov)

    def _state_template(self, p: Tensor) -> dict:
        return {"momentum_buffer": np.zeros_like(p.data)}

    # IEEE results (Inf, NaN, subnormals) whatever the caller's np.errstate: under over="raise" a
    # step stopped part way, earlier parameters and this one's first moment updated, its second not
    @np.errstate(all="ignore")
    def step(self) -> None:
        self._check_before_step()
        for group in self.param_groups:
            # (as floats: a group's values set directly, group["lr"] = np.float64(...), skip _check)
            lr, momentum, dampening = float(group["lr"]), float(group["momentum"]), float(group["dampening"])
            weight_decay, nesterov = float(group["weight_decay"]), group["nesterov"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = self._gradient(p)
                g = g + weight_decay * p.data if weight_decay else g
                if momentum:
                    state = self.state.setdefault(p, {})
                    if "momentum_buffer" not in state:  # (in the parameter's dtype, as load_state_dict restores it)
                        state["momentum_buffer"] = np.array(g, dtype=p.data.dtype, copy=True)
                    else:
                        buffer = state["momentum_buffer"]
                        buffer *= momentum
                        buffer += (1.0 - dampening) * g
                    buffer = state["momentum_buffer"]
                    g = g + momentum * buffer if nesterov else buffer
                p.data -= lr * g  # (sets p.data: bumps its version, as bump_version does)


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Alg. 2), as ``torch.optim.AdamW`` documents it.

    At step t (from 1), with gradient g, learning rate lr and weight decay wd:

    * ``p = p - lr * wd * p``                      (decoupled decay, before the Adam step)
    * ``m = beta1 * m + (1 - beta1) * g``
    * ``v = beta2 * v + (1 - beta2) * g^2``
    * ``m_hat = m / (1 - beta1^t)``, ``v_hat = v / (1 - beta2^t)``  (bias correction)
    * ``p = p - lr * m_hat / (sqrt(v_hat) + eps)``

    In the paper's Alg. 2 (line 12) the decay is ``eta_t * lambda * p``, scaled by the schedule
    multiplier eta_t alone; torch (and we) scale it by the learning rate lr = alpha * eta_t, which
    is the same when wd = lambda / alpha (the base rate alpha folded into the weight decay).
    Computed in the parameter's dtype (float32), in place. As in torch, the decay factor
    ``1 - lr * wd`` is rounded to that dtype, so in float32 a decay of ``lr * wd <= 2**-25``
    (about 3e-8, e.g. at the tail of a cosine schedule) rounds to 1 and does nothing. ``eps = 0``
    is allowed, as in torch, but then ``m_hat / sqrt(v_hat)`` is 0/0 = NaN wherever ``v`` is still 0:
    a parameter whose gradient has been exactly 0 at every step so far, such as the embedding row
    of a token no batch has held yet.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] | list[float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        pair = tuple(betas) if isinstance(betas, (tuple, list)) else betas  # (checked by _check)
        super().__init__(params, dict(lr=lr, betas=pair, eps=eps, weight_decay=weight_decay))

    def _check(self, group: dict) -> None:
        super()._check(group)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)):
            raise TypeError(f"AdamW: betas must be a pair of real numbers, got {_shown(betas)}")
        if len(betas) != 2 or not all(0.0 <= _real(b, "AdamW", "a beta") < 1.0 for b in betas):
            raise ValueError(f"AdamW: betas must be two numbers in [0, 1), got {_shown(betas)}")
        group["betas"] = (float(betas[0]), float(betas[1]))
        group["eps"] = _non_negative(group["eps"], "AdamW", "eps")

    def _init_state(self, p: Tensor, state: dict) -> None:
        """Fill the empty ``state`` of ``p`` before its first step."""
        state["step"] = 0
        state["exp_avg"] = np.zeros_like(p.data)
        state["exp_avg_sq"] = np.zeros_like(p.data)

    def _state_template(self, p: Tensor) -> dict:
        state: dict[str, Any] = {}
        self._init_state(p, state)
        return state

    def _checked_state(self, owner: str, i, p: Tensor, saved: Mapping) -> dict:
        """`Optimizer._checked_state`, and a second moment with no negative value: a mean of squared
        gradients is never below 0, and the next step would take the square root of one (NaN)."""
        state = super()._checked_state(owner, i, p, saved)
        second = state.get("exp_avg_sq")
        if isinstance(second, np.ndarray) and second.dtype.kind == "f" and (second < 0).any():
            raise ValueError(f"{owner}: 'exp_avg_sq' of parameter {i} holds {int((second < 0).sum())} negative "
                             f"value(s), e.g. {float(second[second < 0][0])!r}, which no step makes (a mean of "
                             f"squared gradients): is the checkpoint corrupted?")
        return state

    # IEEE results (Inf, NaN, subnormals) whatever the caller's np.errstate: under over="raise" a
    # step stopped part way, earlier parameters and this one's first moment updated, its second not
    @np.errstate(all="ignore")
    def step(self) -> None:
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
                adamw_update(p.data, g, state["exp_avg"], state["exp_avg_sq"], state["step"], lr, beta1, beta2, eps,
                             weight_decay)
                p.bump_version()


def _adamw_hyperparameters(group: dict) -> tuple[float, float, float, float, float]:
    """``lr, beta1, beta2, eps, weight_decay`` of an AdamW group as Python floats (values set directly,
    ``group["lr"] = np.float64(...)``, skip `Optimizer._check`, and NumPy ones change the update's bits)."""
    beta1, beta2 = group["betas"]
    return (float(group["lr"]), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]))


def adamw_update(weights: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float, beta1: float,
                 beta2: float, eps: float, weight_decay: float) -> None:
    """One AdamW step (`AdamW`'s equations) at step ``t`` (from 1), in place on ``weights``, ``m``
    and ``v``: shared by `AdamW` and `minifp8.fp8lm.FP8AdamW`, so the two agree bit for bit."""
    if weight_decay:
        weights *= 1.0 - lr * weight_decay
    m *= beta1
    m += (1.0 - beta1) * g
    v *= beta2
    v += (1.0 - beta2) * (g * g)
    bias_correction1 = 1.0 - beta1 ** t
    bias_correction2 = 1.0 - beta2 ** t
    denominator = np.sqrt(v)
    denominator /= math.sqrt(bias_correction2)
    denominator += eps
    update = m / denominator
    update *= lr / bias_correction1
    weights -= update


def _tensors(params, where: str = "params") -> list:
    """``params`` as a list of tensors: one Tensor is one (as in torch), not the slices that iterating
    it would give, which never have a grad. Anything else than Tensors is a TypeError."""
    tensors = [params] if isinstance(params, Tensor) else _listed(params, where)
    for p in tensors:
        if not isinstance(p, Tensor):
            raise TypeError(f"{where} must be a Tensor or an iterable of Tensors, got an element "
                            f"{_described(p)}")
    return tensors


def _parameter_list(params, where: str, expected: str, tensor_hint: str, dict_hint: str) -> list:
    """An optimizer's ``params``, or one group's, as a list; a TypeError for a Tensor (iterating it gives
    its slices t[0], t[1], ..., which never get a grad), a dict (iterating it gives its keys, which the
    error blamed) or a set: its order follows memory addresses, and `Optimizer.state_dict` names
    parameters by their position, so a resumed run would load one parameter's state into another of
    the same shape (torch refuses sets for the same reason)."""
    if isinstance(params, Tensor):
        raise TypeError(f"{where} must be {expected}, got a Tensor{tensor_hint}")
    if isinstance(params, Mapping):
        raise TypeError(f"{where} must be {expected}, got a dict: {dict_hint}")
    if isinstance(params, (set, frozenset)):
        raise TypeError(f"{where} must be an ordered iterable (a list), got a {type(params).__name__}: its order "
                        "changes between runs, and the saved state names parameters by position")
    return _listed(params, where, expected)


def _listed(params, where: str, expected: str = "a Tensor or an iterable of Tensors") -> list:
    """``list(params)``, or a TypeError that says what was expected where ``params`` is not iterable
    (an error raised while iterating it is the iterable's own, and passes through)."""
    try:
        items = iter(params)
    except TypeError:
        raise TypeError(f"{where} must be {expected}, got {_described(params)}") from None
    return list(items)


def clip_grad_norm(params: Iterable[Tensor] | Tensor, max_norm: float, error_if_nonfinite: bool = False) -> float:
    """Scale all gradients together so that their global L2 norm is at most ``max_norm``.

    As ``torch.nn.utils.clip_grad_norm_``: ``total = sqrt(sum of all grad^2)`` (computed in
    float64), and if ``max_norm / (total + 1e-6) < 1`` every grad is multiplied in place by
    that factor. Returns ``total``, the norm *before* clipping. A non-finite
    total leaves the gradients untouched (torch would multiply them by NaN for a NaN total, and
    zero the finite ones for an Inf total), or raises ``RuntimeError`` when ``error_if_nonfinite``.
    A parameter, or a ``.grad`` array, given twice is a ``ValueError``, as in the optimizers (torch
    counts it twice in the norm and scales it twice).
    """
    max_norm = _real(max_norm, "clip_grad_norm", "max_norm")  # (True passed as 1, "1" failed in a comparison)
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm}")
    error_if_nonfinite = _check_bool(error_if_nonfinite, "clip_grad_norm: error_if_nonfinite")
    tensors = _tensors(params, "clip_grad_norm: params")
    grads = [p.grad for p in tensors if p.grad is not None]
    for what, items in (("a parameter", tensors), ("a .grad array", grads)):
        if len({id(item) for item in items}) != len(items):
            raise ValueError(f"clip_grad_norm: {what} appears twice (its norm would count twice, and it would be "
                             f"scaled twice)")
    for g in grads:  # (they are scaled in place)
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
            raise TypeError(f"clip_grad_norm: every .grad must be a floating ndarray (as backward leaves it), "
                            f"got {_described(g)}")
        if not g.flags.writeable:
            raise ValueError("clip_grad_norm: every .grad must be writable (it is scaled in place), got a read-only "
                             "array (a broadcast view?): set .grad to a writable copy")
    total = math.sqrt(sum(float(np.dot(flat, flat)) for flat in (g.reshape(-1).astype(np.float64) for g in grads)))
    if not math.isfinite(total):
        if error_if_nonfinite:
            raise RuntimeError(f"clip_grad_norm: the total gradient norm is {total}")
        return total
    coefficient = max_norm / (total + 1e-6)
    if coefficient < 1.0:
        for g in grads:
            g *= coefficient
    return total


def warmup_cosine_lr(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Learning rate at ``step`` (from 0): linear warmup, then cosine decay to ``min_lr``.

    * ``step < warmup_steps``: ``max_lr * (step + 1) / warmup_steps`` (never 0, ``max_lr`` at the end)
    * ``warmup_steps <= step < total_steps``: ``min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2`` with
      ``r = (step - warmup_steps) / (total_steps - warmup_steps)`` (Loshchilov & Hutter 2017, SGDR, eq. 5)
    * ``step >= total_steps``: ``min_lr``.

    ``step``, ``warmup_steps`` and ``total_steps`` must be ints (``TypeError`` otherwise: 1.5 or True
    is no step count); a negative ``step``, or ``warmup_steps`` outside ``[0, total_steps]``, raises
    ``ValueError``.
    """
    step = _check_int(step, "warmup_cosine_lr: step", minimum=0)  # (TypeError for 1.5 or True, ValueError for -1)
    warmup_steps = _check_int(warmup_steps, "warmup_cosine_lr: warmup_steps")
    total_steps = _check_int(total_steps, "warmup_cosine_lr: total_steps")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_cosine_lr: need 0 <= warmup_steps <= total_steps, got {warmup_steps}, {total_steps}")
    max_lr, min_lr = _real(max_lr, "warmup_cosine_lr", "max_lr"), _real(min_lr, "warmup_cosine_lr", "min_lr")
    if not (0 <= min_lr <= max_lr and math.isfinite(max_lr)):
        raise ValueError(f"warmup_cosine_lr: need 0 <= min_lr <= max_lr, both finite, got {min_lr}, {max_lr}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return float(min_lr)
    ratio = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))
