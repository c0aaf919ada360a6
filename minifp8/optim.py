"""Optimizers (SGD, AdamW), gradient-norm clipping and a warmup + cosine learning-rate schedule.

Optimizers update ``p.data`` in place from ``p.grad``, skipping parameters whose grad is None.
Like torch, ``params`` is a list of tensors or a list of *parameter groups*, dicts with a
``"params"`` list and any hyperparameter to override for that group (for example
``{"params": biases, "weight_decay": 0.0}``). Set ``group["lr"]`` to change the learning rate,
or use `Optimizer.set_lr`.

``state_dict()`` returns copies of every hyperparameter and state array; ``load_state_dict``
restores them bit-exactly, so a resumed run continues exactly as the uninterrupted one.
"""
from __future__ import annotations

import copy
import math
from typing import Iterable

import numpy as np

from .autograd import Tensor

__all__ = ["AdamW", "Optimizer", "SGD", "clip_grad_norm", "warmup_cosine_lr", "zero_grad"]


def zero_grad(params: Iterable[Tensor]) -> None:
    """``p.grad = None`` for every tensor in ``params``."""
    for p in params:
        p.grad = None


class Optimizer:
    """Base class: parameter groups, ``zero_grad``, ``set_lr`` and the state round trip."""

    defaults: dict = {}

    def __init__(self, params, defaults: dict):
        groups = list(params)
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
            settings = {**defaults, **group, "params": list(group["params"])}
            for p in settings["params"]:
                if not isinstance(p, Tensor) or not p.requires_grad:
                    raise TypeError(f"{type(self).__name__}: parameters must be Tensors that require grad, "
                                    f"got {p!r}")
                if id(p) in seen:
                    raise ValueError(f"{type(self).__name__}: a parameter appears twice: {p!r}")
                seen.add(id(p))
            self._check(settings)
            self.param_groups.append(settings)

    def _check(self, group: dict) -> None:
        if not group["lr"] >= 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {group['lr']}")
        if not group.get("weight_decay", 0.0) >= 0:
            raise ValueError(f"{type(self).__name__}: weight_decay must be >= 0, got {group['weight_decay']}")

    def zero_grad(self) -> None:
        """``p.grad = None`` for every parameter."""
        for group in self.param_groups:
            zero_grad(group["params"])

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group (for a schedule)."""
        for group in self.param_groups:
            group["lr"] = float(lr)

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [...]}``; parameters are named by index; all copies."""
        index = {}
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
        """Restore hyperparameters and state saved by `state_dict` (same parameter layout)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(saved["params"]) != len(group["params"]) for saved, group in zip(groups, self.param_groups)):
            raise ValueError(f"{type(self).__name__}.load_state_dict: parameter groups of sizes "
                             f"{[len(g['params']) for g in groups]} do not match this optimizer's "
                             f"{[len(g['params']) for g in self.param_groups]}")
        params = [p for group in self.param_groups for p in group["params"]]
        new_state = {}
        for i, saved in state_dict["state"].items():
            if not 0 <= int(i) < len(params):
                raise KeyError(f"{type(self).__name__}.load_state_dict: state for unknown parameter index {i}")
            p = params[int(i)]
            for name, value in saved.items():
                if isinstance(value, np.ndarray) and value.shape != p.shape:
                    raise ValueError(f"{type(self).__name__}.load_state_dict: state {name!r} of parameter {i} "
                                     f"has shape {value.shape}, the parameter has {p.shape}")
            new_state[p] = copy.deepcopy(saved)
        for saved, group in zip(groups, self.param_groups):
            group.update({k: copy.deepcopy(v) for k, v in saved.items() if k != "params"})
        self.state = new_state


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, as ``torch.optim.SGD`` (its documented algorithm).

    ``g = grad + weight_decay * p``; with momentum, ``b = g`` at the first step, then
    ``b = momentum * b + (1 - dampening) * g``, and ``g = g + momentum * b`` (Nesterov) or
    ``g = b``; finally ``p = p - lr * g``.
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _check(self, group: dict) -> None:
        super()._check(group)
        if not 0.0 <= group["momentum"] < 1.0:
            raise ValueError(f"SGD: momentum must be in [0, 1), got {group['momentum']}")
        if group["nesterov"] and (group["momentum"] == 0.0 or group["dampening"] != 0.0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening 0")

    def step(self) -> None:
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov = group["weight_decay"], group["nesterov"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad + weight_decay * p.data if weight_decay else p.grad
                if momentum:
                    state = self.state.setdefault(p, {})
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = np.array(g, copy=True)
                    else:
                        buffer = state["momentum_buffer"]
                        buffer *= momentum
                        buffer += (1.0 - dampening) * g
                    buffer = state["momentum_buffer"]
                    g = g + momentum * buffer if nesterov else buffer
                p.data -= lr * g


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Alg. 2), as ``torch.optim.AdamW`` documents it.

    At step t (from 1), with gradient g, learning rate lr and weight decay wd:

    * ``p = p - lr * wd * p``                      (decoupled decay, before the Adam step)
    * ``m = beta1 * m + (1 - beta1) * g``
    * ``v = beta2 * v + (1 - beta2) * g^2``
    * ``m_hat = m / (1 - beta1^t)``, ``v_hat = v / (1 - beta2^t)``  (bias correction)
    * ``p = p - lr * m_hat / (sqrt(v_hat) + eps)``

    In the paper's Alg. 2 the decay is scaled by the schedule multiplier eta_t; torch (and we)
    scale it by the learning rate lr, which is the same when lr = alpha * eta_t with alpha
    folded in. Computed in the parameter's dtype (float32), in place.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _check(self, group: dict) -> None:
        super()._check(group)
        betas = group["betas"]
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW: betas must be two numbers in [0, 1), got {betas}")
        if not group["eps"] >= 0:
            raise ValueError(f"AdamW: eps must be >= 0, got {group['eps']}")

    def step(self) -> None:
        for group in self.param_groups:
            lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state.setdefault(p, {})
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = np.zeros_like(p.data)
                    state["exp_avg_sq"] = np.zeros_like(p.data)
                state["step"] += 1
                adamw_update(p.data, g, state["exp_avg"], state["exp_avg_sq"], state["step"], lr, beta1, beta2, eps,
                             weight_decay)


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


def clip_grad_norm(params: Iterable[Tensor], max_norm: float, error_if_nonfinite: bool = False) -> float:
    """Scale all gradients together so that their global L2 norm is at most ``max_norm``.

    As ``torch.nn.utils.clip_grad_norm_``: ``total = sqrt(sum of all grad^2)`` (computed in
    float64), and if ``total > max_norm`` every grad is multiplied in place by
    ``max_norm / (total + 1e-6)``. Returns ``total``, the norm *before* clipping. A non-finite
    total leaves the gradients untouched (torch would multiply them by NaN), or raises
    ``RuntimeError`` when ``error_if_nonfinite``.
    """
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm}")
    grads = [p.grad for p in params if p.grad is not None]
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
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"warmup_cosine_lr: step must be an int >= 0, got {step!r}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_cosine_lr: need 0 <= warmup_steps <= total_steps, got {warmup_steps}, {total_steps}")
    if not 0 <= min_lr <= max_lr:
        raise ValueError(f"warmup_cosine_lr: need 0 <= min_lr <= max_lr, got {min_lr}, {max_lr}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return float(min_lr)
    ratio = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))
