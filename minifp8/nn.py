"""Modules and parameters, like a small ``torch.nn``.

A `Module` finds its parameters by looking at its attributes, in the order they were set:
a `Parameter`, a sub-module, or a list/tuple of either (named ``blocks.0``, ``blocks.1``,
...). A parameter reachable twice (tied weights) is listed once, under its first name. Modules or
parameters held any other way (in a dict, in a list of lists) would be missed, so discovery raises
a TypeError for them.
Every constructor that draws random numbers takes an explicit ``rng: np.random.Generator``.

``state_dict()`` maps those dotted names to copies of the parameter arrays;
``load_state_dict()`` gives the parameters copies of them and raises on missing or unexpected keys
and on shape mismatches. ``save(path)``/``load(path)`` do the same through a ``.npz`` file, bit-exactly.

``copy.deepcopy`` and ``pickle`` copy a module whole, parameters and their ``.grad`` included. Copy a
model together with what refers to its parameters, in one call (``copy.deepcopy((model, optimizer,
fp8_state))``): an optimizer copied on its own updates copies of the parameters, not the model's.
"""
from __future__ import annotations

import math
import os
import zipfile
from collections import OrderedDict
from typing import IO, Any, BinaryIO, Callable, Iterator, Mapping

import numpy as np
from numpy.typing import ArrayLike

from . import functional as F
from ._cli import brief
from .autograd import Tensor, _to_array, default_dtype
from .formats import _check_bool, _is_int, _plain_array

__all__ = ["Dropout", "Embedding", "GELU", "LayerNorm", "Linear", "Module", "Parameter", "ReLU", "Sequential"]


class Parameter(Tensor):
    """A leaf Tensor that requires grad and that a Module registers; holds its own copy of ``data``."""

    __slots__ = ()

    def __init__(self, data: Tensor | ArrayLike) -> None:
        array = data.data if isinstance(data, Tensor) else _plain_array(data, "Parameter data")
        super().__init__(np.array(array, copy=True), requires_grad=True)

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, dtype={self.dtype})"


def _check_generator(rng, owner: str) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{owner} needs rng=np.random.Generator (e.g. np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    return rng


def _check_size(value, name: str, owner: str) -> int:
    """A size: an int (TypeError, as the package's other int arguments) > 0 (ValueError)."""
    if not _is_int(value):
        raise TypeError(f"{owner}: {name} must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)


def _check_feature_axis(x: Tensor | ArrayLike, features: int, owner: str) -> None:
    """ValueError unless ``x``'s last axis has ``features`` elements (checked before the layer norm
    itself, which would blame its weight, or say nothing without one)."""
    shape = np.shape(x.data if isinstance(x, Tensor) else x)
    if shape[-1:] != (features,):
        raise ValueError(f"{owner}({features}): x must have {features} features on its last axis, got shape {shape}")


def _holds_modules(value) -> bool:
    """Whether ``value`` is, or holds at any depth of dicts, lists, tuples and sets, a Module or Parameter."""
    if isinstance(value, (Parameter, Module)):
        return True
    if isinstance(value, dict):
        return any(_holds_modules(item) for item in (*value.keys(), *value.values()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_modules(item) for item in value)
    return False


def _unsupported_container(module, name: str, value) -> TypeError:
    return TypeError(f"{type(module).__name__}: attribute {name} is a {type(value).__name__} holding Modules or "
                     f"Parameters, which a Module does not search (parameters(), state_dict() and train() would "
                     f"miss them); supported are a Module, a Parameter, or a list/tuple of them, as attributes")


class Module:
    """Base class: subclasses set parameters/sub-modules as attributes and define ``forward``."""

    training = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # -- discovery --

    def named_children(self) -> Iterator[tuple[str, "Module | Parameter"]]:
        """Direct parameters and sub-modules, in attribute order (lists expand to ``name.i``).

        Raises ``TypeError`` for an attribute that holds modules or parameters any other way (a dict, a
        list of lists): they would be silently left out of ``parameters()``, ``state_dict()`` and ``train()``.
        """
        for name, value in vars(self).items():
            if isinstance(value, (Parameter, Module)):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, (Parameter, Module)):
                        yield f"{name}.{i}", item
                    elif _holds_modules(item):
                        raise _unsupported_container(self, f"{name}[{i}]", item)
            elif _holds_modules(value):
                raise _unsupported_container(self, name, value)

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """This module and every sub-module, depth first, each once."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{child}" if name else child, value)
                        for child, value in module.named_children() if isinstance(value, Module)]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, Parameter)`` pairs in attribute order; a shared parameter appears once."""
        seen: set[int] = set()
        stack: list[tuple[str, Module | Parameter]] = [("", self)]
        while stack:  # depth first, children in attribute order
            name, value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Parameter):
                yield name, value
            else:
                stack.extend(reversed([(f"{name}.{child}" if name else child, item)
                                       for child, item in value.named_children()]))

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    # -- modes and gradients --

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (dropout active) on this module and all sub-modules."""
        mode = _check_bool(mode, f"{type(self).__name__}.train: mode")
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> "Module":
        """Set evaluation mode (dropout off): ``train(False)``."""
        return self.train(False)

    def zero_grad(self) -> None:
        """Forget accumulated gradients: ``p.grad = None`` for every parameter."""
        for p in self.parameters():
            p.grad = None

    # -- state --

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Copies of the parameter arrays, keyed by dotted name, in ``named_parameters`` order."""
        return OrderedDict((name, p.data.copy()) for name, p in self.named_parameters())

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Give each parameter a copy of its array (a new array: a view of the old data keeps the old
        values); keys and shapes must match exactly, and the values fit the parameter's dtype (a
        ValueError for float64 beyond float32's range): nothing is loaded otherwise."""
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict: state must be a mapping of names to arrays, got {type(state).__name__}")
        params = dict(self.named_parameters())
        missing = [name for name in params if name not in state]
        unexpected = [name for name in state if name not in params]
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        arrays = {}
        for name, p in params.items():
            value = _plain_array(state[name], f"load_state_dict: {name!r}")
            if value.dtype.kind != "f":
                raise TypeError(f"load_state_dict: {name!r} must be a floating array, got dtype {value.dtype}")
            if value.shape != p.shape:
                raise ValueError(f"load_state_dict: {name!r} has shape {value.shape}, the parameter has {p.shape}")
            with default_dtype(p.data.dtype):  # (a module keeps its dtype: float64 under gradcheck); converted
                converted = _to_array(value, f"load_state_dict: {name!r}")  # here, so that all load or none
            arrays[name] = converted.copy() if converted is value else converted  # (a new array either way)
        for name, p in params.items():
            with default_dtype(p.data.dtype):
                p.data = arrays[name]

    def save(self, path: str | os.PathLike | BinaryIO) -> None:
        """Write ``state_dict()`` to an uncompressed ``.npz`` file at ``path`` (or a binary file object) exactly.

        The archive is the one ``np.savez`` writes (a zip of one ``<name>.npy`` per parameter, each
        written by ``np.lib.format.write_array``), built here because ``np.savez`` would add ``.npz`` to
        a name without it (`load` of the same path would not find the file) and takes the keywords
        ``file`` and ``allow_pickle`` as its own arguments (a parameter of either name would be refused
        or lost). Any parameter name works.
        """
        with zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for name, array in self.state_dict().items():
                with archive.open(f"{name}.npy", mode="w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)

    def load(self, path: str | os.PathLike | BinaryIO) -> None:
        """Read a ``.npz`` written by `save` (a path or a binary file object) and ``load_state_dict`` it.

        Raises OSError where the file cannot be opened (FileNotFoundError, ...), ValueError (naming
        the file) where it is not a readable ``.npz`` archive of arrays (`_read_npz`), TypeError for
        a ``path`` that is neither a path nor a file object, and `load_state_dict`'s errors for
        arrays of another model.
        """
        self.load_state_dict(_read_npz(path, "Module.load"))

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, value in self.named_children():
            text = repr(value).replace("\n", "\n  ")
            lines.append(f"  ({name}): {text}")
        return "\n".join(lines) + ")"  # (no children: "Name()")


def _read_npz(path: str | os.PathLike | BinaryIO, owner: str | None) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` archive at ``path`` (read at once), for `Module.load` and
    train_tiny's checkpoints. ``path`` may also be a binary file object open for reading (what
    `Module.save` also writes to), read from its current position.

    OSError where the file cannot be opened; ValueError, naming ``owner`` and the file (neither for an
    ``owner`` of None, whose caller names them), where its bytes are not a ``.npz`` archive of arrays:
    not a zip, or a zip or ``.npy`` member that zipfile or numpy cannot read, which raise a dozen
    exception types between them (BadZipFile, EOFError, NotImplementedError for an unknown
    compression method, RuntimeError for a member marked encrypted, zlib.error, tokenize.TokenError
    for an ``.npy`` header that is not a Python literal, and ValueError for object arrays, which are
    refused: no pickles). A MemoryError stays one.
    """
    def read(file: IO[bytes], head: str, shown: str) -> dict[str, np.ndarray]:
        start = file.tell()
        if file.read(4) not in (b"PK\x03\x04", b"PK\x05\x06"):  # (a zip's first record; an empty zip's)
            raise ValueError(f"{head}{shown} is not a .npz archive: it does not start as a zip file does")
        file.seek(start)
        try:
            with np.load(file, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        except MemoryError:
            raise
        except Exception as error:  # (the bytes are the file's: any other failure to parse them means "unreadable")
            raise ValueError(f"{head}cannot read {shown} as a .npz archive of arrays ({brief(error)})") from None

    head = f"{owner}: " if owner is not None else ""
    if isinstance(path, (str, bytes, os.PathLike)):
        # (opened here: np.load leaves its own handle open when the zip inside is broken)
        with open(path, "rb") as file:
            return read(file, head, os.fsdecode(os.fspath(path)) if owner is not None else "the file")
    if not (callable(getattr(path, "read", None)) and callable(getattr(path, "seek", None))):
        raise TypeError(f"{head}path must be a file path (str or os.PathLike) or a binary file object open for "
                        f"reading, got {type(path).__name__} {path!r}")
    return read(path, head, "the file object" if owner is not None else "the file")


class Linear(Module):
    """``y = x @ weight.T + bias``; weight ``(out_features, in_features)``.

    Initialisation: by default torch's ``nn.Linear`` rule, weight and bias drawn from
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (He et al. 2015 uniform with a = sqrt(5)). With ``std``
    given instead: weight from N(0, std^2) and a zero bias (GPT-2/nanoGPT use std = 0.02).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 rng: np.random.Generator, std: float | None = None):
        in_features = _check_size(in_features, "in_features", "Linear")
        out_features = _check_size(out_features, "out_features", "Linear")
        _check_generator(rng, "Linear")
        bias = _check_bool(bias, "Linear: bias")
        self.in_features, self.out_features = in_features, out_features
        if std is None:
            bound = 1.0 / math.sqrt(in_features)
            self.weight = Parameter(rng.uniform(-bound, bound, (out_features, in_features)))
            self.bias = Parameter(rng.uniform(-bound, bound, (out_features,))) if bias else None
        else:
            std = F._non_negative(std, "Linear", "std")  # (an infinite std would give infinite weights)
            self.weight = Parameter(rng.normal(0.0, std, (out_features, in_features)))
            self.bias = Parameter(np.zeros(out_features)) if bias else None
        self.gemm: Callable[..., Tensor] = F.linear  # gemm(x, weight, bias): the hook fp8.apply_recipe replaces

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return self.gemm(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Linear(in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None})"


class Embedding(Module):
    """A lookup table ``weight (num_embeddings, dim)`` indexed by integer ids.

    Initialisation: N(0, std^2) with ``std=1.0`` by default as torch's ``nn.Embedding``
    (nanoGPT uses 0.02).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, rng: np.random.Generator, std: float = 1.0):
        num_embeddings = _check_size(num_embeddings, "num_embeddings", "Embedding")
        embedding_dim = _check_size(embedding_dim, "embedding_dim", "Embedding")
        _check_generator(rng, "Embedding")
        std = F._non_negative(std, "Embedding", "std")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(rng.normal(0.0, std, (num_embeddings, embedding_dim)))

    def forward(self, ids: Tensor | ArrayLike) -> Tensor:
        return F.embedding(ids, self.weight)

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"


class LayerNorm(Module):
    """Layer norm over the last axis of size ``features``; weight ones, bias zeros (optional)."""

    def __init__(self, features: int, eps: float = 1e-5, *, elementwise_affine: bool = True, bias: bool = True):
        self.features = _check_size(features, "features", "LayerNorm")
        self.eps = F._non_negative(eps, "LayerNorm", "eps")
        bias = _check_bool(bias, "LayerNorm: bias")
        elementwise_affine = _check_bool(elementwise_affine, "LayerNorm: elementwise_affine")
        self.weight = Parameter(np.ones(features)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(features)) if elementwise_affine and bias else None

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        _check_feature_axis(x, self.features, "LayerNorm")
        return F.layer_norm(x, self.weight, self.bias, self.eps)

    def __repr__(self) -> str:
        return f"LayerNorm({self.features}, eps={self.eps})"


class Dropout(Module):
    """Inverted dropout with probability ``p`` in training mode; identity in eval mode."""

    def __init__(self, p: float = 0.5, *, rng: np.random.Generator):
        if not 0.0 <= F._real(p, "Dropout", "p") <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)
        self.rng = _check_generator(rng, "Dropout")

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return F.dropout(x, self.p, self.rng, training=self.training)

    def __repr__(self) -> str:
        return f"Dropout(p={self.p})"


class GELU(Module):
    """GELU, tanh approximation (see ``functional.gelu``)."""

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return F.gelu(x)


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Tensor | ArrayLike) -> Tensor:
        return F.relu(x)


class Sequential(Module):
    """Apply modules in order; their parameters are named ``0.weight``, ``1.bias``, ... as in torch."""

    def __init__(self, *modules: Module):
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise TypeError(f"Sequential: argument {i} is a {type(module).__name__}, not a Module")
        self.layers = list(modules)

    def named_children(self) -> Iterator[tuple[str, "Module | Parameter"]]:
        """The layers, named ``0``, ``1``, ...; then any other module or parameter set as an attribute,
        by its name, as `Module` finds them (so that ``parameters()``, ``state_dict()`` and ``eval()``
        reach them too)."""
        for i, module in enumerate(self.layers):
            yield str(i), module
        for name, value in super().named_children():
            if not name.startswith("layers."):
                yield name, value

    def __getitem__(self, i: int | slice) -> Module:
        """The layer at ``i``; a slice is a Sequential of those layers (the same objects, renumbered
        from 0 in its ``state_dict``, where torch's keeps their numbers)."""
        if isinstance(i, slice):
            return Sequential(*self.layers[i])
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def forward(self, x: Any) -> Any:
        for module in self.layers:
            x = module(x)
        return x
