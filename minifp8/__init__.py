"""minifp8: a pure-NumPy educational reference implementation of FP8 training.

The codec (``minifp8.encode``/``decode``/``quantize``) and the format catalogue
(``minifp8.formats``) are the bit-exact oracle; see the tutorials site for the tour.
Every other module is an attribute too (``minifp8.gemm.compare_matmul``), imported on first use.
"""
import importlib as _importlib
from typing import TYPE_CHECKING

from . import formats
from .codec import decode, encode, quantize
from .formats import FloatFormat

__version__ = "0.3.3"

__all__ = ["FloatFormat", "decode", "encode", "formats", "quantize", "__version__"]

#: The modules that ``minifp8.<name>`` imports on first use.
_MODULES = frozenset({"autograd", "bench", "codec", "data", "explain", "fastcast", "fp8", "fp8lm", "functional",
                      "gemm", "golden", "model", "mx", "nn", "optim", "plots", "scaling", "testing", "train_tiny",
                      "unit", "uu"})

if TYPE_CHECKING:  # (type checkers see the modules themselves, so minifp8.gemm.compare_matmul keeps its types)
    from . import (autograd, bench, codec, data, explain, fastcast, fp8, fp8lm, functional, gemm, golden, model, mx,
                   nn, optim, plots, scaling, testing, train_tiny, unit, uu)
else:
    def __getattr__(name: str):
        """``minifp8.gemm`` (any module) after a bare ``import minifp8``, imported on first use (PEP 562),
        so that ``import minifp8`` itself loads the codec alone."""
        if name in _MODULES:
            return _importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*globals(), *_MODULES})
