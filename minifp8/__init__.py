"""minifp8: a pure-NumPy educational reference implementation of FP8 training.

The codec (``minifp8.encode``/``decode``/``quantize``) and the format catalogue
(``minifp8.formats``) are the bit-exact oracle; see the tutorials site for the tour.
"""
from . import formats
from .codec import decode, encode, quantize
from .formats import FloatFormat

__version__ = "0.3.3"

__all__ = ["FloatFormat", "decode", "encode", "formats", "quantize", "__version__"]
