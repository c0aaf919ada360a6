"""A tiny tensor autograd engine: `Tensor` wraps a float32 ndarray and remembers how it was made.

Reverse-mode automatic differentiation in the style of micrograd (Karpathy, 2020), on whole NumPy
arrays instead of scalars:

* Every op returns a Tensor that records its parent Tensors and a ``backward`` closure, which maps
  the gradient of the op's output to one gradient per parent.
* ``loss.backward()`` puts the graph in topological order with an explicit stack (no recursion,
  so a chain of 100,000 ops is fine), then calls the closures from the loss back to the leaves.
* The gradient of a broadcast operand is summed back to the operand's shape by the engine.
* Gradients **accumulate**. ``backward`` *adds* into ``leaf.grad`` (as torch does): a tensor used
  twice receives the sum of both paths, and calling ``backward`` twice gives twice the gradient.
  Clear gradients with ``t.grad = None``, ``Module.zero_grad()`` or ``Optimizer.zero_grad()``.
* Only leaves (tensors made by the user, such as parameters and inputs) keep ``.grad``; call
  ``t.retain_grad()`` to keep it on an intermediate result too. The graph lives as long as its
  output, so ``backward`` may be called again on it.
* Inside ``with no_grad():`` ops compute values only and record nothing.
* ``no_grad`` and ``default_dtype`` switch the calling thread only (as torch's grad mode does):
  another thread keeps its own settings, and a new thread starts with grad enabled and float32.
* Copying and pickling. A leaf (a parameter, an input) pickles and deep-copies with its data,
  ``.grad`` and ``requires_grad``; ``copy.copy`` gives another handle on the same array. The output
  of an op in a graph refuses both with a TypeError (as torch refuses to deep-copy one): its backward
  closure refers to the original's inputs, so a deep copy would compute its gradients from those
  (unchecked by the version counters), and pickle cannot store a closure. Copy ``t.detach()``.
* Ops save references to their inputs' arrays, not copies, so changing ``.data`` in place between
  the forward pass and ``backward`` would give wrong gradients. As in torch, every tensor has a
  version counter that in-place updates bump, and each op records its inputs' versions and its
  output's: ``backward`` refuses a graph whose inputs or intermediate results changed since (before
  it touches any ``.grad``; exp, tanh and softmax, for one, compute gradients from their output). The
  optimizers bump the parameters they update (an optimizer step between the forward pass and
  ``backward`` is the usual slip), and so does assigning ``t.data = ...``; NumPy cannot see other
  writes, so code that writes into ``t.data[...]`` itself calls ``t.bump_version()``. A NumPy array
  passed as an operand (``t * mask``) is used as it is, with no counter of its own: leave it
  unwritten until ``backward`` has run. (Indexing copies its index arrays: a batch buffer of ids
  may be refilled.) Which tensors get gradients is read when ``backward`` runs: setting
  ``requires_grad`` between the two changes it (torch records it with the op).

Data types. A Tensor holds float32 data (floating input is converted: float16/float64 to float32)
or integer data (token ids, targets: never differentiable). bool, complex and object data raise
``TypeError``. Gradients are float32 ndarrays shaped like ``.data``. For gradient checking,
``with default_dtype(np.float64):`` makes new tensors float64 instead; every op here computes in
the dtype of its operands, so a whole graph can run in float64 (see ``minifp8.testing.gradcheck``).

Defining a new differentiable op
--------------------------------
`make_op` is the public way to add an op with a closed-form backward (``functional``,
``unit`` and ``fp8`` are built on it). Give it the output value, the parent tensors and a
``backward(grad_out)`` that returns one gradient (or None) per parent:

    from minifp8.autograd import make_op

    def scale_bwd(x, b):
        "Identity in the forward pass; multiplies the gradient by b in the backward pass."
        return make_op(x.data, (x,), lambda grad: (grad * b,), name="scale_bwd")

    def scale_fwd(x, a):
        "Multiplies the value by a; passes the gradient through unchanged."
        return make_op(x.data * a, (x,), lambda grad: (grad,), name="scale_fwd")

A gradient may have the broadcast shape of the output; the engine sums it down to the parent's
shape. ``backward`` must not modify arrays it saved (the graph can be walked twice) nor its
``grad_out`` argument.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import codec
from .formats import _check_bool, _described, _is_int, _is_real, _plain_array  # the package's argument checks and tests

__all__ = [
    "Tensor", "as_tensor", "default_dtype", "get_default_dtype", "is_grad_enabled", "make_op", "no_grad",
]

# ---- the switches, per thread -------------------------------------------------------------------

class _Switches(threading.local):
    """`no_grad`'s and `default_dtype`'s settings, one set per thread: process-wide ones would leak
    between threads (two threads' nested ``no_grad`` blocks, ended out of order, left grad off for
    good). Set in ``__init__``, which each thread runs on first use: a read then finds them in the
    instance, which is faster than a class attribute."""

    def __init__(self) -> None:
        self.grad_enabled = True
        self.default_dtype: np.dtype = np.dtype(np.float32)


_switches = _Switches()


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Context manager (or decorator): ops inside compute values only and build no graph.

    It switches the calling thread only; other threads keep recording.
    """
    previous = _switches.grad_enabled
    _switches.grad_enabled = False
    try:
        yield
    finally:
        _switches.grad_enabled = previous


def is_grad_enabled() -> bool:
    """True unless inside `no_grad` (in this thread)."""
    return _switches.grad_enabled


@contextlib.contextmanager
def default_dtype(dtype: DTypeLike) -> Iterator[None]:
    """Context manager: tensors created inside get floating dtype ``dtype`` (float32 or float64).

    float32 is the engine's dtype. float64 exists so that `minifp8.testing.gradcheck` can
    run the very same ops in double precision against finite differences. It switches the
    calling thread only: tensors that other threads create stay float32.
    """
    if dtype is None:  # (np.dtype(None) is float64)
        raise TypeError("default_dtype must be float32 or float64, got None")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"default_dtype must be float32 or float64, got {dtype}")
    previous = _switches.default_dtype
    _switches.default_dtype = dtype
    try:
        yield
    finally:
        _switches.default_dtype = previous


def get_default_dtype() -> np.dtype:
    """The floating dtype that new tensors get (float32 unless inside `default_dtype`, in this thread)."""
    return _switches.default_dtype


def _narrowed(array: np.ndarray, dtype, what: str, consequence: str) -> np.ndarray:
    """``array`` as ``dtype`` (no copy where it already is), or a ValueError where a finite value
    would become Inf there (`minifp8.codec._check_fits`)."""
    with np.errstate(over="ignore"):
        converted = array.astype(dtype, copy=False)
    codec._check_fits(array, converted, what, consequence)
    return converted


def _to_array(data, what: str = "Tensor data") -> np.ndarray:
    """``data`` as an ndarray of the default float dtype or of an integer dtype; never copies needlessly."""
    if isinstance(data, Tensor):
        raise TypeError(f"{what} is already a Tensor: use t.detach() to share its data without a graph")
    array = _plain_array(data, what)
    kind = array.dtype.kind
    if kind == "f":
        dtype = _switches.default_dtype
        if array.dtype == dtype:
            return array
        return _narrowed(array, dtype, what, f"a {dtype} Tensor would hold Inf")  # (1e300 became Inf silently)
    if kind in "iu":
        return array
    if kind == "b":
        raise TypeError(f"{what} has dtype bool, which is not supported: convert a mask with "
                        f".astype(np.float32), or use an integer dtype for indices")
    raise TypeError(f"{what} must be a real floating or integer array, got dtype {array.dtype}")


# ---- the Tensor --------------------------------------------------------------------------------

class Tensor:
    """An ndarray (``.data``) with an optional gradient (``.grad``) and the op that made it.

    Parameters
    ----------
    data : array_like
        Floating data is stored as float32 (or float64 inside ``default_dtype(np.float64)``),
        without a copy when it already has that dtype; a finite value beyond that dtype's range
        (float64 1e300 for a float32 Tensor) raises ``ValueError``. Integer data (token ids) is kept
        as is and cannot require grad. bool, complex and object data raise ``TypeError``.
    requires_grad : bool
        Whether ``backward`` should compute a gradient for this tensor.
    """

    __slots__ = ("_data", "grad", "_requires_grad", "_parents", "_backward", "_op", "_retain_grad", "_version",
                 "_saved_versions", "_made_version", "__weakref__")
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operator

    def __init__(self, data: ArrayLike, requires_grad: bool = False) -> None:
        self._data = _to_array(data)
        self.grad: np.ndarray | None = None
        self._parents: tuple[Tensor, ...] = ()
        self._backward: Callable | None = None
        self._op = ""
        self._retain_grad = False
        self._version = [0]  # a counter shared with the tensors that view the same array (`_shared_version`)
        self._saved_versions: tuple[int, ...] = ()
        self._made_version = 0
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _result(cls, data: np.ndarray, parents: tuple, backward: Callable | None, op: str,
                version: list | None = None) -> "Tensor":
        """An op's output, bypassing the input checks of ``__init__`` (data is already an array);
        ``version``: the counter of the tensor whose array ``data`` views, shared."""
        out = cls.__new__(cls)
        out._data = data
        out.grad = None
        out._parents = parents
        out._backward = backward
        out._op = op
        out._retain_grad = False
        out._version = [0] if version is None else version
        out._saved_versions = tuple(parent._version[0] for parent in parents)
        out._made_version = out._version[0]
        out._requires_grad = backward is not None
        return out

    # -- properties --

    @property
    def requires_grad(self) -> bool:
        """Whether ``backward`` computes a gradient for this tensor. Settable on leaves only: an op's
        output requires grad by construction (turning it off would silently cut the graphs already
        built through it, as torch refuses too); use ``t.detach()`` for a copy outside the graph."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = _check_bool(value, "requires_grad")
        if self._backward is not None and value != self._requires_grad:
            raise RuntimeError(f"requires_grad can only be changed on leaf tensors, got an output of op {self._op!r} "
                               f"(shape {self.shape}): use t.detach() for a tensor outside the graph")
        if value and self.data.dtype.kind != "f":
            raise TypeError(f"only floating tensors can require grad, this one has dtype {self.data.dtype} "
                            "(integer tensors are token ids/targets)")
        self._requires_grad = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def is_leaf(self) -> bool:
        """True for tensors not produced by a recorded op (their ``.grad`` is kept)."""
        return self._backward is None

    @property
    def T(self) -> "Tensor":
        """All axes reversed (NumPy's ``.T``)."""
        return self.transpose()

    def __repr__(self) -> str:
        extra = f", op={self._op!r}" if self._op else ""
        extra += ", requires_grad=True" if self._requires_grad else ""
        return f"Tensor(shape={self.shape}, dtype={self.dtype}{extra})"

    # -- copying and pickling (module docstring) --

    def __getstate__(self) -> dict:
        """Every slot, for pickle (any protocol) and ``copy.deepcopy``; a TypeError for an op's output."""
        if self._backward is not None:
            raise TypeError(f"cannot pickle or deep-copy {self!r}: it is the output of op {self._op!r} in an autograd "
                            f"graph, whose backward closure refers to the original's inputs (a copy would compute "
                            f"its gradients from them, and pickle cannot store a closure); copy t.detach() for its "
                            f"values as a new leaf, or copy the leaves and run the forward pass again")
        return _instance_state(self)

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple):  # (None or __dict__, slots): pickles written before __getstate__
            state = {**(state[0] or {}), **state[1]}
        for name, value in state.items():
            setattr(self, name, value)

    def __copy__(self) -> "Tensor":
        """Another handle on the same array, ``.grad`` and version counter (and, for an op's output, the
        same place in its graph): what ``copy.copy`` gives."""
        twin = type(self).__new__(type(self))
        twin.__setstate__(_instance_state(self))
        return twin

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        """The rows, each ``self[i]`` in the graph; a 0-d tensor is a TypeError, as in NumPy (Python's
        fallback through ``__getitem__`` gave ``list(Tensor(3.0)) == []``)."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d Tensor: use .item() for its value")
        return (self[i] for i in range(len(self)))

    # A Tensor is hashed by identity (optimizers key their state by it), and ``==`` would compare
    # identity too: ``t == 0.0`` gave one False, not an elementwise mask. Compare the arrays instead,
    # as the ordering operators, which a Tensor lacks, already make one do.
    __hash__ = object.__hash__

    def __eq__(self, other):
        if other is self:  # (list membership tries identity before ==: ``t in [t]`` is True; where another
            return True  # Tensor comes first, ``in`` and list.remove raise, so use ``any(x is t for x in ...)``)
        raise TypeError(f"== on a minifp8 Tensor is not elementwise: compare the arrays, .data == "
                        f"{'.data' if isinstance(other, Tensor) else 'value'} (or use `is` for identity)")

    def __ne__(self, other):
        if other is self:
            return False
        raise TypeError(f"!= on a minifp8 Tensor is not elementwise: compare the arrays, .data != "
                        f"{'.data' if isinstance(other, Tensor) else 'value'} (or use `is not` for identity)")

    def __array__(self, dtype=None, copy=None):
        """np.asarray(t) made an object array of 0-d Tensors, one per element, each in the graph."""
        raise TypeError("a minifp8 Tensor is not an array: pass its values, .data (or .numpy()), or use "
                        "minifp8.functional's ops to stay in the graph")

    def __bool__(self) -> bool:
        return bool(self.data)  # raises for more than one element, like NumPy

    def __float__(self) -> float:
        return float(self.data)

    def item(self) -> float | int:
        """The value of a one-element tensor as a Python number."""
        if self.data.size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {self.shape}")
        return self.data.item()

    def numpy(self) -> np.ndarray:
        """The data array itself (not a copy)."""
        return self.data

    def detach(self) -> "Tensor":
        """A new leaf sharing this tensor's data, and its version counter, outside any graph."""
        return Tensor._result(self.data, (), None, "", self._version)

    @property
    def data(self) -> np.ndarray:
        """The array (float32, float64 or integer). Assigning a new one bumps the version, and
        converts it as the constructor does (floating data to the default dtype, float32 unless
        inside `default_dtype`; bool, complex and object data, and integer data on a tensor that
        requires grad, raise TypeError, and finite values beyond the dtype's range ValueError)."""
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        if value is self._data:  # ``t.data += ...``: the array was written in place, views and all
            self._version[0] += 1
            return
        value = _to_array(value)
        if self._requires_grad and value.dtype.kind != "f":
            raise TypeError(f"a tensor that requires grad needs floating data, got dtype {value.dtype}")
        self._version = [self._version[0] + 1]  # a new array: tensors that view the old one keep it, and their counter
        self._data = value

    def bump_version(self) -> None:
        """Record that ``.data`` was written in place (``t.data[...] = ...``, ``np.copyto``): graphs
        built from the old values refuse ``backward`` (module docstring). Assigning ``t.data`` bumps
        the version by itself, and every optimizer step bumps the parameters it updates."""
        self._version[0] += 1

    def retain_grad(self) -> "Tensor":
        """Keep ``.grad`` on this intermediate tensor during ``backward`` (leaves always keep it)."""
        if not self._requires_grad:
            raise RuntimeError("retain_grad() on a tensor that does not require grad")
        self._retain_grad = True
        return self

    # -- backward --

    @np.errstate(under="ignore")  # (gradients may underflow, whatever the caller's error state says)
    def backward(self, grad: Tensor | ArrayLike | None = None) -> None:
        """Accumulate d(self)/d(leaf), times ``grad``, into the ``.grad`` of every leaf that requires grad.

        Every ``.grad`` is updated only after the whole graph has been walked: when the walk raises
        (a changed input, an op's backward that fails, an interrupt), or a ``.grad`` set by hand cannot
        take the sum in place (not an ndarray, another shape, an integer dtype, read-only), no
        ``.grad`` has changed. (The leaves' gradients are held until then, as ``.grad`` would hold them
        after.)

        Parameters
        ----------
        grad : array_like, optional
            The gradient flowing into this tensor, shaped like it. Required unless the tensor has
            exactly one element (a scalar loss), where it defaults to 1.
        """
        if not self._requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad: no input requires grad, "
                               "or it was computed inside no_grad()")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(f"backward() without grad needs a one-element tensor (a scalar loss), "
                                   f"got shape {self.shape}: pass grad= with that shape")
            grad = np.ones_like(self.data)
        else:
            grad = grad.data if isinstance(grad, Tensor) else _plain_array(grad, "backward(grad=...)")
            if grad.dtype.kind not in "fiu":
                raise TypeError(f"backward(grad=...) must be a real array, got dtype {grad.dtype}")
            if grad.shape != self.shape:
                raise ValueError(f"backward(grad=...) must have the tensor's shape {self.shape}, got {grad.shape}")
            grad = _narrowed(grad, self.data.dtype, "backward(grad=...)",
                             f"the tensor is {self.data.dtype}, where it would become Inf")

        order = self._topological_order()
        _check_versions(order)
        grads: dict[int, np.ndarray] = {id(self): grad}
        # Arrays the engine allocated itself (keys in `owned`) are referenced nowhere else, so it may
        # add into them in place; any other gradient may be shared (add hands one array to both
        # parents) and is never modified.
        owned: set[int] = set()
        # the .grad updates, made once the whole graph has been walked: an op's backward that raises
        # (or a KeyboardInterrupt) leaves every .grad as it was, not some leaves updated and some not
        deliveries: list[tuple[Tensor, np.ndarray, bool]] = []
        for node in reversed(order):
            key = id(node)
            grad_out = grads.pop(key, None)
            if grad_out is None:
                continue
            if node._backward is None:
                deliveries.append((node, grad_out, key in owned))
                continue
            if node._retain_grad:
                deliveries.append((node, grad_out, False))
            parent_grads = node._backward(grad_out)
            if not isinstance(parent_grads, (tuple, list)) or len(parent_grads) != len(node._parents):
                raise TypeError(f"backward of op {node._op!r} must return a tuple with one gradient (or None) "
                                f"per parent ({len(node._parents)}), got {type(parent_grads).__name__}"
                                + (f" of length {len(parent_grads)}" if isinstance(parent_grads, (tuple, list)) else ""))
            for parent, parent_grad in zip(node._parents, parent_grads):
                if parent_grad is None or not parent._requires_grad:
                    continue
                key = id(parent)
                previous = grads.get(key)
                if isinstance(parent_grad, _SliceGrad):  # zero outside a slice: add into the slice only
                    if key not in owned:
                        grads[key] = (np.zeros(parent.data.shape, dtype=parent.data.dtype) if previous is None
                                      else np.array(previous, dtype=parent.data.dtype, copy=True))
                        owned.add(key)
                    grads[key][parent_grad.index] += parent_grad.values
                    continue
                parent_grad = np.asarray(parent_grad)
                if parent_grad.shape != parent.data.shape:
                    parent_grad = np.asarray(_unbroadcast(parent_grad, parent.data.shape, node._op))
                if parent_grad.dtype != parent.data.dtype:
                    parent_grad = parent_grad.astype(parent.data.dtype)
                if previous is None:
                    grads[key] = parent_grad
                elif key in owned:
                    np.add(previous, parent_grad, out=previous)
                else:  # (np.asarray: the sum of 0-d arrays is a NumPy scalar, which np.add cannot write into)
                    grads[key] = np.asarray(previous + parent_grad)
                    owned.add(key)
        for node, grad_out, _ in deliveries:  # (checked first: a .grad that cannot take the sum changes none)
            node._check_accumulable(grad_out)
        # the sums into .grad set earlier, formed before any is written: one that raises (an overflow
        # under np.errstate(over="raise")) leaves every .grad as it was
        sums = [None if node.grad is None else np.add(node.grad, grad_out, out=np.empty_like(node.grad))
                for node, grad_out, _ in deliveries]
        for (node, grad_out, take), total in zip(deliveries, sums):
            node._accumulate(grad_out, take, total)

    def _check_accumulable(self, grad: np.ndarray) -> None:
        """Raise if ``.grad`` (set by the user, not by backward) cannot have ``grad`` added into it in place."""
        if self.grad is None:
            return
        if not isinstance(self.grad, np.ndarray):
            raise TypeError(f"backward(): the .grad of {self!r} must be an ndarray to accumulate into "
                            f"(or None), got {type(self.grad).__name__}")
        if self.grad.shape != grad.shape:
            raise ValueError(f"backward(): the .grad of {self!r} has shape {self.grad.shape}, "
                             f"expected the tensor's shape {grad.shape}")
        if not np.can_cast(grad.dtype, self.grad.dtype, casting="same_kind"):
            raise TypeError(f"backward(): the .grad of {self!r} has dtype {self.grad.dtype}, which cannot "
                            f"hold a {grad.dtype} gradient: set it to None or to a floating array")
        if not self.grad.flags.writeable:
            raise ValueError(f"backward(): the .grad of {self!r} is read-only, so the gradient cannot be "
                             f"added into it: set it to None or to a writable copy")

    def _accumulate(self, grad: np.ndarray, take: bool, total: np.ndarray | None) -> None:
        """Set ``.grad`` to ``grad``, or, where it holds an array, to ``total`` (its sum with ``grad``,
        formed beforehand), in place; ``take``: ``grad`` is the engine's own and may become ``.grad``."""
        if self.grad is None:
            # .grad must be a writable array of our own (optimizers and clipping scale it in place)
            self.grad = grad if take else np.array(grad, dtype=self.data.dtype, copy=True)
        else:
            assert total is not None  # (formed for every .grad that holds an array)
            np.copyto(self.grad, total)

    def _topological_order(self) -> list["Tensor"]:
        """Nodes that require grad, each after all of its parents (iterative depth-first search)."""
        order: list[Tensor] = []
        visited: set[int] = set()
        stack: list[tuple[Tensor, bool]] = [(self, False)]
        while stack:
            node, parents_done = stack.pop()
            if parents_done:
                order.append(node)
                continue
            if id(node) in visited:
                continue
            visited.add(id(node))
            stack.append((node, True))
            for parent in node._parents:
                if parent._requires_grad and id(parent) not in visited:
                    stack.append((parent, False))
        return order

    # -- arithmetic --

    def _operand(self, other) -> "Tensor":
        """``other`` as a floating Tensor for an elementwise op with ``self``."""
        if isinstance(other, Tensor):
            if other.data.dtype.kind != "f" or self.data.dtype.kind != "f":
                raise TypeError(f"arithmetic needs floating tensors, got {self.dtype} and {other.dtype} "
                                "(integer tensors are token ids; convert with Tensor(t.data.astype(np.float32)))")
            return other
        _check_floating(self, "arithmetic")
        if isinstance(other, (bool, np.bool_)):
            raise TypeError("a bool operand is ambiguous: use 0.0/1.0")
        array = _plain_array(other, "the other operand")
        if array.dtype.kind not in "fiub":
            raise TypeError(f"unsupported operand of dtype {array.dtype} for a Tensor op")
        converted = _narrowed(array, self.data.dtype, "the other operand", f"the op works in {self.data.dtype}, "
                              f"the Tensor's dtype, where it would become Inf")  # (t + 1e39 became Inf silently)
        return Tensor._result(converted, (), None, "")

    def __add__(self, other) -> "Tensor":
        other = self._operand(other)
        return make_op(_elementwise(np.add, self, other, "add"), (self, other), lambda g: (g, g), "add")

    __radd__ = __add__

    def __sub__(self, other) -> "Tensor":
        other = self._operand(other)
        return make_op(_elementwise(np.subtract, self, other, "sub"), (self, other), lambda g: (g, -g), "sub")

    def __rsub__(self, other) -> "Tensor":
        return self._operand(other) - self

    def __neg__(self) -> "Tensor":
        return make_op(-self.data, (self,), lambda g: (-g,), "neg")

    def __mul__(self, other) -> "Tensor":
        other = self._operand(other)
        a, b = self, other

        def backward(g):
            return (g * b.data if a._requires_grad else None, g * a.data if b._requires_grad else None)

        return make_op(_elementwise(np.multiply, a, b, "mul"), (a, b), backward, "mul")

    __rmul__ = __mul__

    def __truediv__(self, other) -> "Tensor":
        other = self._operand(other)
        a, b = self, other
        out_data = _elementwise(np.divide, a, b, "div")

        def backward(g):
            grad_a = g / b.data if a._requires_grad else None
            grad_b = None
            if b._requires_grad:  # d(a/b)/db = -g a / b**2
                if out_data.dtype.itemsize < 8:  # (in float64, where no product of float32 values overflows or
                    # underflows: in float32 any order of g, a, 1/b and 1/b can, where -g a / b**2 is a float32
                    # number: g = 1e20, a = 1e25, b = 1e5 gave -inf for -1e35 from g * (a / b) first)
                    wide_b = b.data.astype(np.float64)
                    grad_b = (-(g.astype(np.float64) / wide_b) * (a.data.astype(np.float64) / wide_b))
                    with np.errstate(over="ignore", under="ignore"):  # (the float32 answer's own range)
                        grad_b = grad_b.astype(out_data.dtype)
                else:
                    grad_b = -(g * out_data) / b.data
            return grad_a, grad_b

        return make_op(out_data, (a, b), backward, "div")

    def __rtruediv__(self, other) -> "Tensor":
        return self._operand(other) / self

    def __pow__(self, exponent) -> "Tensor":
        """``self ** exponent``: a number, an array (a constant, as in the other ops) or a Tensor; a
        Tensor exponent is differentiable too (its gradient needs a positive base, or a zero one with a
        non-negative exponent).

        As torch's: where the exponent is 0 the base's gradient is 0 (as for a number exponent,
        not ``0 * 0**-1`` = NaN at base 0), and where the base is 0 and the exponent >= 0 the
        exponent's gradient is 0 (``0**y`` is 0 for every y > 0; not ``0 * log 0`` = NaN).
        """
        if isinstance(exponent, Tensor):
            exponent = self._operand(exponent)
            base = self
            out_data = _elementwise(np.power, base, exponent, "pow")

            def backward(g):
                grad_base = grad_exp = None
                if base._requires_grad:  # (exponent 1 where it is 0: base**0 = 1, times the exponent 0)
                    e = exponent.data
                    grad_base = g * e * base.data ** (np.where(e == 0, 1, e) - 1)
                if exponent._requires_grad:  # (log 1 = 0 where base 0 meets an exponent >= 0)
                    grad_exp = g * out_data * np.log(np.where((base.data == 0) & (exponent.data >= 0), 1, base.data))
                return grad_base, grad_exp

            return make_op(out_data, (base, exponent), backward, "pow")
        if isinstance(exponent, np.ndarray):  # (as every other binary op takes one: a constant Tensor)
            return self ** self._operand(exponent)
        if not _is_real(exponent):
            raise TypeError(f"exponent must be a real number, an array or a Tensor, got {type(exponent).__name__}")
        _check_floating(self, "**")
        p = float(exponent)
        x = self
        # p and p - 1 in x's dtype, as NumPy 2 converts a Python float next to an array (NEP 50);
        # NumPy 1 would compute a 0-d x ** p in float64
        power, power_less_one = x.data.dtype.type(p), x.data.dtype.type(p - 1.0)

        def backward_scalar(g):
            if p == 0.0:  # x**0 = 1 everywhere: the gradient is 0 (0 * 0**-1 would be NaN at x = 0)
                return (np.zeros_like(g),)
            return (g * (power * x.data ** power_less_one),)

        return make_op(x.data ** power, (x,), backward_scalar, "pow")

    def __rpow__(self, base) -> "Tensor":
        return self._operand(base) ** self

    def __matmul__(self, other) -> "Tensor":
        return matmul(self, other)

    def __rmatmul__(self, other) -> "Tensor":
        return matmul(as_tensor(other), self)

    # -- indexing and shape --

    def __getitem__(self, index) -> "Tensor":
        """Basic and advanced (integer-array, bool-mask) indexing; repeated indices sum their gradients.

        The sums are ``np.add.at``'s, bit for bit; rows picked by one integer array (``x[ids]``, as
        an embedding picks them) are summed the faster way `_sum_rows_by_id` describes.
        """
        index = _plain_index(index)
        x = self
        out_data = x.data[index]
        basic = _is_basic_index(index)
        if not basic:  # backward reads the index later: a copy, so that refilling an ids array (a batch
            index = _copied_index(index)  # buffer) before backward cannot send the gradient elsewhere

        def backward(g):
            if basic:  # a view: the engine adds g into that slice of x's gradient
                return (_SliceGrad(index, g),)
            row_size = math.prod(x.shape[1:])
            if isinstance(index, np.ndarray) and index.dtype.kind in "iu" and x.ndim and row_size:
                # whole rows picked by ids (as an embedding): np.add.at's sums, bit for bit, faster
                rows = index.reshape(-1).astype(np.intp, copy=False)
                rows = np.where(rows < 0, rows + x.shape[0], rows)
                return (_sum_rows_by_id(rows, g.reshape(-1, row_size), x.shape[0]).reshape(x.shape),)
            grad = np.zeros(x.data.shape, dtype=g.dtype)
            np.add.at(grad, index, g)
            return (grad,)

        return make_op(out_data, (x,), backward, "getitem")

    def sum(self, axis: int | tuple[int, ...] | list[int] | None = None, keepdims: bool = False) -> "Tensor":
        """Sum over ``axis`` (None, int or tuple of ints)."""
        x, keepdims = self, _check_bool(keepdims, "sum: keepdims")
        axes = _normalize_axes(axis, x.ndim, "sum")

        def backward(g):
            if not keepdims:
                g = np.expand_dims(g, axes)
            return (np.broadcast_to(g, x.data.shape),)

        total = x.data.sum(axis=axes, keepdims=True)  # (keepdims=True, then squeezed: NumPy 2.5's type stubs
        # take keepdims as a literal True or False only)
        return make_op(total if keepdims else np.squeeze(total, axis=axes), (x,), backward, "sum")

    def mean(self, axis: int | tuple[int, ...] | list[int] | None = None, keepdims: bool = False) -> "Tensor":
        """Mean over ``axis`` (None, int or tuple of ints)."""
        x, keepdims = self, _check_bool(keepdims, "mean: keepdims")
        axes = _normalize_axes(axis, x.ndim, "mean")
        count = math.prod(x.data.shape[a] for a in axes)
        _check_floating(x, "mean")
        if count == 0:  # (an empty axis among axes)
            empty = [a for a in axes if x.data.shape[a] == 0]
            raise ValueError(f"mean: axis {empty[0] if len(empty) == 1 else tuple(empty)} of shape {x.shape} is "
                             f"empty: the mean of no values is undefined (NumPy and torch give NaN)")

        def backward(g):
            if not keepdims:
                g = np.expand_dims(g, axes)
            return (np.broadcast_to(g / count, x.data.shape),)

        average = x.data.mean(axis=axes, keepdims=True)  # (as in `sum`)
        return make_op(average if keepdims else np.squeeze(average, axis=axes), (x,), backward, "mean")

    def reshape(self, *shape: int | tuple[int, ...] | list[int]) -> "Tensor":
        """Reshape like ``ndarray.reshape`` (one -1 allowed); ``t.reshape(2, 3)`` or ``t.reshape((2, 3))``."""
        # (entries typed Any: NumPy checks them, as ndarray.reshape does)
        dims: Sequence[Any] = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        x = self
        return make_op(x.data.reshape(dims), (x,), lambda g: (g.reshape(x.data.shape),), "reshape")

    def transpose(self, *axes: int | tuple[int, ...] | list[int]) -> "Tensor":
        """Permute axes like ``ndarray.transpose`` (NumPy semantics: a full permutation; none reverses)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        perm = tuple(_axis(a, self.ndim, "transpose") for a in axes)
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"transpose axes {axes} are not a permutation of the {self.ndim} axes of shape {self.shape}")
        inverse = tuple(np.argsort(perm))
        return make_op(self.data.transpose(perm), (self,), lambda g: (g.transpose(inverse),), "transpose")

    # elementwise functions as methods, for readability: x.exp(), x.log(), ...
    def exp(self) -> "Tensor":
        _check_floating(self, "exp")
        out_data = np.exp(self.data)
        return make_op(out_data, (self,), lambda g: (g * out_data,), "exp")

    def log(self) -> "Tensor":
        x = _check_floating(self, "log")
        return make_op(np.log(x.data), (x,), lambda g: (g / x.data,), "log")

    def tanh(self) -> "Tensor":
        """``tanh(x)``. Backward: ``g * sech(x)**2``, as ``4 e / (1 + e)**2`` with ``e = exp(-2 |x|)``,
        which keeps its relative precision in the tails (``1 - tanh(x)**2`` cancels to 0 from |x| ~ 9
        in float32, where the true value is about 6e-8)."""
        x = _check_floating(self, "tanh")

        def backward(g):
            with np.errstate(under="ignore"):  # (sech^2 below the smallest float: 0, as it must)
                e = np.exp(-2.0 * np.abs(x.data))
                return (g * (4.0 * e / ((1.0 + e) * (1.0 + e))),)

        return make_op(np.tanh(x.data), (x,), backward, "tanh")


def _instance_state(tensor: Tensor) -> dict:
    """Every slot of ``tensor``'s class and its bases that is set, and its ``__dict__`` (a subclass's).

    A slot named ``__x`` in class ``C`` is stored as ``_C__x`` (name mangling), as pickle's own
    ``copyreg`` spells it.
    """
    names = set()
    for cls in type(tensor).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:  # (__slots__ = "name" is one slot)
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"
            names.add(name)
    names -= {"__weakref__", "__dict__"}
    state = {name: getattr(tensor, name) for name in names if hasattr(tensor, name)}
    state.update(getattr(tensor, "__dict__", {}))
    return state


# ---- making ops --------------------------------------------------------------------------------

def _check_versions(order: list[Tensor]) -> None:
    """RuntimeError if an op's input, or its output, was changed in place after the op made it
    (`Tensor.bump_version`): ops such as exp, tanh and softmax compute their gradients from their
    output, and none of them would describe a changed one."""
    for node in order:
        if node._backward is not None and node._version[0] != node._made_version:
            raise RuntimeError(
                f"backward: the output of op {node._op!r} (shape {node.shape}) was changed in place after the "
                f"forward pass (version {node._made_version}, now {node._version[0]}): run the forward pass again")
        for parent, version in zip(node._parents, node._saved_versions):
            if parent._version[0] != version:
                raise RuntimeError(
                    f"backward: an input of op {node._op!r} (shape {parent.shape}) was changed in place after the "
                    f"forward pass (version {version}, now {parent._version[0]}): run the forward pass again")


def make_op(data: ArrayLike, parents: Sequence[Tensor], backward: Callable, name: str = "op") -> Tensor:
    """The output Tensor of a differentiable op, recording ``parents`` and ``backward``.

    Parameters
    ----------
    data : ndarray
        The op's output value (used as is, not copied).
    parents : sequence of Tensor
        The op's tensor inputs.
    backward : callable
        ``backward(grad_out) -> tuple`` with one gradient per parent (or None for "no gradient").
        A gradient may have the broadcast shape of the output: the engine sums it to the parent's
        shape and casts it to the parent's dtype. Called only if some parent requires grad; it
        must not modify ``grad_out`` or arrays it saved.
    name : str
        Shown in ``repr`` and error messages.

    Returns
    -------
    Tensor
        Requires grad when grad is enabled and any parent requires grad; otherwise a plain
        tensor with no graph.

    Raises
    ------
    TypeError
        If ``parents`` is a Tensor itself (pass ``(t,)``) or holds anything but Tensors (wrap
        constants with `as_tensor`), or ``backward`` is not callable; or if a parent requires
        grad and ``data`` is not floating (an int, bool or str output cannot carry a gradient).
    """
    if isinstance(parents, Tensor):  # tuple(t) would give the slices t[0], t[1], ...
        raise TypeError(f"make_op {name!r}: parents must be a sequence of Tensors, got a Tensor of shape "
                        f"{parents.shape} (pass (t,))")
    parents = tuple(parents)
    for parent in parents:
        if not isinstance(parent, Tensor):
            raise TypeError(f"make_op {name!r}: parents must be Tensors (wrap a constant with as_tensor), "
                            f"got {_described(parent)}")
    if not callable(backward):
        raise TypeError(f"make_op {name!r}: backward must be a callable backward(grad_out) -> tuple of "
                        f"gradients, got {_described(backward)}")
    data = _plain_array(data, "make_op: data")  # (a constant name: every op passes here)
    version = _shared_version(data, parents)
    if _switches.grad_enabled and any(p._requires_grad for p in parents):
        if data.dtype.kind != "f":
            raise TypeError(f"op {name!r} produced dtype {data.dtype}; a differentiable output must be floating")
        return Tensor._result(data, parents, backward, name, version)
    return Tensor._result(data, (), None, name, version)


def _shared_version(data: np.ndarray, parents: tuple) -> list | None:
    """The version counter of the parent whose array ``data`` is a view of (a slice, a reshape, a
    transpose), which the view shares, as torch's views do: a write through either is seen by
    graphs that saved the other. None for new memory."""
    base = data.base
    for parent in parents:
        if data is parent._data or (base is not None and (base is parent._data or base is parent._data.base)):
            return parent._version
    return None


def as_tensor(value: Tensor | ArrayLike) -> Tensor:
    """``value`` itself if it is a Tensor, else a new constant Tensor (no grad) holding it."""
    return value if isinstance(value, Tensor) else Tensor(value)


def matmul(a: Tensor | ArrayLike, b: Tensor | ArrayLike) -> Tensor:
    """``a @ b`` with NumPy's rules (1-D operands, broadcast batch dimensions), GEMMs in the operands' dtype."""
    a, b = as_tensor(a), as_tensor(b)
    if a.data.dtype.kind != "f" or b.data.dtype.kind != "f":
        raise TypeError(f"matmul needs floating tensors, got {a.dtype} and {b.dtype}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul needs at least 1-D operands, got shapes {a.shape} and {b.shape}")
    inner_a = a.shape[-1]
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if inner_a != inner_b:
        raise ValueError(f"matmul shape mismatch: {a.shape} @ {b.shape}: the last axis of the left operand "
                         f"({inner_a}) must equal the {'only' if b.ndim == 1 else 'second-to-last'} axis of the "
                         f"right operand ({inner_b})")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul shape mismatch: {a.shape} @ {b.shape}: batch axes {a.shape[:-2]} and "
                         f"{b.shape[:-2]} do not broadcast") from None
    out_data = a.data @ b.data

    def backward(g):
        # work with >= 2-D views: a vector on the left is a row, on the right a column
        a2 = a.data if a.ndim > 1 else a.data[None, :]
        b2 = b.data if b.ndim > 1 else b.data[:, None]
        g2 = g.reshape(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1]))
        grad_a = grad_b = None
        if a._requires_grad:
            grad_a = g2 @ b2.swapaxes(-1, -2)
            if grad_a.shape != a2.shape:
                grad_a = _unbroadcast(grad_a, a2.shape, "matmul")
            grad_a = grad_a.reshape(a.shape)
        if b._requires_grad:
            if b2.ndim == 2 and a2.ndim > 2:  # shared matrix: one GEMM over all the rows
                rows = math.prod(a2.shape[:-1])  # not reshape(-1, ...), which cannot infer rows when a size is 0
                grad_b = a2.reshape(rows, a2.shape[-1]).T @ g2.reshape(rows, g2.shape[-1])
            else:
                grad_b = a2.swapaxes(-1, -2) @ g2
                if grad_b.shape != b2.shape:
                    grad_b = _unbroadcast(grad_b, b2.shape, "matmul")
            grad_b = grad_b.reshape(b.shape)
        return grad_a, grad_b

    return make_op(out_data, (a, b), backward, "matmul")


# ---- helpers -----------------------------------------------------------------------------------

class _SliceGrad:
    """A gradient that is zero except on ``parent[index]`` (basic indexing), where it is ``values``.

    Returned by the backward of slicing so that, e.g., the three slices q, k, v of one projection
    add into a single gradient buffer instead of three zero-padded copies. Internal to the engine.
    """

    __slots__ = ("index", "values")

    def __init__(self, index, values: np.ndarray):
        self.index, self.values = index, values


def _check_floating(x: Tensor, op: str, name: str = "input") -> Tensor:
    """``x``, or a TypeError naming ``op`` and its argument ``name``: NumPy would compute ``op`` of
    integer data in float64, which no tensor here holds by itself (module docstring: integer
    tensors are token ids and targets). functional.py's ops check their inputs with it too."""
    if x.data.dtype.kind != "f":
        raise TypeError(f"{op}: {name} must be a floating tensor, got dtype {x.dtype} "
                        "(integer tensors are token ids; convert with Tensor(t.data.astype(np.float32)))")
    return x


def _elementwise(ufunc, a: Tensor, b: Tensor, op: str) -> np.ndarray:
    """``ufunc(a.data, b.data)``; a shape mismatch raises an error that names ``op`` and both shapes."""
    try:
        return ufunc(a.data, b.data)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast "
                         "(NumPy rules: trailing axes must be equal or 1)") from None


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...], op: str) -> np.ndarray:
    """Sum ``grad`` over the axes along which an operand of ``shape`` was broadcast (the callers
    pass only a gradient whose shape differs from ``shape``)."""
    extra = grad.ndim - len(shape)
    if extra < 0 or any(n != 1 and n != m for n, m in zip(shape, grad.shape[extra:])):
        raise ValueError(f"backward of op {op!r} returned a gradient of shape {grad.shape}, "
                         f"which does not broadcast to the parent's shape {shape}")
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def _axis(axis, ndim: int, op: str) -> int:
    """``axis`` as an index in ``range(ndim)`` (negative counts from the end). TypeError unless it is
    an int (a NumPy integer is one, a bool is not), ValueError when it is out of range. Every op's
    axis check (`_normalize_axes`, functional's ops) goes through here."""
    if not _is_int(axis):
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__} {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis!r} is out of range for a {ndim}-D tensor")
    return int(axis) % ndim


def _normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """``axis`` (None for all, an int or a tuple/list of ints) as a tuple of distinct indices (`_axis`)."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    normalized = tuple(_axis(a, ndim, op) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return normalized


def _sum_rows_by_id(ids: np.ndarray, values: np.ndarray, num_rows: int) -> np.ndarray:
    """``out[i]`` = the sum of the rows ``values[j]`` with ``ids[j] == i``; shape ``(num_rows, dim)``.

    Bit for bit what ``np.add.at(zeros, ids, values)`` computes (each id's rows added to 0 one
    after another, in order), 8x faster on the default model's 1024 x 64 gradients, where
    ``np.add.at`` adds row by row. Each id's k-th row goes to slot ``k`` of a zero-filled
    ``(most repeats, num_rows, dim)`` grid, its zeros first, and the grid is summed over its first
    axis: NumPy adds along an axis that is not the fastest in memory one element at a time, in
    order (the ``np.sum`` notes), where along the fastest it sums pairwise. With one row of one
    element the slot axis would be the fastest; both that and a grid of more than 16 times the
    rows' size or 2**23 elements (an id repeated far more than the rest: mostly zeros) take
    ``np.add.at``. Measured with 1024 rows of 64: 53 us against 445 for 14 ids evenly used, 107
    against 472 for 65 ids, one of them 18% of the rows (English text's space; the grid 11 times
    the rows), 155 against 448 at 20 times.
    """
    dim = values.shape[1]
    out = np.zeros((num_rows, dim), dtype=values.dtype)
    if ids.size == 0:
        return out
    repeats = np.bincount(ids, minlength=num_rows)
    most = int(repeats.max())
    if num_rows * dim == 1 or most * num_rows > 16 * ids.size + 256 or most * num_rows * dim > 1 << 23:
        np.add.at(out, ids, values)
        return out
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    first = np.cumsum(repeats) - repeats  # each id's first place in sorted_ids
    slot = np.arange(ids.size) - first[sorted_ids] + (most - repeats[sorted_ids])
    grid = np.zeros((most, num_rows, dim), dtype=values.dtype)
    grid[slot, sorted_ids] = values[order]
    # (the most repeated ids fill every slot: their sums start from add's identity, +0.0, as
    # np.add.at's do, since a reduction's initial value defaults to it: -0.0 rows sum to +0.0)
    return np.add.reduce(grid, axis=0, out=out)


def _plain_index(index):
    """Replace Tensors inside an index by their integer data; a masked array is a TypeError (NumPy
    indexes with the values under its mask)."""
    if isinstance(index, np.ma.MaskedArray) or (isinstance(index, list) and any(
            isinstance(item, np.ma.MaskedArray) for item in index)):
        return _plain_array(np.ma.asarray(index), "the index")  # (raises)
    if isinstance(index, Tensor):
        if index.data.dtype.kind not in "iu":
            raise IndexError(f"a Tensor used as an index must hold integers, got dtype {index.dtype}")
        return index.data
    if isinstance(index, tuple):
        return tuple(_plain_index(i) for i in index)
    return index


def _copied_index(index):
    """An advanced index with its arrays (and lists) copied; ints, slices, None and Ellipsis as they are."""
    if isinstance(index, tuple):
        return tuple(_copied_index(i) for i in index)
    if isinstance(index, list):
        copied = np.array(index)  # (an empty list becomes float64, which NumPy's indexing reads as intp)
        return copied.astype(np.intp) if copied.size == 0 and copied.dtype.kind == "f" else copied
    return np.array(index) if isinstance(index, np.ndarray) else index


def _is_basic_index(index) -> bool:
    """True when ``index`` selects a view (ints, slices, None, Ellipsis): no element twice."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) and not isinstance(i, bool)
               for i in items)
