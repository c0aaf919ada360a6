"""Test helpers, for our own tests and for other backends that use minifp8 as their oracle.

Sections:

* ``gradcheck``: the autograd engine's analytic gradients against float64 central differences.
  Returns a `GradcheckReport`, and raises ``AssertionError`` with it when the check fails (unless
  ``raise_on_failure=False``).
* The oracle for other backends. ``compare`` and ``compare_mx`` return a
  `Report` / `BlockReport` and never raise for a mismatch (check ``.ok``); ``assert_codes_equal``
  and ``assert_mx_equal`` return None and raise ``AssertionError`` with that report's table when
  anything differs. Every mismatch is explained: the input and its bits, the expected and actual
  code and value, the distance in codes and a class (tie, near-tie, overflow, subnormal, NaN/Inf,
  sign-of-zero, sign). ``sweep`` and ``edge_cases`` give the inputs that find bugs.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike

from . import codec, formats
from .formats import FloatFormat, _check_int, _described, _is_int, _plain_array
from .mx import MXFormat

# ================================================================================================
# gradcheck: analytic gradients of the autograd engine against float64 central differences
# ================================================================================================

from .autograd import Tensor, default_dtype, is_grad_enabled, no_grad  # noqa: E402  (this section's own imports)
from .functional import _real  # noqa: E402


@dataclass
class GradcheckInput:
    """The comparison for one input tensor of `gradcheck`.

    ``*_error`` are max over elements of ``|difference| / tolerance``: the check passes when
    both are <= 1. ``index`` is the worst element, with the values compared there.
    """

    name: str
    shape: tuple[int, ...]
    error: float          # float64 analytic vs central differences
    index: tuple[int, ...]
    analytic: float
    numeric: float
    float32_error: float  # float32 analytic vs float64 analytic
    float32_index: tuple[int, ...]
    float32_analytic: float
    float64_analytic: float

    @property
    def passed(self) -> bool:
        return self.error <= 1.0 and self.float32_error <= 1.0

    def describe(self, report: "GradcheckReport") -> str:
        lines = [f"{self.name} (shape {self.shape}): {'ok' if self.passed else 'FAILED'}"]
        lines.append(f"  float64 backward vs central differences: worst element {self.index}: "
                     f"analytic {self.analytic:.10g}, numeric {self.numeric:.10g}, "
                     f"|difference| {abs(self.analytic - self.numeric):.3g} = {self.error:.3g} x tolerance "
                     f"(atol {report.atol:g} + rtol {report.rtol:g} * |numeric|, eps {report.eps:g})")
        lines.append(f"  float32 backward vs float64 backward: worst element {self.float32_index}: "
                     f"float32 {self.float32_analytic:.8g}, float64 {self.float64_analytic:.10g}, "
                     f"{self.float32_error:.3g} x tolerance (float32_atol {report.float32_atol:g} * max|grad| "
                     f"+ float32_rtol {report.float32_rtol:g} * |grad|)")
        return "\n".join(lines)


@dataclass
class GradcheckReport:
    """What `gradcheck` compared: one `GradcheckInput` per input that requires grad."""

    inputs: list[GradcheckInput] = field(default_factory=list)
    eps: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    float32_atol: float = 0.0
    float32_rtol: float = 0.0

    @property
    def passed(self) -> bool:
        return all(entry.passed for entry in self.inputs)

    def __str__(self) -> str:
        return "gradcheck " + ("passed" if self.passed else "FAILED") + "\n" + "\n".join(
            entry.describe(self) for entry in self.inputs)


def gradcheck(fn: Callable, *inputs: Any, eps: float = 1e-6, atol: float = 1e-6, rtol: float = 1e-5,
              float32_atol: float = 1e-5, float32_rtol: float = 1e-4, seed: int = 271828,
              names: Sequence[str] | None = None, raise_on_failure: bool = True) -> GradcheckReport:
    """Check the backward of ``fn(*inputs)`` for every input Tensor that requires grad.

    ``fn`` returns a Tensor or a tuple/list of Tensors; they are reduced to the scalar
    ``L = sum_k sum(out_k * r_k)`` with fixed random ``r_k`` (from ``seed``), so every output
    element enters with its own weight. Two comparisons make the check strict:

    1. **Formulas.** The whole computation is re-run in float64 (the inputs' data is temporarily
       converted and ``fn`` runs inside ``autograd.default_dtype(np.float64)``, so tensors it
       creates are float64 too). Its analytic gradient must match central differences
       ``(L(x + eps e_i) - L(x - eps e_i)) / (2 eps)`` within ``atol + rtol * |numeric|`` for every
       element. In float64 the difference quotient is accurate to ~1e-9, so a wrong formula
       cannot hide behind float32 rounding.
    2. **Float32 engine.** The ordinary float32 run must return float32 outputs and gradients that
       agree with the float64 analytic gradient within
       ``float32_atol * max|grad| + float32_rtol * |grad|``, max|grad| over that input's own
       gradient (loss of precision shows here). So an input whose float64 gradient is exactly 0
       by cancellation (``(x * 3) / 3 - x``) must have an exactly-0 float32 gradient too: the
       residue of the cancelled terms has nothing of its own to be measured against; check such a
       function with inputs whose gradients do not cancel.

    Parameters captured by ``fn`` must be passed as inputs too (e.g. ``*module.parameters()``)
    to be checked; one that is not keeps the ``.grad`` of both runs' backward passes, summed. ``fn`` must be deterministic: create any ``np.random.Generator`` inside it.
    Inputs are restored (data and ``.grad``) afterwards. The default ``seed`` is deliberately
    not 0, so that the projection ``r`` is not the same stream as test data drawn with seed 0
    (a projection parallel to the data can make a gradient vanish by symmetry).

    Parameters
    ----------
    fn : callable
    *inputs
        ``fn``'s arguments; the Tensors among them that require grad are checked.
    eps : float
        The central-difference step, finite and > 0.
    atol, rtol, float32_atol, float32_rtol : float
        Tolerances, finite and >= 0.
    seed : int
        Seeds the projection ``r``: an int >= 0.
    names : list or tuple of str, optional
        One name per input, for the report.
    raise_on_failure : bool

    Returns
    -------
    GradcheckReport
        Raises ``AssertionError`` naming the input and its worst element on failure
        (unless ``raise_on_failure=False``), and ``RuntimeError`` inside `minifp8.autograd.no_grad`
        (``fn`` would record no graph).
    """
    if not callable(fn):
        raise TypeError(f"gradcheck: fn must be callable, got {type(fn).__name__} {fn!r}")
    if not is_grad_enabled():  # (no graph: every analytic gradient read 0, and the report blamed backward)
        raise RuntimeError("gradcheck: called inside no_grad(), where fn records no graph to differentiate; "
                           "call it outside")
    raise_on_failure = formats._check_bool(raise_on_failure, "gradcheck: raise_on_failure")
    seed = _check_int(seed, "gradcheck: seed", 0)
    for name, value in (("eps", eps), ("atol", atol), ("rtol", rtol), ("float32_atol", float32_atol),
                        ("float32_rtol", float32_rtol)):
        if not math.isfinite(_real(value, "gradcheck", name)) or value < 0 or (name == "eps" and value == 0):
            raise ValueError(f"gradcheck: {name} must be a finite number {'> 0' if name == 'eps' else '>= 0'}, "
                             f"got {value!r}")
    if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
        raise TypeError(f"gradcheck: names must be a list or tuple of str, one per input, got {names!r}")
    if names is not None and len(names) != len(inputs):
        raise ValueError(f"gradcheck: {len(names)} names for {len(inputs)} inputs")
    names = list(names) if names is not None else [f"input {i}" for i in range(len(inputs))]
    checked, seen = [], set()
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.requires_grad and id(x) not in seen:
            if not x.is_leaf:  # gradcheck writes its .data, which an op's output must keep for backward
                raise ValueError(f"gradcheck: {names[i]} is the output of op {x._op!r}, not a leaf: pass a leaf "
                                 "such as Tensor(y.data.copy(), requires_grad=True)")
            seen.add(id(x))
            checked.append((names[i], x))
    if not checked:
        raise ValueError("gradcheck: no input is a Tensor that requires grad")
    floating = list({id(x): x for x in inputs if isinstance(x, Tensor) and x.dtype.kind == "f"}.values())
    saved = [(x, x.data, x.grad, x._version) for x in floating]
    report = GradcheckReport(eps=eps, atol=atol, rtol=rtol, float32_atol=float32_atol, float32_rtol=float32_rtol)
    try:
        # float32: the engine as used in training (whatever the caller's default_dtype)
        with default_dtype(np.float32):
            outputs = _outputs_in(np.float32, fn, inputs, floating,
                                  "from float32 inputs: some op promotes to another dtype")
            rng = np.random.default_rng(seed)
            weights = [rng.standard_normal(out.shape).astype(np.float32) for out in outputs]
            _backward_all(outputs, weights)
            grads32 = [_grad_of(x, np.float32) for _, x in checked]

        # float64: analytic gradient and central differences
        weights64 = [w.astype(np.float64) for w in weights]
        with default_dtype(np.float64):
            outputs = _outputs_in(np.float64, fn, inputs, floating, "in float64 mode: some op does not compute in "
                                  "its operands' dtype, so it cannot be checked strictly")
            _backward_all(outputs, weights64)
            grads64 = [_grad_of(x, np.float64) for _, x in checked]
            with no_grad():
                numerics = [_central_differences(fn, inputs, x, weights64, eps) for _, x in checked]

        for (name, x), g32, g64, numeric in zip(checked, grads32, grads64, numerics):
            report.inputs.append(_compare(name, x.shape, g32, g64, numeric, report))
    finally:
        for x, data, grad, version in saved:  # the same arrays, unwritten: graphs built before stay valid
            x._data, x.grad, x._version = data, grad, version
    if raise_on_failure and not report.passed:
        failed = ", ".join(entry.name for entry in report.inputs if not entry.passed)
        raise AssertionError(f"gradcheck failed for {failed}\n{report}")
    return report


def _outputs_in(dtype, fn: Callable, inputs: tuple, floating: list, promotes: str) -> list:
    """``fn``'s outputs with every floating input's data in ``dtype`` (and no ``.grad``); an
    AssertionError, ``promotes`` saying what it means, where an output has another dtype."""
    for x in floating:
        x.data, x.grad = np.array(x.data, dtype=dtype, order="C"), None
    outputs = _as_outputs(fn(*inputs))
    for out in outputs:
        if out.dtype != dtype:
            raise AssertionError(f"gradcheck: fn returned dtype {out.dtype} {promotes}")
    return outputs


def _as_outputs(result) -> list[Tensor]:
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    for out in outputs:
        if not isinstance(out, Tensor):
            raise TypeError(f"gradcheck: fn must return a Tensor or a tuple of Tensors, got {type(out).__name__}")
    floating = [out for out in outputs if out.dtype.kind == "f"]
    if not floating:  # nothing to differentiate: a check would compare zeros with zeros and pass
        raise ValueError(f"gradcheck: fn returned no floating-point Tensor, got "
                         f"{[str(out.dtype) for out in outputs] or 'an empty ' + type(result).__name__}")
    return floating


def _backward_all(outputs: list[Tensor], weights: list[np.ndarray]) -> None:
    for out, weight in zip(outputs, weights):
        if out.requires_grad:
            out.backward(weight)


def _grad_of(x: Tensor, dtype) -> np.ndarray:
    if x.grad is None:  # no path from this input to the outputs: the gradient is zero
        return np.zeros(x.shape, dtype=dtype)
    if x.grad.dtype != dtype or x.grad.shape != x.shape:
        raise AssertionError(f"gradcheck: gradient has dtype {x.grad.dtype} and shape {x.grad.shape}, "
                             f"expected {np.dtype(dtype)} and {x.shape}")
    return x.grad


def _loss(fn, inputs, weights64) -> float:
    outputs = _as_outputs(fn(*inputs))
    return float(sum(np.dot(out.data.reshape(-1).astype(np.float64), w.reshape(-1))
                     for out, w in zip(outputs, weights64)))


def _central_differences(fn, inputs, x: Tensor, weights64, eps: float) -> np.ndarray:
    flat = x.data.reshape(-1)  # x.data is our own contiguous float64 copy: this is a view
    numeric = np.empty(flat.size)
    for i in range(flat.size):
        original = flat[i]
        flat[i] = original + eps
        plus = _loss(fn, inputs, weights64)
        flat[i] = original - eps
        minus = _loss(fn, inputs, weights64)
        flat[i] = original
        numeric[i] = (plus - minus) / (2.0 * eps)
    return numeric.reshape(x.shape)


def _tolerance_ratio(difference: np.ndarray, tolerance) -> np.ndarray:
    """``difference / tolerance``, 0 where the difference is 0 (a zero tolerance too); a NaN
    difference stays NaN, which `_worst` takes as the worst."""
    with np.errstate(invalid="ignore"):
        return np.where(difference == 0, 0.0, difference / np.maximum(tolerance, np.finfo(np.float64).tiny))


def _compare(name, shape, g32, g64, numeric, report: GradcheckReport) -> GradcheckInput:
    ratio64 = _tolerance_ratio(np.abs(g64 - numeric), report.atol + report.rtol * np.abs(numeric))
    scale = float(np.abs(g64).max()) if g64.size else 0.0
    ratio32 = _tolerance_ratio(np.abs(g32.astype(np.float64) - g64),
                               report.float32_atol * scale + report.float32_rtol * np.abs(g64))
    worst64 = _worst(ratio64)
    worst32 = _worst(ratio32)
    return GradcheckInput(
        name=name, shape=tuple(shape),
        error=float(ratio64[worst64]) if g64.size else 0.0, index=worst64,
        analytic=float(g64[worst64]) if g64.size else 0.0, numeric=float(numeric[worst64]) if g64.size else 0.0,
        float32_error=float(ratio32[worst32]) if g64.size else 0.0, float32_index=worst32,
        float32_analytic=float(g32[worst32]) if g64.size else 0.0,
        float64_analytic=float(g64[worst32]) if g64.size else 0.0)


def _worst(ratio: np.ndarray) -> tuple[int, ...]:
    if ratio.size == 0:
        return ()
    # NaN counts as the worst possible
    flat = np.where(np.isnan(ratio), np.inf, ratio).reshape(-1)
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(flat)), ratio.shape))


# ---- end of gradcheck ---------------------------------------------------------------------------

# ================================================================================================
# The oracle for other backends: compare a backend's codes with ours and explain every mismatch.
# ================================================================================================
MISMATCH_CLASSES = ("NaN/Inf", "overflow", "sign-of-zero", "sign", "subnormal", "tie", "near-tie", "other")
NEAR_TIE_WINDOW = 2.0**-8  # a "near-tie" input lies within 1/256 of a quantum from a midpoint
_SLICE_ELEMENTS = 1 << 18  # big tensors: mismatches are classified (in float64) this many at a time


@dataclass(frozen=True)
class Mismatch:
    """One element where a backend's code differs from the oracle's.

    ``input`` and ``input_bits`` are the element as the backend was given it. ``distance`` is how
    many steps apart the two codes lie on the number line: 1 for neighbours (None when either is
    NaN). Block formats (`compare_mx`) also give ``scaled_input`` and ``scaled_bits``: the value
    the element encoder saw after block scaling (float64 for MX, float32 for NVFP4), which ``kind``
    describes.
    """

    index: tuple[int, ...]
    input: float
    input_bits: str
    expected_code: int
    expected_value: float
    actual_code: int
    actual_value: float
    distance: int | None
    kind: str
    scaled_input: float | None = None
    scaled_bits: str | None = None


@dataclass
class Report:
    """The result of `compare`: how many elements differ, and why.

    ``mismatches`` holds the first ``max_rows`` rows; ``count`` and ``by_class`` cover all of them.
    ``layout`` is a hint, or "": when the backend's codes are the expected ones rearranged (the
    last two axes swapped, pairs swapped (FP4 nibbles, or bytes across an endianness change), or
    any other order), every mismatch is a layout bug, not a rounding one;
    and, from `compare`, when every code is what `minifp8.encode` gives under another rule (another
    rounding, the other saturation, another format of the same width, the input rounded to a
    narrower float first, or the inputs times 2 or 1/2: an exponent bias off by one), which it
    names. Sorted inputs can make a rule look like codes shifted by one element: where both fit,
    the hint names both. Under ``nan="exact"``, where every code that differs is a NaN where another
    NaN is expected, some with another payload, the hint says so first and suggests ``nan="class"``.
    ``str(report)`` is a table for a failing test's message, with the hint under its first line.
    Its inputs print with the digits that give their bits back: ``repr`` (up to 17 significant
    digits) for float64, 9 significant digits for float32 and float16.
    """

    format_name: str
    options: dict[str, Any]
    total: int
    count: int
    by_class: dict[str, int]
    mismatches: list[Mismatch] = field(default_factory=list)
    nan: str = "exact"
    input_dtype: str = "float32"
    layout: str = ""
    # (the format itself, for its NaN's sign in the rows: a custom format's name may be one get does not know)
    fmt: FloatFormat | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.count == 0

    def head(self) -> str:
        """The first line: the format, the options (``nan="class"`` too), the count and the classes."""
        return f"{self.format_name} ({_options_text(self.options, self.nan)}): {self.summary('codes ')}"

    def summary(self, noun: str = "") -> str:
        """``"3 of 8 <noun>differ [overflow 1, tie 2]"``."""
        classes = ", ".join(f"{kind} {n}" for kind, n in self.by_class.items() if n)
        return f"{self.count} of {self.total} {noun}differ" + (f" [{classes}]" if classes else "")

    def __str__(self) -> str:
        if self.ok or not self.mismatches:  # (max_rows=0: the first line alone, with its counts)
            return "\n".join([self.head(), *([self.layout] if self.layout else [])])
        rows = self.mismatches
        columns = [("index", 12, [",".join(map(str, m.index)) or "()" for m in rows]),  # () for a 0-d x
                   ("input", 16, [_input_text(m.input, self.input_dtype) for m in rows]),
                   ("input bits", 20, [m.input_bits for m in rows])]
        if any(m.scaled_input is not None for m in rows):  # block formats
            columns += [("after scaling", 16, [repr(m.scaled_input) for m in rows]),
                        ("scaled bits", 20, [str(m.scaled_bits) for m in rows])]  # (str: set with scaled_input)
        columns += [("expected", 16, [_code_text(m.expected_code, m.expected_value, self.fmt) for m in rows]),
                    ("actual", 16, [_code_text(m.actual_code, m.actual_value, self.fmt) for m in rows]),
                    ("codes", 5, ["-" if m.distance is None else str(m.distance) for m in rows])]
        widths = [max([minimum] + [len(text) for text in texts]) for _, minimum, texts in columns]

        def line(cells, kind):
            return " ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)) + f"  {kind}"

        lines = [self.head(), *([self.layout] if self.layout else []), "",
                 line([name for name, _, _ in columns], "class")]
        lines += [line([texts[i] for _, _, texts in columns], m.kind) for i, m in enumerate(rows)]
        if self.count > len(rows):
            lines.append(f"... and {self.count - len(rows)} more")
        return "\n".join(lines)


def _options_text(options: dict, nan: str) -> str:
    """The options of a report's first line; ``nan`` is shown unless it is the default "exact"."""
    shown = {**options, **({"nan": nan} if nan != "exact" else {})}
    return ", ".join(f"{key}={value!r}" for key, value in shown.items()) or "defaults"


def _input_text(value: float, dtype_name: str) -> str:
    """An input as text that gives its bits back: repr for float64, 9 significant digits for narrower
    floats; a NaN with its sign (``-nan``), which decides the sign of the NaN code a format keeps."""
    if math.isnan(value):
        return _nan_text(value)
    return repr(value) if dtype_name == "float64" else f"{value:.9g}"


def _code_text(code: int, value: float, fmt=None) -> str:
    """A code and its value, a NaN with its sign: ``0x38 1``, ``0xff -nan``; FNUZ's one NaN, 0x80, has
    no sign (``fmt``'s nan_style says so), so ``nan`` (a review's find: it read ``-nan`` for +NaN inputs)."""
    if math.isnan(value):
        return f"{code:#04x} " + ("nan" if fmt is not None and fmt.nan_style == "negative_zero" else _nan_text(value))
    return f"{code:#04x} {value:.6g}"


def _nan_text(value: float) -> str:
    """``nan`` or ``-nan``: Python's formatting drops a NaN's sign."""
    return "-nan" if math.copysign(1.0, value) < 0 else "nan"


def compare(actual: ArrayLike, x: ArrayLike, fmt: str | FloatFormat, *, nan: str = "exact", max_rows: int = 20,
            **encode_options: Any) -> Report:
    """Compare a backend's encoding of ``x`` with `minifp8.encode` and classify each mismatch.

    Parameters
    ----------
    actual : array_like
        The backend's result, x's shape: uint8 codes (``torch_tensor.view(torch.uint8).numpy()``);
        or int8 bytes, or the ml_dtypes dtype of ``fmt`` (``float8_e4m3fn``, ...), read by
        ``.view(np.uint8)`` (a 1-byte float dtype of another or an unknown format is refused); or
        decoded values in float16/32/64, which must be values of ``fmt``. Wider integers are
        refused: convert codes with ``.astype(np.uint8)``.
    x : array_like
        The inputs the backend was given: float16, float32 or float64, or an ml_dtypes float
        (bfloat16, ``float8_*``, ``float6_*``, ``float4_*``), read as its float32 values (exact; the report is
        that for ``x.astype(np.float32)``). Integers are refused.
    fmt : FloatFormat or str
    nan : {"exact", "class"}
        ``"class"`` counts any NaN code as equal to any other NaN code (libraries differ in payloads).
        Decoded values carry no payload: each NaN among them becomes the format's NaN code with its
        sign, so with values ``"exact"`` compares the signs of NaNs only (pass codes for payloads).
    max_rows : int
        How many mismatches to keep for the printed table (an int >= 0).
    **encode_options
        ``rounding``, ``saturate``, ``random_bits``, ``random_bit_count`` as for `minifp8.encode`.

    Returns
    -------
    Report
        Never raises for a mismatch: check ``report.ok``, or call `assert_codes_equal`.
        Classes: ``NaN/Inf`` (the input is NaN or Inf, or one the format maps to NaN, such as
        0 and negative numbers in E8M0), ``sign-of-zero`` (zero expected, and the other zero back,
        or in FNUZ formats 0x80, the NaN a backend writes when it keeps the sign of -0.0), ``sign``
        (the expected code with its sign bit flipped, of a finite nonzero value: a lost or flipped
        sign), ``overflow`` (|x| >= max, or either code is non-finite), ``subnormal`` (|x| below the
        smallest normal), ``tie`` (x exactly halfway between neighbours and the backend picked the
        other neighbour), ``near-tie`` (within 1/256 of a quantum from halfway, other neighbour),
        ``other``. The first class that applies is given, in the order NaN/Inf, sign-of-zero, sign,
        flushed subnormal in a format without a zero (E8M0: NaN back for a float32 subnormal
        input, the NaN of the zero a flushing kernel made of it) or with one zero (FNUZ: 0x80 back for
        a negative subnormal input, the -0 a flushing kernel kept the sign of), overflow, flushed subnormal
        (actual zero), tie, near-tie, subnormal: so a subnormal tie
        rounded the wrong way is a tie, and a subnormal input that came back as zero is a subnormal:
        the tie between zero and the smallest subnormal, returned as zero, too, and so is a
        near-tie there (a float64 input just above it that a cast through float32 rounds to zero).
    """
    fmt = formats.get(fmt)
    if formats._check_str_choice(nan, "nan", ("exact", "class")) not in ("exact", "class"):
        raise ValueError(f"nan must be 'exact' or 'class', got {nan!r}")
    _check_max_rows(max_rows)
    _check_options(encode_options, codec.encode, "compare")
    x = _float_inputs(x)
    actual_codes = _codes_of(actual, fmt, x.shape)
    expected_codes = codec.encode(x, fmt, **encode_options)
    table = fmt.values()
    differ = actual_codes != expected_codes
    if nan == "class":
        is_nan_code = np.isnan(table)
        differ &= ~(is_nan_code[actual_codes] & is_nan_code[expected_codes])
    where = np.flatnonzero(differ)
    expected, got = _gather(expected_codes, where), _gather(actual_codes, where)
    classes = np.empty(where.size, np.uint8)  # a million mismatches (a layout bug) take a slice at a time
    for start in range(0, where.size, _SLICE_ELEMENTS):
        part = slice(start, start + _SLICE_ELEMENTS)
        with np.errstate(invalid="ignore"):  # a signalling NaN input (bfloat16's 0x7F81, ...) is quieted
            wide = _gather(x, where[part]).astype(np.float64)
        classes[part] = _classify(wide, expected[part], got[part], fmt)
    counts = np.bincount(classes, minlength=len(MISMATCH_CLASSES))
    by_class = {kind: int(count) for kind, count in zip(MISMATCH_CLASSES, counts)}
    rows = []
    inputs = _gather(x, where[:max_rows])
    bits = _bits_texts(inputs)
    for i in range(min(max_rows, len(where))):
        rows.append(Mismatch(
            index=tuple(int(v) for v in np.unravel_index(where[i], x.shape)) if x.ndim else (),
            input=float(inputs[i]), input_bits=bits[i],
            expected_code=int(expected[i]), expected_value=float(table[expected[i]]),
            actual_code=int(got[i]), actual_value=float(table[got[i]]),
            distance=_code_distance(int(expected[i]), int(got[i]), fmt), kind=MISMATCH_CLASSES[classes[i]]))
    options = {key: value for key, value in encode_options.items() if key != "random_bits"}
    layout_actual, layout_expected = actual_codes, expected_codes
    if nan == "class" and len(where) > 1:  # (NaN codes alike, as the comparison takes them: one code for all)
        nan_codes = np.isnan(table)
        canonical = int(np.flatnonzero(nan_codes)[0]) if nan_codes.any() else 0
        layout_actual, layout_expected = (np.where(nan_codes[codes], canonical, codes).astype(np.uint8)
                                          for codes in (actual_codes, expected_codes))
    layout = _layout_note(layout_actual, layout_expected, "actual", fmt, where) if len(where) > 1 else ""
    if where.size and (not layout or layout.endswith((_SHIFT_VERDICT, _PER_CODE_VERDICT))):
        # A monotone rounding bug on sorted inputs (an arange sweep) can look like a shift too: where a
        # rule also explains every code, both are named (the rule first, where a per-code bug fits too).
        rule = _rule_note(actual_codes, x, fmt, where, nan, encode_options)
        if rule and layout.endswith(_PER_CODE_VERDICT):
            layout = f"{rule}; or {layout}"
        elif rule and layout:
            layout = (f"{layout[:-len(_SHIFT_VERDICT)]} (an off-by-one offset); or {rule}; these inputs cannot tell "
                      f"an offset from a rule apart (shuffled inputs can)")
        elif rule:
            layout = rule
    payloads = _nan_payload_note(expected, got, fmt) if nan == "exact" else ""
    if payloads:  # (first: the likeliest reading of NaNs that differ, and another hint after it)
        layout = payloads + (f"; or {layout}" if layout else "")
    return Report(fmt.name, options, int(x.size), int(len(where)), by_class, rows, nan, x.dtype.name, layout, fmt)


def _nan_payload_note(expected: np.ndarray, actual: np.ndarray, fmt) -> str:
    """`compare`'s hint, under ``nan="exact"``, where every code that differs (``expected`` and ``actual``,
    one per mismatch) is a NaN where another NaN is expected, and some differ in the payload, not the
    sign alone (a lost NaN sign may be a sign bug: its rows show it), else ""."""
    nan_codes = np.isnan(fmt.values())
    if not expected.size or not (nan_codes[expected] & nan_codes[actual]).all():
        return ""
    sign = np.uint8(fmt.sign_mask)
    if not ((expected ^ actual) & ~sign).any():  # (the signs alone differ)
        return ""
    signs = bool(((expected ^ actual) & sign).any())
    return (f"every code that differs is a NaN where another NaN is expected (another payload"
            f"{' or sign' if signs else ''}): pass nan='class' if NaN payloads{' and signs' if signs else ''} are "
            f"not part of the contract")


def _gather(array: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``array.reshape(-1)[positions]`` (C-order positions) without copying a non-C-contiguous array
    whole (a transposed x, or the codes `encode` lays out as x is): only the elements asked for."""
    if array.flags.c_contiguous:
        return array.reshape(-1)[positions]
    return array[np.unravel_index(positions, array.shape)]


_SHIFT_VERDICT = ": an off-by-one offset, not a rounding bug"  # (the end of `_layout_note`'s shift hint)


def _layout_note(actual: np.ndarray, expected: np.ndarray, name: str, fmt, where: np.ndarray | None = None) -> str:
    """A hint when the codes ``actual`` (which differ from ``expected``) are ``expected``'s rearranged, else "".

    Codes that differ only in sign (both zeros, NaN signs, a negated symmetric sweep) hold the same
    codes too, but point at a sign bug: they get no hint. ``where``, the C-order positions of the
    differing codes where the caller has them, rules a shift out without flattening whole arrays.
    Where each expected code also became one same code wherever it occurs (inputs that hold each
    code once, such as ``decode(np.arange(256))``), a bug that maps codes to codes (a wrong bit
    field, a code one too high) gives the same arrays, and the hint names both.
    """
    rearrangement = _rearrangement(actual, expected, fmt, where)
    if not rearrangement:
        return ""
    description, verdict = rearrangement
    if _codes_map_one_to_one(actual, expected):
        return f"{name} holds the expected codes {description}; or {_PER_CODE_VERDICT}"
    return f"{name} holds the expected codes {description}: {verdict}"


# (the end of `_layout_note`'s hint where each expected code also became one other code)
_PER_CODE_VERDICT = ("each expected code became one other code wherever it occurs (a bug that builds codes wrongly, "
                     "such as a misplaced bit field or a code one too high): these inputs cannot tell them apart "
                     "(inputs that repeat each value, in shuffled order, can)")


def _codes_map_one_to_one(actual: np.ndarray, expected: np.ndarray) -> bool:
    """True when ``actual`` is a function of ``expected`` (each expected code meets one actual code)."""
    pairs = expected.reshape(-1).astype(np.int64) * 256 + actual.reshape(-1)
    met = np.bincount(pairs, minlength=256 * 256).reshape(256, 256) > 0
    return bool((met.sum(axis=1) <= 1).all())


def _rearrangement(actual: np.ndarray, expected: np.ndarray, fmt, where: np.ndarray | None) -> tuple[str, str] | None:
    """How ``actual`` holds ``expected``'s codes rearranged, and what that points at, or None."""
    if actual.ndim >= 2 and np.array_equal(actual, np.swapaxes(expected, -1, -2).reshape(actual.shape)):
        return ("with the last two axes swapped (a transposed or column-major result)",
                "a layout bug, not a rounding one")
    for step, direction in ((1, "later"), (-1, "earlier")):  # actual[i] == expected[i - step], C order
        if where is not None:  # a shift must hold at the differing codes first (only they are read)
            sample = where[:64]
            sample = sample[(sample - step >= 0) & (sample - step < actual.size)]
            if not sample.size or not np.array_equal(_gather(actual, sample), _gather(expected, sample - step)):
                continue
        got, want = actual.reshape(-1), expected.reshape(-1)
        shifted = np.array_equal(got[1:], want[:-1]) if step == 1 else np.array_equal(got[:-1], want[1:])
        if got.size > 2 and shifted:
            return f"shifted by one element, each one place {direction} in C order", _SHIFT_VERDICT[2:]
    if fmt.bits == 4 and actual.ndim >= 1 and actual.shape[-1] >= 2:  # FP4: two codes a byte when packed
        pairs = actual.shape[-1] // 2 * 2
        if (np.array_equal(actual[..., 0:pairs:2], expected[..., 1:pairs:2])
                and np.array_equal(actual[..., 1:pairs:2], expected[..., 0:pairs:2])):
            lost = (", and the last code of each odd-length row lost to the padding nibble"
                    if pairs < actual.shape[-1] and not np.array_equal(actual[..., -1], expected[..., -1]) else "")
            return (f"with each pair along the last axis swapped{lost}",
                    "the two nibbles of each packed byte read in the other order (mx.MXArray.packed puts the first "
                    "code in the low nibble), a layout bug, not a rounding one")
    if fmt.bits == 8 and actual.size >= 8:  # bytes moved as 16- or 32-bit words (2 swapped codes: "another order")
        for group, word in ((2, "16"), (4, "32")):
            if actual.size % group == 0 and np.array_equal(
                    actual.reshape(-1, group), expected.reshape(-1, group)[:, ::-1]):
                return ("with each pair of codes (C order) swapped" if group == 2 else
                        "with each 4 consecutive codes (C order) in reverse order",
                        f"the bytes of {word}-bit words in the other byte order (codes copied or viewed as "
                        f"uint{word} across an endianness change), a layout bug, not a rounding one")
    magnitude = np.uint8(~np.uint8(fmt.sign_mask))
    if (np.any((actual & magnitude) != (expected & magnitude))
            and np.array_equal(np.bincount(actual.reshape(-1), minlength=256),
                               np.bincount(expected.reshape(-1), minlength=256))):
        return "in another order", "look for a layout bug (order, strides, indexing) before a rounding one"
    return None


def _through_bfloat16(x: np.ndarray, significant_bits: int = 8) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 (nearest even, overflow to Inf; a NaN kept), as float32: its
    low 16 bits rounded off in the bits (bfloat16 is float32's top half). Another ``significant_bits``
    keeps that many (TF32: 11), with that type's subnormal spacing below float32's normals."""
    dropped = 24 - significant_bits
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (((bits + ((1 << (dropped - 1)) - 1) + ((bits >> dropped) & 1)) >> dropped) << dropped)
    return np.where(np.isnan(x), x, rounded.astype(np.uint32).view(np.float32))


def _rule_note(actual: np.ndarray, x: np.ndarray, fmt, where: np.ndarray, nan: str, options: dict) -> str:
    """A hint when ``actual`` (which differs from `encode` at C-order positions ``where``) is, at
    every element, what `encode` gives under another rule, else "". Each rule is tried on the first
    differing elements, and only one that holds there on the whole array. Where several hold (the
    inputs cannot tell them apart: a vector whose only mismatches overflow fits both clamping and
    rounding toward zero), the hint names them all, the likeliest first."""
    rounding, saturate = options.get("rounding", "nearest_even"), options.get("saturate", False)
    if rounding == "stochastic":  # (another rule would need other random bits)
        return ""
    nan_codes = np.isnan(fmt.values())

    def same(got: np.ndarray, want: np.ndarray) -> bool:
        equal = got == want
        if nan == "class":
            equal |= nan_codes[got] & nan_codes[want]
        return bool(equal.all())

    with np.errstate(invalid="ignore"):  # (exact; a signalling NaN input is quieted; times 2 or 1/2 stays exact)
        wide = x.astype(np.float64)
    # (the options changed, the format, what becomes of x (None: x as it is) and how the call shows it,
    # what it would mean), the likeliest first: a clamping cast (satfinite), another format's codes
    # (FNUZ on ROCm), a double rounding through a 16-bit type, another rounding, an exponent off by one
    candidates: list[tuple[dict[str, Any], FloatFormat, Callable[[np.ndarray], np.ndarray] | None, str, str]] = [
        ({"saturate": not saturate}, fmt, None, "x", "the backend clamps overflow to +-max" if not saturate
         else "the backend overflows to Inf or NaN instead of clamping to +-max")]
    holds_nan = bool(np.isnan(wide).any())  # (a format without NaN cannot encode x: E3M2 beside a custom FP6)
    candidates += [({}, other, None, "x", f"the backend wrote {other.name} codes, not {fmt.name}")
                   for other in formats.CATALOGUE.values()
                   if other.bits == fmt.bits and other.name != fmt.name and (other.has_nan or not holds_nan)]
    if x.dtype == np.float64:  # (DESIGN section 3: the double rounding a float64 input must not get)
        candidates += [({}, fmt, lambda v: v.astype(np.float32), "x.astype(float32)",
                        "the backend rounds x to float32 first (a double rounding)")]
    if x.dtype == np.float32:  # (a float32 input through a narrower type, rounded to nearest even)
        candidates += [({}, fmt, lambda v: v.astype(np.float32).astype(np.float16), "x.astype(float16)",
                        "the backend rounds x to float16 first (a double rounding)"),
                       ({}, fmt, lambda v: _through_bfloat16(v.astype(np.float32)), "x.astype(bfloat16)",
                        "the backend rounds x to bfloat16 first (a double rounding)")]
    candidates += [({"rounding": other}, fmt, None, "x",
                    f"the backend rounds {other.replace('_', ' ')}, not {rounding.replace('_', ' ')}")
                   for other in codec.ROUNDING_MODES if other not in (rounding, "stochastic")]
    # (a review's find: a bit-level truncation, rounding toward zero that overflows to Inf or NaN from max
    # plus one spacing up, matched no rule: toward_zero clamps; tried where some input lies there, since
    # below it the rule is toward_zero's)
    beyond = fmt.max + 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.mantissa_bits)
    if (fmt.has_infinity or fmt.has_nan) and bool((np.isfinite(wide) & (np.abs(wide) >= beyond)).any()):
        spelled = str(int(beyond)) if beyond < 2**53 else repr(beyond)  # (exact: the call reproduces actual)
        candidates.append(({"rounding": "toward_zero", "saturate": False}, fmt,
                           lambda v: np.where(np.abs(v) >= beyond, v * np.inf, v),
                           f"np.where(abs(x) >= {spelled}, x * np.inf, x)",
                           f"the backend truncates (rounds toward zero) and, as a cut of the bits does, overflows "
                           f"to {'Inf' if fmt.has_infinity else 'NaN'} from {spelled} up"))

    def times(factor: float) -> Callable[[np.ndarray], np.ndarray]:
        return lambda v: v * factor

    candidates += [({}, fmt, times(factor), f"x * {factor:g}", f"every exponent is one "
                    f"{direction} (an exponent bias off by one, or inputs scaled by {factor:g})")
                   for factor, direction in ((2.0, "too large"), (0.5, "too small"))]
    sample = where[:4096]
    inputs = _gather(wide, sample)
    held = []
    for change, other, transform, arguments, meaning in candidates:
        rule = {**options, **change}
        with np.errstate(all="ignore"):  # (x * 2 may overflow, x in float16 underflow: both as intended)
            if not same(_gather(actual, sample), codec.encode(inputs if transform is None else transform(inputs),
                                                              other, **rule)):
                continue
            if not same(actual, codec.encode(x if transform is None else transform(wide), other, **rule)):
                continue
        # (every option of the rule that held, the caller's too: the call shown reproduces actual)
        shown = ", ".join([f"'{other.name}'"] + [f"{k}={v!r}" for k, v in rule.items()])
        held.append((f"encode({arguments}, {shown})", meaning))
    if not held:
        return ""
    (call, meaning), others = held[0], held[1:]
    also = "".join(f"; {other_call} too: {other_meaning}" for other_call, other_meaning in others)
    return (f"actual equals {call} at every element: {meaning}{also}"
            + ("; these inputs cannot tell the rules apart" if others else ""))


def _block_rule_note(scales: np.ndarray, codes: np.ndarray, x: np.ndarray, elem, options: dict,
                     expected_scales: np.ndarray, cause: tuple[str, str] = ("", "")) -> tuple[str, bool]:
    """A hint when a backend's MX scales and codes (which differ from `mx.quantize`'s, whose scales are
    ``expected_scales``) are, in every block, what `mx.quantize` gives under another scale mode or
    rounding, else "". The codes of a block whose scale is NaN under either rule are don't-care, as in
    the comparison (the blocks whose expected scale is NaN have had their codes set to 0 by `compare_mx`).
    ``cause``: a bug `_one_code_cause` found to give the scales that differ, and the rows of
    `minifp8.golden.mx_inputs` that tell it from a scale mode; where the rule changes the scale mode
    alone, that bug gives the same scales and codes, and the hint names both. Also returns whether it
    named ``cause``."""
    from . import mx

    unread = expected_scales == mx.E8M0_NAN
    mode, rounding = options.get("scale_mode", "floor"), options.get("rounding", "nearest_even")
    if rounding == "stochastic":  # (another rule would need other random bits)
        return "", False

    def fitting(other_mode: str, other_rounding: str):
        """`mx.quantize` under that rule, where it gives the backend's scales and codes, else None."""
        result = mx.quantize(x, elem, **{**options, "scale_mode": other_mode, "rounding": other_rounding})
        if not np.array_equal(scales, result.scales):
            return None
        nan_blocks = result.scales == mx.E8M0_NAN
        blocks, _ = mx._to_blocks(codes, result.axis, result.block_size)
        want, _ = mx._to_blocks(result.codes, result.axis, result.block_size)
        cared = ~np.moveaxis(nan_blocks | unread, result.axis, -1).reshape(-1)
        return result if np.array_equal(blocks[cared], want[cared]) else None

    # the rules that change one option before those that change both (a review's find: a backend that
    # rounds toward zero under the declared rceil was said to use even and toward_zero, which fit too)
    rules = sorted(((m, r) for m in mx.SCALE_MODES for r in codec.ROUNDING_MODES
                    if r != "stochastic" and (m, r) != (mode, rounding)),
                   key=lambda pair: (pair[0] != mode) + (pair[1] != rounding))
    for other_mode, other_rounding in rules:
        rule = {**options, "scale_mode": other_mode, "rounding": other_rounding}
        result = fitting(other_mode, other_rounding)
        if result is None:
            continue
        nan_blocks = result.scales == mx.E8M0_NAN
        changes = [f"{name}={value!r}" for name, value, given in (
            ("scale_mode", other_mode, mode), ("rounding", other_rounding, rounding)) if value != given]
        if other_mode != mode:  # (the later scale modes that fit as well: a review found rceil fitting as even)
            alike = [m for m in mx.SCALE_MODES[mx.SCALE_MODES.index(other_mode) + 1:]
                     if m != mode and fitting(m, other_rounding) is not None]
            if alike:
                changes[0] += f" (or {' or '.join(repr(m) for m in alike)}, alike on these inputs)"
        shown = ", ".join([f"'{getattr(elem, 'name', elem)}'"] + [f"{k}={v!r}" for k, v in rule.items()])
        # (a review's find: on random data ceil is floor + 1 in every block, so a backend whose shared
        # exponent is one too large was said to use ceil)
        read = ~unread & ~nan_blocks
        shift = np.unique(scales[read].astype(np.int64) - expected_scales[read].astype(np.int64))
        caveat = "" if shift.size != 1 or not shift[0] else (
            f", or every scale {int(shift[0]):+d} (below): these inputs cannot tell them apart "
            f"(golden.mx_inputs' boundary rows can)")
        named = bool(cause[0]) and other_rounding == rounding  # (the bug computes the codes as the rule)
        if named:
            caveat += f"; or {cause[0]}; these inputs cannot tell them apart (golden.mx_inputs' {cause[1]} can)"
        return (f"scales and codes equal mx.quantize(x, {shown}) in every block: the backend uses "
                f"{' and '.join(changes)}{caveat}"), named
    return "", False


def _float32_subnormals(values: np.ndarray) -> np.ndarray:
    """Where ``values`` (of any float dtype) are nonzero and below float32's smallest normal, 2**-126:
    the inputs a kernel that flushes float32 subnormals (DAZ) reads as zero."""
    with np.errstate(invalid="ignore"):  # (NaN is none)
        magnitude = np.abs(values)
        return (magnitude > 0) & (magnitude < np.finfo(np.float32).tiny)


def _flushed_subnormals(x: np.ndarray, scales: np.ndarray, codes: np.ndarray,
                        quantize: Callable[[np.ndarray], Any]) -> bool:
    """Whether ``x`` holds nonzero float32 subnormals (|x| < 2**-126, float64 inputs too) and ``quantize``
    (`compare_mx`'s) of x with them flushed to zero, their signs kept, gives the backend's ``scales`` and
    ``codes`` (those of MX's NaN-scale blocks already set to 0, as `mx.quantize` writes them)."""
    subnormal = _float32_subnormals(x)
    if not subnormal.any():
        return False
    flushed = quantize(np.where(subnormal, np.copysign(np.zeros((), x.dtype), x), x))
    return np.array_equal(flushed.scales, scales) and np.array_equal(flushed.codes, codes)


def _flushed_results(expected_codes: np.ndarray, element_format, scales: np.ndarray, expected_scales: np.ndarray,
                     codes: np.ndarray) -> bool:
    """Whether the backend's ``scales`` are the expected ones and its ``codes`` the expected codes with
    every subnormal element value flushed to a zero of its sign (+0 in a format without -0): an element
    cast without subnormal results, which the flush of `_flushed_subnormals` can look like."""
    if not np.array_equal(scales, expected_scales):
        return False
    table = element_format.values()
    with np.errstate(invalid="ignore"):
        subnormal = (table != 0) & (np.abs(table) < element_format.min_normal)
    sign = 0 if element_format.nan_style == "negative_zero" else element_format.sign_mask
    zeros = expected_codes & np.asarray(sign, expected_codes.dtype)
    return np.array_equal(np.where(subnormal[expected_codes], zeros, expected_codes), codes)


def _one_code_cause(step: int, differs: np.ndarray, scales: np.ndarray, expected_scales: np.ndarray,
                    amax: np.ndarray, blocks: np.ndarray, per_block: Callable[[np.ndarray], np.ndarray], elem,
                    scale_mode: str) -> tuple[str, str]:
    """The cause of MX scales one E8M0 code off (``step`` +1 or -1) in some blocks, where one is
    checked to give every such block's scale, and the rows of `minifp8.golden.mx_inputs` that tell it
    from a scale mode; else ("", "") (a cause is never a guess). ``scales``: the backend's;
    ``blocks``: x's blocks as rows; ``per_block`` lays a value per row out as the scales.

    - -1: the block amax is max(x), not max(|x|) (`_signed_amax_cause`);
    - +1, every expected scale code 0 (2^-127): the scale kept a normal float32, 2^-126 (a clamp,
      as torchao's, or ``exp2f`` under flush-to-zero);
    - +1 under ``floor``: amax just below a power of two, whose float32 ``log2`` rounds up to it;
    - -1 under ``ceil``: amax just above a power of two, whose float32 ``log2`` rounds down to it;
    - -1 under ``floor``: the block's second largest magnitude, taken as its amax, gives the scale
      (one fit among others: an amax over part of the block, or one that skipped an element).
    """
    from . import mx

    signed = _signed_amax_cause(differs, scales, amax, blocks, per_block, elem, scale_mode) if step == -1 else ("", "")
    if signed[0]:
        return signed
    if step == 1 and (expected_scales[differs] == 0).all():
        return ("the scale kept at 2^-126, float32's smallest normal, where it should be 2^-127: a clamp, "
                "or exp2f under flush-to-zero"), "rows of scale 2**-127"
    block_amax = amax[differs].astype(np.float64)
    if not (np.isfinite(block_amax) & (block_amax > 0)).all():
        return "", ""
    exponent = np.frexp(block_amax)[1] - 1  # floor(log2(amax)), exactly
    power_of_two = block_amax == np.ldexp(1.0, exponent)
    with np.errstate(all="ignore"):
        float32_log2 = np.log2(block_amax.astype(np.float32)).astype(np.float64)
    if step == 1 and scale_mode == "floor" and (~power_of_two & (float32_log2 == exponent + 1)).all():
        return ("each block's amax lies just below a power of two, and its float32 log2 rounds up to it",
                "boundary rows")
    if step == -1 and scale_mode == "ceil" and (~power_of_two & (float32_log2 == exponent)).all():
        return ("each block's amax lies just above a power of two, and its float32 log2 rounds down to it",
                "boundary rows")
    if step == -1 and scale_mode == "floor" and blocks.shape[1] > 1:
        with np.errstate(invalid="ignore"):
            second = per_block(np.partition(np.abs(blocks), -2, axis=1)[:, -2])
        codes, _ = mx.shared_exponents(second[differs], elem, scale_mode)
        if np.array_equal(codes.astype(np.int64), expected_scales[differs].astype(np.int64) + step):
            return ("each block's second largest magnitude, taken as its amax, gives that scale: the amax may "
                    "miss the block's largest element, as one over part of the block would"), "boundary rows"
    return "", ""


def _signed_amax_cause(differs: np.ndarray, scales: np.ndarray, amax: np.ndarray, blocks: np.ndarray,
                       per_block: Callable[[np.ndarray], np.ndarray], elem, scale_mode: str) -> tuple[str, str]:
    """Where a backend's MX scales (``scales``; ``differs`` where they differ from the expected ones)
    are those of each block's max(x), not max |x| (``amax``), the cause and the rows of
    `minifp8.golden.mx_inputs` that tell it from a scale mode, as `_one_code_cause` gives them; else
    ("", ""). Checked: the largest magnitude of every block that differs is a negative element alone,
    and the shared exponent of max(x) is the backend's scale in every block whose max(x) is finite
    and >= 0 (of a block of negative numbers, a kernel's log2 is anyone's guess). ``blocks`` and
    ``per_block`` as in `_one_code_cause`."""
    from . import mx

    with np.errstate(invalid="ignore"):  # (a NaN in a block)
        top, bottom = per_block(np.max(blocks, axis=1)), per_block(np.min(blocks, axis=1))
        taken = np.isfinite(top) & (top >= 0)
        negative = (-bottom == amax) & (top < amax)  # (the largest magnitude is a negative element alone)
    if not (taken & negative)[differs].all():
        return "", ""
    codes, _ = mx.shared_exponents(top[taken], elem, scale_mode)
    if not np.array_equal(codes, scales[taken]):
        return "", ""
    return "the block amax is max(x), not max(|x|): a negative element was the largest", "boundary rows"


# Other float32 orders of NVFP4's block scale (step 4 of `minifp8.mx.quantize_nvfp4`, before its E4M3
# cast) that kernels write, each checked against every scale and code of a backend's result.
_NVFP4_BLOCK_SCALE_ORDERS: dict[str, Callable[[np.ndarray, np.float32], np.ndarray]] = {
    "block_amax / 6 * S_enc": lambda amax, encode: amax / np.float32(6) * encode,  # earlier TransformerEngine
    "block_amax * (S_enc / 6)": lambda amax, encode: amax * (encode / np.float32(6)),
    "block_amax * S_enc / 6": lambda amax, encode: amax * encode / np.float32(6),
}


def _orders_named(fits: list[str]) -> str:
    """The float32 orders of NVFP4's arithmetic that fit a backend's result, for a note."""
    return " or ".join(fits) + " in float32" + (" (these inputs cannot tell those orders apart)" if len(fits) > 1
                                                 else "")


def _nvfp4_order_note(scales: np.ndarray, codes: np.ndarray, x: np.ndarray, expected) -> str:
    """Where the backend's NVFP4 scales and codes are those of another float32 order of the block
    scale (`_NVFP4_BLOCK_SCALE_ORDERS`), that order, else ""."""
    from . import mx

    array = codec._to_float32(x)
    fits = []
    for order, block_scale in _NVFP4_BLOCK_SCALE_ORDERS.items():
        other = mx._nvfp4_of(array, expected.axis, expected.global_amax, block_scale)
        if np.array_equal(other.scales, scales) and np.array_equal(other.codes, codes):
            fits.append(f"e4m3({order})")
    if not fits:
        return ""
    return (f"scales and codes equal NVFP4's with the block scale {_orders_named(fits)}: the "
            f"backend rounds step 4 in another order than TransformerEngine's current e4m3(block_amax * (S_enc * "
            f"float32(1/6))), which minifp8 follows (earlier TransformerEngine code computes block_amax / 6 * S_enc)")


# Steps 5-6 of NVFP4 (each element times the inverse of its block's dequantisation scale, clipped to
# +-6) in other float32 orders, as (x, s_block, S_enc, S_dec, global_amax) -> the value E2M1 encodes.
# minifp8 follows TransformerEngine: x * min(1 / (s_block * S_dec), FLT_MAX).
_NVFP4_ELEMENT_ORDERS: dict[str, Callable[..., np.ndarray]] = {
    "x / (s_block * S_dec)": lambda x, block, encode, decode, amax: x / (block * decode),
    "x / (s_block * (global_amax / 2688))": lambda x, block, encode, decode, amax:  # torchao's nvfp4_quantize
        x / (block * (amax / np.float32(2688))),
    "x * (S_enc / s_block)": lambda x, block, encode, decode, amax: x * (encode / block),
    "x * S_enc / s_block": lambda x, block, encode, decode, amax: x * encode / block,
}


def _nvfp4_element_order_note(codes: np.ndarray, x: np.ndarray, block_scales: np.ndarray, where: np.ndarray,
                              expected) -> str:
    """Where the backend's NVFP4 element codes at the C-order positions ``where`` (the elements of blocks
    whose scale agrees; ``block_scales`` their blocks' E4M3 scale values) are those of another float32
    order of steps 5-6 (`_NVFP4_ELEMENT_ORDERS`), that order, else "". Blocks of scale 0 are skipped
    (their codes are unread)."""
    read = block_scales > 0
    where, block_scales = where[read], block_scales[read].astype(np.float32)
    got = codes.reshape(-1)[where]
    if np.array_equal(got, expected.codes.reshape(-1)[where]):
        return ""
    inputs = codec._to_float32(x).reshape(-1)[where]
    encode = np.float32(expected.encode_scale)
    fits = []
    for order, scaled in _NVFP4_ELEMENT_ORDERS.items():
        with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
            values = np.clip(scaled(inputs, block_scales, encode, np.float32(1) / encode,
                                    np.float32(expected.global_amax)), -6, 6).astype(np.float32)
        if not np.isnan(values).any() and np.array_equal(codec.encode(values, formats.E2M1), got):
            fits.append(f"e2m1({order})")
    if not fits:
        return ""
    return (f"the element codes equal NVFP4's with each element scaled as {_orders_named(fits)}, clipped to "
            f"+-6: the backend scales the elements (steps 5-6) in another order than "
            f"TransformerEngine's x * min(1 / (s_block * S_dec), FLT_MAX), which minifp8 follows")


def _implied_amax_note(scales: np.ndarray, scale_table: np.ndarray, amax: np.ndarray, scale_differs: np.ndarray,
                       expected) -> str:
    """For NVFP4 block scales that mostly differ: the tensor amax they imply, where it is far from the
    one minifp8 used (a backend that took another tensor's amax, a stale one, or skipped a reduction
    across devices), else "". A block scale is about ``block_amax * S_enc / 6`` (E4M3-rounded), so
    the median of ``6 * scale / block_amax`` over the blocks estimates the backend's ``S_enc``."""
    values = scale_table[scales].astype(np.float64)
    usable = (amax > 0) & (values > 0) & (values < 448) & np.isfinite(values)  # (not zero, capped or NaN)
    if int(np.count_nonzero(scale_differs)) < max(2, int(np.count_nonzero(usable)) // 2) or not usable.any():
        return ""
    encode_scale = float(np.median(6 * values[usable] / amax[usable].astype(np.float64)))
    implied = 6 * 448 / encode_scale
    if not 0.8 < implied / float(expected.global_amax or np.inf) < 1.25:
        return (f"the block scales imply a tensor amax near {implied:.4g} (S_enc about {encode_scale:.4g}), where "
                f"minifp8 used {float(expected.global_amax):.9g}: did the backend take another tensor's amax, a "
                f"stale one, or skip the reduction across devices?")
    return ""


def _float_inputs(x) -> np.ndarray:
    """``x`` as a native-order float16/32/64 array (its bits are shown in native order), or a
    TypeError that says what is accepted. ml_dtypes floats become float32, exactly, as in
    `minifp8.encode`: the report is the one for ``x.astype(np.float32)``."""
    codec._check_float_environment()
    x = codec._ml_floats_as_float32(_plain_array(x))
    if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"x must be a float16, float32 or float64 array (or an ml_dtypes float array) of the "
                        f"inputs the backend was given, got dtype {x.dtype}")
    return x.astype(x.dtype.newbyteorder("="), copy=False)


def _widening_hint(dtype: np.dtype, name: str) -> str:
    """For floats narrower than float16's 16 bits or outside numpy (bfloat16, ml_dtypes' float8/6/4):
    how to pass them exactly."""
    if dtype.itemsize <= 2 and "float" in dtype.name and dtype != np.float16:
        return f"; {name}.astype(np.float32) holds {dtype.name} values exactly"
    return ""


def _bits_texts(values: np.ndarray) -> list[str]:
    """The bits of 1-d native float16/32/64 ``values`` as hex strings, e.g. ``0x3f880000``."""
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[values.itemsize]
    return [f"{int(bits):#0{2 + 2 * values.itemsize}x}" for bits in np.ascontiguousarray(values).view(unsigned)]


def assert_codes_equal(actual: ArrayLike, x: ArrayLike, fmt: str | FloatFormat, *, nan: str = "exact",
                       max_rows: int = 20, **encode_options: Any) -> None:
    """Raise ``AssertionError`` with the `Report` table when a backend's codes differ from ours.

    The arguments are `compare`'s: ``actual`` (the backend's codes or values), ``x``, ``fmt``,
    ``nan`` (``"exact"`` or ``"class"``), ``max_rows`` (rows the table shows) and the codec's
    options (``rounding``, ``saturate``, ...), passed to `minifp8.codec.encode`.
    """
    report = compare(actual, x, fmt, nan=nan, max_rows=max_rows, **encode_options)
    if not report.ok:
        raise AssertionError(str(report))


def _format_named(name: str):
    """The format a dtype's name spells (ml_dtypes: ``float8_e4m3fn``, ...), or None."""
    try:
        return formats.get(name)
    except ValueError:
        return None


def _check_options(options: dict, function, caller: str) -> None:
    """TypeError naming an option ``function`` (whose keyword-only parameters are the options) does not take."""
    known = [name for name, parameter in inspect.signature(function).parameters.items()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = [name for name in options if name not in known]
    if unknown:
        raise TypeError(f"{caller}: unknown option {unknown[0]!r}; the options are {', '.join(known)} "
                        f"(as for minifp8.{function.__module__.split('.')[-1]}.{function.__name__})")


def _check_max_rows(max_rows) -> None:
    """``max_rows``: an int (TypeError) >= 0 (ValueError), the mismatches to keep for the table."""
    _check_int(max_rows, "max_rows (mismatches to keep for the table)", 0)


def _backend_array(actual, name: str) -> np.ndarray:
    """``np.asarray(actual)``, or a TypeError where it holds no numbers (None, strings, a ragged mix),
    before its shape () or (n,) reads as a shape mismatch."""
    array = _plain_array(actual, name)
    if array.dtype.kind in "OSU":  # (not "V": ml_dtypes floats are kind V)
        raise TypeError(f"{name} must be the backend's codes (uint8, or a 1-byte dtype holding them) or decoded "
                        f"float16/32/64 values, got {_described(actual)}")
    return array


def _codes_of(actual, fmt, shape, name: str = "actual", signed_zero: bool = True) -> np.ndarray:
    """A backend's result as uint8 codes: codes as given, 1-byte dtypes by view, floats by value.
    ``name`` is the argument's name for the errors; ``signed_zero``: a -0.0 value of a format without
    -0 is an error (it is not one of its values), else read as +0 (an operand's zero)."""
    array = _backend_array(actual, name)
    if array.shape != shape:
        raise ValueError(f"{name} has shape {array.shape} but x has shape {shape}")
    if array.dtype == np.uint8:
        codes = array
    elif array.dtype.kind == "f" and array.dtype.itemsize in (2, 4, 8):
        if not fmt.has_nan and np.isnan(array).any():
            raise ValueError(f"{name} holds NaN, which is not a {fmt.name} value ({fmt.name} has no NaN)")
        codes = codec.encode(array, fmt)
        values = fmt.values()[codes]
        representable = (values == array) | (np.isnan(values) & np.isnan(array))
        if signed_zero and not fmt.has_negative_zero:  # (-0.0 == 0.0: a -0 that no code of fmt holds, as
            # in FNUZ, hid a backend's sign-of-zero bug; a GEMM operand's -0.0 is just a zero)
            representable &= ~((array == 0) & np.signbit(array))
        if not representable.all():
            bad = array.reshape(-1)[np.flatnonzero(~representable.reshape(-1))[0]]
            raise ValueError(f"{name} holds {bad!r}, which is not a {fmt.name} value: pass codes, or values "
                             f"that the backend decoded from {fmt.name}")
    elif array.dtype.itemsize == 1 and array.dtype.kind not in "bO":
        named = _format_named(array.dtype.name)  # an ml_dtypes float8/6/4 dtype names its format
        if named is not None and replace(named, name=fmt.name) != fmt:  # (by its fields, not its name)
            raise TypeError(f"{name} has dtype {array.dtype.name}, which holds {named.name} codes, "
                            f"not the {fmt.name} codes that the format given names")
        if named is None and array.dtype.kind not in "iu":  # another format's codes, read as these
            raise TypeError(f"{name} has dtype {array.dtype.name}, a 1-byte format minifp8 does not know, not "
                            f"{fmt.name}: pass its bytes as uint8 codes (.view(np.uint8)) if they are {fmt.name} codes")
        codes = np.ascontiguousarray(array).view(np.uint8)
    else:
        # Wider integers may be codes (a Python list of ints is int64) or the bits of a 16-bit float:
        # which, only the caller knows. But values no code has are a bug that a cast would hide.
        if array.dtype.kind in "iu" and array.size:
            outside = np.flatnonzero(((array < 0) | (array >= 1 << fmt.bits)).reshape(-1))
            if outside.size:
                raise ValueError(f"{name} has dtype {array.dtype} and holds {array.reshape(-1)[outside[0]]} at index "
                                 f"{tuple(int(i) for i in np.unravel_index(outside[0], array.shape))} ({outside.size} "
                                 f"values outside {fmt.name}'s codes [0, {1 << fmt.bits})): if these are the "
                                 f"backend's codes, it writes more than {fmt.bits} bits (.astype(np.uint8) would "
                                 f"hide that)")
        hint = (f"; if they are {fmt.name} codes (a Python int or list of ints becomes int64), convert them "
                f"with .astype(np.uint8)" if array.dtype.kind in "iu" else _widening_hint(array.dtype, name))
        raise TypeError(f"{name} must be uint8 codes, a 1-byte dtype holding codes (ml_dtypes float8/6/4, int8) "
                        f"or float16/32/64 values of the format, got dtype {array.dtype}{hint}")
    if codes.size and int(codes.max()) >= 1 << fmt.bits:
        bad = np.flatnonzero(codes.reshape(-1) >= 1 << fmt.bits)
        raise ValueError(f"{fmt.name} codes lie in [0, {1 << fmt.bits}), got {int(codes.max())} in {name} "
                         f"({bad.size} codes out of range, the first at index "
                         f"{tuple(int(i) for i in np.unravel_index(bad[0], codes.shape))})")
    return codes


def _ordinals(codes, fmt) -> np.ndarray:
    """Position of codes on the number line (sign-magnitude -> integer order)."""
    codes = np.asarray(codes, dtype=np.int64)
    magnitude = codes & ~fmt.sign_mask
    return np.where(codes & fmt.sign_mask, -magnitude, magnitude)


def _code_distance(expected: int, actual: int, fmt) -> int | None:
    table = fmt.values()
    if np.isnan(table[expected]) or np.isnan(table[actual]):
        return None
    return int(abs(_ordinals(expected, fmt) - _ordinals(actual, fmt)))


def _classify(x: np.ndarray, expected: np.ndarray, actual: np.ndarray, fmt) -> np.ndarray:
    """The likely cause of each mismatch, most specific first (see `compare`): uint8 indices into
    `MISMATCH_CLASSES`."""
    table = fmt.values()
    magnitude = np.abs(x)
    # Position of |x| between its two neighbours, in quanta (exact: only powers of two are involved).
    safe = np.where(np.isfinite(magnitude) & (magnitude > 0), magnitude, 1.0)
    exponent = np.maximum(np.frexp(safe)[1] - 1, fmt.emin)
    position = np.ldexp(safe, fmt.mantissa_bits - exponent)
    distance_from_half = np.abs(position - np.floor(position) - 0.5)
    with np.errstate(invalid="ignore", over="ignore"):  # (the other neighbour lies on the other side of x: a
        # code one step beyond the expected one is no pick between x's neighbours, found in a review)
        opposite = np.sign(table[actual] - x) * np.sign(table[expected] - x) < 0
    picked_other_neighbour = (np.abs(_ordinals(expected, fmt) - _ordinals(actual, fmt)) == 1) & opposite
    rules = [  # first match wins
        # Non-finite input, or a finite input the oracle maps to NaN by definition (E8M0's 0 and x < 0).
        ("NaN/Inf", ~np.isfinite(x) | (np.isnan(table[expected]) & ((magnitude < fmt.max) |
                                                                     ((x < 0) & (not fmt.signed))))),
        # Zero expected, and a code with zero magnitude bits back: -0 for +0 (or the reverse), or
        # a backend that kept a sign FNUZ cannot spell and wrote 0x80, its NaN.
        ("sign-of-zero", (table[expected] == 0) & ((actual & ~np.uint8(fmt.sign_mask)) == 0)),
        # The expected value negated (a finite nonzero one): a sign lost (|x| encoded) or flipped.
        ("sign", (fmt.sign_mask != 0) & (table[expected] != 0) & np.isfinite(table[expected])
         & (actual == (expected ^ np.uint8(fmt.sign_mask)))),
        # A format without a zero (E8M0) maps 0 to NaN: NaN back for a float32 subnormal input is a
        # backend that flushed the input to zero first (DAZ), not an overflow.
        ("subnormal", (not np.any(table == 0)) & _float32_subnormals(magnitude) & np.isnan(table[actual])),
        # FNUZ formats have one zero: a kernel that flushes a negative subnormal to -0 writes 0x80, their NaN.
        ("subnormal", (fmt.nan_style == "negative_zero") & (magnitude < fmt.min_normal) & (actual == fmt.sign_mask)),
        ("overflow", (magnitude >= fmt.max) | ~np.isfinite(table[expected]) | ~np.isfinite(table[actual])),
        ("subnormal", (magnitude < fmt.min_normal) & (table[actual] == 0)),  # flushed to zero
        ("tie", (distance_from_half == 0) & picked_other_neighbour),
        ("near-tie", (distance_from_half <= NEAR_TIE_WINDOW) & picked_other_neighbour),
        ("subnormal", magnitude < fmt.min_normal),
    ]
    classes = np.full(x.shape, MISMATCH_CLASSES.index("other"), np.uint8)
    for kind, mask in reversed(rules):
        classes[mask] = MISMATCH_CLASSES.index(kind)
    return classes


def sweep(fmt: str | FloatFormat | None = None, kind: str = "structured",
          batch_size: int = 1 << 24) -> Iterator[np.ndarray]:
    """Float32 input batches for a backend to run through its own cast: an iterator of arrays.

    The structured and exhaustive sweeps hold NaN, which a format without one (``not fmt.has_nan``:
    E2M1, E2M3 and E3M2 of the catalogue) cannot encode, so drop it first for those
    (``x[~np.isnan(x)]``); the edge sweep leaves it out. The arguments are checked when ``sweep``
    is called, not at the first batch.

    Parameters
    ----------
    fmt : FloatFormat or str, optional
        Needed for ``kind="edge"`` only; the other kinds do not depend on it (it is still checked).
    kind : {"structured", "exhaustive", "edge"}
        ``structured``: every upper-16-bit pattern times lower halves that hit ties and their
        neighbours (524,288 values). ``exhaustive``: all 2^32 float32 bit patterns, in batches of
        ``batch_size``. ``edge``: every value of ``fmt``, every midpoint between neighbours, each
        +- one float32 ulp, the overflow threshold, both zeros, +-NaN and +-Inf.
    batch_size : int
        A power of two in [1, 2**32]; used by ``kind="exhaustive"`` only.
    """
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str ('structured', 'exhaustive' or 'edge'), "
                        f"got {type(kind).__name__} {kind!r}")
    if kind not in ("structured", "exhaustive", "edge"):
        raise ValueError(f"kind must be 'structured', 'exhaustive' or 'edge', got {kind!r}")
    if fmt is not None:
        fmt = formats.get(fmt)
    elif kind == "edge":
        raise ValueError("sweep(kind='edge') needs the format whose edges to probe")
    batch_size = _check_int(batch_size, "batch_size", 1, 1 << 32)
    if (1 << 32) % batch_size:
        raise ValueError(f"batch_size must be a power of two <= 2**32, got {batch_size}")
    return _sweep(fmt, kind, batch_size)


def _sweep(fmt: FloatFormat | None, kind: str, batch_size: int) -> Iterator[np.ndarray]:
    """`sweep`'s batches, made on demand (its arguments checked)."""
    if kind == "structured":
        upper = np.arange(1 << 16, dtype=np.uint32) << 16
        low = np.array(STRUCTURED_LOW_HALVES, dtype=np.uint32)
        yield (upper[:, None] | low[None, :]).reshape(-1).view(np.float32)
    elif kind == "exhaustive":
        for start in range(0, 1 << 32, batch_size):
            bits = np.arange(batch_size, dtype=np.uint32)  # (4 bytes an element: no uint64 first)
            bits += np.uint32(start)  # start + batch_size <= 2**32: no element wraps
            yield bits.view(np.float32)
    else:
        assert fmt is not None  # sweep refuses kind="edge" without a format
        yield edge_cases(fmt)


STRUCTURED_LOW_HALVES = (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000)


def edge_cases(fmt: str | FloatFormat) -> np.ndarray:
    """Float32 inputs on and around every boundary of ``fmt``: the finite ones sorted, each with both
    signs (-0.0 and +0.0 too) and no duplicates, then +Inf, -Inf and (where ``fmt`` has NaN) NaN
    and -NaN (the sign of a NaN is kept where the format can spell it)."""
    fmt = formats.get(fmt)
    codec._check_float_environment()  # (the subnormal neighbours would flush and drop out)
    grid = _magnitudes(fmt)
    spacing_at_top = 2.0 ** (max(fmt.emax, fmt.emin) - fmt.mantissa_bits)  # (max is subnormal in E1Mx with Inf)
    midpoints = np.append(_midpoints(fmt), [fmt.max + spacing_at_top / 2, grid[0] / 2])
    with np.errstate(over="ignore", under="ignore"):  # E8M0's 2**128 is Inf in float32 (an edge too); 1e-45 rounds
        points = np.concatenate([grid, midpoints, [fmt.max * 2, 1e30, np.finfo(np.float32).max,
                                                    np.finfo(np.float32).tiny, 1e-45]]).astype(np.float32)
        around = np.concatenate([points, np.nextafter(points, np.float32(np.inf)),
                                 np.nextafter(points, np.float32(0))])
    around = around[np.isfinite(around)]
    values = np.unique(np.concatenate([around, -around]))  # (keeps one of -0.0 and +0.0: they compare equal)
    zeros = np.array([-0.0, 0.0], np.float32)  # both: a backend may lose the sign, or write FNUZ's NaN for -0.0
    specials = [np.inf, -np.inf] + ([np.nan, -np.nan] if fmt.has_nan else [])  # (-np.nan: the sign bit set)
    return np.concatenate([values[values < 0], zeros, values[values > 0], np.array(specials, np.float32)])


def _magnitudes(fmt) -> np.ndarray:
    """The finite magnitudes of ``fmt`` (a FloatFormat or a name): float64, ascending, each once."""
    table = formats.get(fmt).values()
    return np.unique(np.abs(table[np.isfinite(table)]))


def _midpoints(fmt) -> np.ndarray:
    """The midpoints between neighbouring `_magnitudes` of ``fmt`` (exact in float64), ascending:
    the ties of round-to-nearest (E2M1: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5)."""
    grid = _magnitudes(fmt)
    return (grid[:-1] + grid[1:]) / 2


# ---- block formats (MX, NVFP4) -----------------------------------------------------------------
@dataclass(frozen=True)
class ScaleMismatch:
    """One block whose scale code differs: its index in ``scales``, its amax and both codes."""

    index: tuple[int, ...]
    block_amax: float
    expected_code: int
    expected_value: float
    actual_code: int
    actual_value: float


@dataclass
class BlockReport:
    """The result of `compare_mx`: scale mismatches, then element mismatches.

    Elements are compared only in blocks whose scale agrees (a wrong scale makes every element of
    its block meaningless) and is not MX's NaN scale 0xFF (whose block decodes to NaN whatever its
    codes). They are classified as `compare` does, on the value the element encoder saw:
    ``x * 2**-shared_exp`` for MX, ``clamp(x * (1 / (S_dec_b * S_dec)), -6, 6)`` for NVFP4 (the
    product rounded to float32 first, as `mx.quantize_nvfp4` does); but an element whose input is a
    nonzero float32 subnormal (|x| < 2**-126) and whose code came back +-0, where a nonzero one is
    expected, is ``subnormal`` whatever its scaled value (a backend that flushed its inputs). Each element row
    shows the input as given and that scaled value (``Mismatch.scaled_input``). ``layout`` holds
    hints, as `Report.layout`, for scales and codes that are the expected ones rearranged, and
    scales and codes that are those of x with its float32 subnormals flushed to zero (DAZ/FTZ); (MX)
    names the scale mode and rounding under which `mx.quantize` gives the backend's scales and codes
    in every block, where one does (and, where a bug checked to give the scales that differ, such as a
    float32 log2, gives them too, both), or scales that are the unbiased shared exponents, or one code
    off in some blocks, with such a bug (a block amax of max(x), not max |x|, ...) where one fits; (NVFP4) another
    float32 order of the block scale (step 4) or of the elements' scaling (steps 5-6) that gives the
    backend's scales and codes, where one does; where most block scales differ, the tensor amax they
    imply, if it is far from the one minifp8 used,
    and element codes that differ in blocks whose scale code is 0x00 (unread by dequantize);
    and, where no rule over whole blocks fits, the `compare` rule (an element cast that does not
    saturate, rounds toward zero, ...) that gives every element code in the blocks whose scale agrees.
    For NVFP4, ``tensor_scale`` gives the tensor amax and ``S_enc`` the expected scales come from: a backend that
    took another tensor amax gets other block scales throughout.
    """

    format_name: str
    options: dict[str, Any]
    scale_total: int
    scale_count: int
    scale_mismatches: list[ScaleMismatch]
    elements: Report
    layout: str = ""
    tensor_scale: str = ""

    @property
    def ok(self) -> bool:
        return self.scale_count == 0 and self.elements.ok

    def head(self) -> str:
        """The first line: the format, the options, the scales that differ and the elements' summary."""
        return (f"{self.format_name} ({_options_text(self.options, self.elements.nan)}): {self.scale_count} of "
                f"{self.scale_total} block scales differ; elements in the other blocks: {self.elements.summary()}")

    def __str__(self) -> str:
        lines = [self.head(), *self.tensor_scale.splitlines(), *self.layout.splitlines()]
        if self.scale_mismatches:
            lines += ["", "scales:", f"{'block':>14} {'block amax':>16} {'expected':<18} {'actual':<18}".rstrip()]
            for m in self.scale_mismatches:
                lines.append(f"{','.join(map(str, m.index)):>14} {m.block_amax:>16.9g} {m.expected_code:#04x} "
                             f"{m.expected_value:<13.6g} {m.actual_code:#04x} {m.actual_value:<13.6g}".rstrip())
            if self.scale_count > len(self.scale_mismatches):
                lines.append(f"... and {self.scale_count - len(self.scale_mismatches)} more")
        if self.elements.mismatches:
            lines += ["", "elements (each input as given, then after block scaling, as the element encoder saw it):",
                      *str(self.elements).splitlines()[2:]]
        return "\n".join(lines)


def _zero_scale_note(codes: np.ndarray, x: np.ndarray, zero_scale: np.ndarray, expected: np.ndarray,
                     element_format: FloatFormat, quantize_options: dict) -> str:
    """`compare_mx`'s words on element codes that differ in MX blocks whose scale code 0x00 agrees:
    where every one of them is x times 1 or times 2**126 cast, not times 2**127 (OCP MX section
    5.4.1), the library behaviour that gives it (the `minifp8.mx` module docstring). ``quantize_options``:
    `minifp8.mx.quantize`'s (the rounding, and its random bits, element by element)."""
    differ = zero_scale & (codes != expected)
    if not differ.any():
        return ""
    rounding = quantize_options.get("rounding", "nearest_even")
    bits = {} if rounding != "stochastic" else {
        "random_bits": np.asarray(quantize_options["random_bits"])[zero_scale],
        "random_bit_count": quantize_options.get("random_bit_count")}
    for factor, who in ((1.0, "TransformerEngine's exp2f_rcp(0x00) = 1, and torchao's _to_mx_rceil"),
                        (2.0**126, "torchao's to_mx, which clamps the float32 scale to the smallest normal")):
        if np.array_equal(codes[zero_scale], codec.encode(x[zero_scale].astype(np.float64) * factor, element_format,
                                                          rounding=rounding, saturate=True, **bits)):
            return (f"in the blocks whose scale code 0x00 agrees, the element codes are x times "
                    f"{'1' if factor == 1 else '2**126'} cast, not x times 2**127 (0x00 is 2**-127, OCP MX section "
                    f"5.4.1): {who}")
    return ""


def _scale_layout_hint(shape: tuple, x_shape: tuple, axis: int, block_size: int, is_nvfp4: bool) -> str:
    """`compare_mx`'s words on a scales array of the wrong shape: the blocks expected, and the other
    block sizes (powers of two, 2 to 256: MX's; NVFP4's is 16) or axes whose blocks give ``shape``."""
    def scale_shape(along: int, size: int) -> tuple:
        return x_shape[:along] + (-(-x_shape[along] // size),) + x_shape[along + 1:]

    sizes = (block_size,) if is_nvfp4 else tuple(2**k for k in range(1, 9))
    fits = [(along, size) for along in range(len(x_shape)) for size in sizes
            if (along, size) != (axis, block_size) and scale_shape(along, size) == tuple(shape)]
    hint = f" with blocks of {block_size} along axis {axis}"
    if fits:
        by_axis = {along: [str(size) for other, size in fits if other == along] for along, _ in fits}
        named = [(", ".join(listed[:-1]) + " or " if len(listed) > 1 else "") + f"{listed[-1]} along axis {along}"
                 for along, listed in by_axis.items()]
        hint += (f"; blocks of {' or '.join(named)} give that shape: pass the backend's "
                 + ("axis" if is_nvfp4 else "block_size and axis"))
    return hint


def compare_mx(scales: ArrayLike, codes: ArrayLike, x: ArrayLike, elem: str | FloatFormat | MXFormat, *,
               nan: str = "exact", max_rows: int = 20, **quantize_options: Any) -> BlockReport:
    """Compare a backend's block-scaled result with `minifp8.mx.quantize` (or NVFP4).

    Parameters
    ----------
    scales : array_like
        The backend's scale codes, laid out as ``MXArray.scales`` (E8M0 codes; E4M3 codes for NVFP4):
        uint8, or any form `compare` takes as ``actual`` (ml_dtypes ``float8_e8m0fnu``, decoded values).
    codes : array_like
        The backend's element codes, unpacked, x's shape (unpack FP4 nibbles first): uint8, or any
        form `compare` takes as ``actual`` (ml_dtypes ``float8_e4m3fn``, ``float4_e2m1fn``, ...).
    x : array_like
        The inputs the backend was given: float16, float32 or float64, or an ml_dtypes float, as
        in `compare`.
    elem : str, FloatFormat or MXFormat
        An MX format or element format as `minifp8.mx.quantize` takes it, or ``"NVFP4"``.
    nan : {"exact", "class"}
        As in `compare`, for the elements.
    max_rows : int
        How many rows to keep (an int >= 0): of the scale mismatches, and, separately, of the
        element mismatches.
    **quantize_options
        ``block_size``, ``axis``, ``scale_mode``, ``rounding``, ``random_bits``, ``random_bit_count``
        (MX) or ``axis``, ``global_amax`` (NVFP4). NVFP4's tensor scale is not among the arrays
        compared: pass the ``global_amax`` the backend used (by default max |x|), and compare the
        amax or ``S_enc`` it stores with `compare` or bit for bit (a slightly wrong amax changes
        few codes, and its dequantised values by as little).

    Returns
    -------
    BlockReport
        Never raises for a mismatch: check ``report.ok``, or call `assert_mx_equal`.
    """
    from . import mx

    _check_max_rows(max_rows)
    x = _float_inputs(x)
    is_nvfp4 = isinstance(elem, str) and elem.lower() == "nvfp4"
    if isinstance(elem, str) and not is_nvfp4:
        try:
            mx._element_and_block_size(elem, None)
        except ValueError as error:  # (a mistyped name: say that NVFP4 is accepted too)
            if not str(error).startswith("unknown"):
                raise ValueError(f"compare_mx: {error}") from None
            raise ValueError(f"compare_mx: {error}; or 'NVFP4'") from None
    _check_options(quantize_options, mx.quantize_nvfp4 if is_nvfp4 else mx.quantize,
                   "compare_mx" + (" (NVFP4)" if is_nvfp4 else ""))

    def quantize(values: np.ndarray) -> mx.MXArray | mx.NVFP4Array:
        """`mx.quantize` or `mx.quantize_nvfp4` of ``values``, with the caller's options."""
        if is_nvfp4:
            return mx.quantize_nvfp4(values, **quantize_options)
        return mx.quantize(values, elem, **quantize_options)

    expected = quantize(x)
    scale_format = formats.E4M3 if is_nvfp4 else formats.E8M0
    element_format = expected.elem if isinstance(expected, mx.MXArray) else formats.E2M1
    axis, block_size = expected.axis, expected.block_size
    # x's blocks as mx lays them out (an axis shorter than a block is one block, unpadded)
    blocks, moved_shape = mx._to_blocks(x, axis, block_size)

    def per_element(per_block):
        """A value per block (laid out as the scales) -> that value at each of its elements, x's shape."""
        flat = np.moveaxis(per_block, axis, -1).reshape(-1, 1)
        return mx._from_blocks(np.repeat(flat, blocks.shape[1], axis=1), moved_shape, axis)

    def per_block(per_row):
        """A value per row of ``blocks`` -> laid out as the scales."""
        return np.moveaxis(per_row.reshape(moved_shape[:-1] + (expected.scales.shape[axis],)), -1, axis)

    checked = []
    for name, got, want, fmt in (("scales", scales, expected.scales, scale_format),
                                 ("codes", codes, expected.codes, element_format)):
        got = _backend_array(got, name)
        if got.shape != want.shape:
            raise ValueError(f"{name} has shape {got.shape}, expected {want.shape} for x of shape {x.shape}"
                             + (" (unpack FP4 nibbles first)" if name == "codes" else
                                _scale_layout_hint(got.shape, x.shape, axis, block_size, is_nvfp4)))
        if name == "codes" and not is_nvfp4 and (expected.scales == 0xFF).any():
            # the codes of a block whose expected scale is NaN are don't-care (the golden notes):
            # any byte there, as a 0 for the range check below
            got = np.array(got)
            got[per_element(expected.scales == 0xFF)] = 0
        checked.append(_codes_of(got, fmt, want.shape, name))  # every other code in range, compared or not
    scales, codes = checked

    # Scales: one row per block that differs.
    scale_table = scale_format.values()
    amax = per_block(np.max(np.abs(blocks), axis=1, initial=0))
    scale_differs = scales != expected.scales
    scale_rows = []
    for flat in np.flatnonzero(scale_differs.reshape(-1))[:max_rows]:
        index = np.unravel_index(flat, scales.shape)
        scale_rows.append(ScaleMismatch(tuple(int(i) for i in index), float(amax[index]),
                                        int(expected.scales[index]), float(scale_table[expected.scales[index]]),
                                        int(scales[index]), float(scale_table[scales[index]])))

    # Elements in blocks whose scale agrees, classified on the value the element encoder saw. Only
    # those whose code differs from expected.codes can differ from the codes `compare` expects (the
    # same scaled values, encoded alike), so only they are scaled and compared; all count in the total.
    element_scale_codes = per_element(expected.scales)
    same_scale = per_element(~scale_differs)
    if not is_nvfp4:
        same_scale &= element_scale_codes != mx.E8M0_NAN  # NaN-scale blocks carry no element information
    positions = np.flatnonzero((same_scale & (codes != expected.codes)).reshape(-1))
    inputs = x.reshape(-1)

    def scaled_inputs(where: np.ndarray) -> np.ndarray:
        """The values the element encoder saw at the C-order positions ``where``."""
        scale_codes_there = element_scale_codes.reshape(-1)[where]
        if isinstance(expected, mx.NVFP4Array):  # (is_nvfp4)
            decode_scale = np.float32(1) / expected.encode_scale
            with np.errstate(divide="ignore", over="ignore", under="ignore"):
                element_scale = np.minimum(np.float32(1) / (scale_table[scale_codes_there].astype(np.float32)
                                                            * decode_scale), np.float32(np.finfo(np.float32).max))
                return np.clip(inputs[where].astype(np.float32) * element_scale, -6, 6).astype(np.float32)
        exponent = scale_codes_there.astype(np.int32) - mx.E8M0_BIAS
        return np.ldexp(inputs[where].astype(np.float64), -exponent)

    seen = scaled_inputs(positions)
    element_options = {} if is_nvfp4 else {"rounding": quantize_options.get("rounding", "nearest_even")}
    if element_options.get("rounding") == "stochastic":  # each compared element with its own random bits
        element_options.update(random_bits=np.asarray(quantize_options["random_bits"]).reshape(-1)[positions],
                               random_bit_count=quantize_options.get("random_bit_count"))
    element_report = compare(codes.reshape(-1)[positions], seen, element_format, nan=nan,
                             max_rows=max_rows, saturate=True, **element_options)
    element_report.total = int(np.count_nonzero(same_scale))
    # A float32 subnormal input whose code came back zero, where a nonzero code is expected, was flushed
    # before scaling (DAZ/FTZ), whatever class its scaled value gives (a kernel's flushes read "other")
    element_table = element_format.values()
    got, want = codes.reshape(-1)[positions], expected.codes.reshape(-1)[positions]
    flushed = _float32_subnormals(inputs[positions]) & (element_table[got] == 0) & (element_table[want] != 0)
    if flushed.any():
        before = np.bincount(_classify(seen[flushed].astype(np.float64), want[flushed], got[flushed], element_format),
                             minlength=len(MISMATCH_CLASSES))
        for kind, count in zip(MISMATCH_CLASSES, before):
            element_report.by_class[kind] -= int(count)
        element_report.by_class["subnormal"] += int(np.count_nonzero(flushed))
    originals = inputs[positions[[row.index[0] for row in element_report.mismatches]]]
    element_report.mismatches = [
        replace(row, index=tuple(int(i) for i in np.unravel_index(positions[row.index[0]], x.shape)),
                input=float(original), input_bits=bits, scaled_input=row.input, scaled_bits=row.input_bits,
                kind="subnormal" if flushed[row.index[0]] else row.kind)
        for row, original, bits in zip(element_report.mismatches, originals, _bits_texts(originals))]
    element_report.input_dtype = x.dtype.name
    # Layout hints from the whole arrays (an element report sees only the blocks whose scale agrees);
    # but a rule that gives every compared element code is one about the element cast itself (an
    # element cast that does not saturate, as OCP MX's requires, was given no hint at all)
    element_rule = ""
    if element_report.count and element_options.get("rounding") != "stochastic":
        every = np.flatnonzero(same_scale.reshape(-1))  # (the rule must give every compared code, not only
        compared = codes.reshape(-1)[every]             # those that differ)
        where = np.flatnonzero(np.isin(every, positions))
        element_rule = _rule_note(compared, scaled_inputs(every), element_format, where, nan,
                                  {"saturate": True, **element_options})
    element_report.layout = ""
    notes = [_layout_note(got, want, name, fmt) for name, got, want, fmt in (
                 ("scales", scales, expected.scales, scale_format), ("codes", codes, expected.codes, element_format))
             if np.count_nonzero(got != want) > 1]
    flush = ""
    if (scale_differs.any() or element_report.count) and _flushed_subnormals(x, scales, codes, quantize):
        flush = ("scales and codes equal those of x with its float32 subnormals flushed to zero (signs kept): the "
                 "backend flushes float32 subnormal inputs to zero (DAZ/FTZ)")
        if _flushed_results(expected.codes, element_format, scales, expected.scales, codes):  # (a review's find)
            flush += ("; or its element cast flushes subnormal results to zero: these inputs cannot tell them apart "
                      "(a float32 subnormal input that its block's scale takes to a normal element value can)")
    # The scales that differ by one code (or, of a signed amax, by any), and a bug checked to give them
    scale_note, cause, wrote_exponent = "", ("", ""), False
    if not is_nvfp4 and scale_differs.any():
        scale_mode = quantize_options.get("scale_mode", "floor")
        offset = (scales[scale_differs].astype(np.int64) - expected.scales[scale_differs]) % 256
        wrote_exponent = bool((offset == 256 - mx.E8M0_BIAS).all())  # (int8 shared_exp read as a byte)
        for step, sign, size, bias in ((1, "plus", "large", mx.E8M0_BIAS + 1), (255, "minus", "small", mx.E8M0_BIAS - 1)):
            if not (offset == step).all():
                continue
            if np.array_equal(scale_differs, expected.scales != mx.E8M0_NAN):  # every block's scale
                scale_note = (f"every scale is the expected code {sign} 1: an E8M0 bias of {bias}, not "
                              f"{mx.E8M0_BIAS}, or a shared exponent one too {size} in every block")
                if step != 1:  # (the one cause checked there: it may lower every block's exponent)
                    cause = _signed_amax_cause(scale_differs, scales, amax, blocks, per_block, element_format,
                                               scale_mode)
            else:
                cause = _one_code_cause(1 if step == 1 else -1, scale_differs, scales, expected.scales, amax, blocks,
                                        per_block, element_format, scale_mode)
                scale_note = (f"every scale that differs is the expected code {sign} 1: the shared exponent one too "
                              f"{size} in those blocks")
        if not scale_note and not wrote_exponent:
            cause = _signed_amax_cause(scale_differs, scales, amax, blocks, per_block, element_format, scale_mode)
            if cause[0]:
                scale_note = ("every scale that differs is below the expected code: the shared exponent too small in "
                              "those blocks")
    if not is_nvfp4 and (scale_differs.any() or element_report.count):
        rule, named = _block_rule_note(scales, codes, x, elem, quantize_options, expected.scales, cause)
        notes.insert(0, rule)
        if named:  # (the rule's note names the cause, as the other reading)
            cause = ("", "")
    if element_rule and not any(notes) and not flush:  # (a block rule, which names scales and codes, comes first)
        notes.append(f"in the blocks whose scale agrees, the element codes, where x is each input as the element "
                     f"cast sees it (divided by its block's scale): {element_rule}")
    if wrote_exponent:
        notes.insert(0, f"every scale that differs is the expected code minus {mx.E8M0_BIAS} (mod 256): the "
                        f"backend wrote the shared exponent itself, not E8M0's code (shared_exp + {mx.E8M0_BIAS})")
    if scale_note:
        notes.insert(1, scale_note + (f" ({cause[0]})" if cause[0] else ""))  # (after a scale-mode rule)
    zero_scale = same_scale & (element_scale_codes == 0)  # (elements of the blocks whose scale 0x00 agrees)
    if not is_nvfp4:
        notes.append(_zero_scale_note(codes, x, zero_scale, expected.codes, element_format, quantize_options))
    name = "NVFP4" if is_nvfp4 else f"MX {element_format.name}/{block_size}"
    options = {key: value for key, value in quantize_options.items() if key != "random_bits"}
    tensor_scale = ""
    if isinstance(expected, mx.NVFP4Array):
        source = "given" if quantize_options.get("global_amax") is not None else "max |x|"
        if expected.global_amax == 0:
            rule = "1, for a tensor of zeros"
        elif expected.encode_scale == np.finfo(np.float32).max:
            rule = "448 * 6 / global amax, capped at FLT_MAX"
        else:
            rule = "448 * 6 / global amax"
        tensor_scale = (f"tensor scale: global amax {float(expected.global_amax):.9g} ({source}), "
                        f"S_enc {float(expected.encode_scale):.9g} ({rule})")
        notes.insert(0, _implied_amax_note(scales, scale_table, amax, scale_differs, expected))
        if scale_differs.any():
            notes.insert(0, _nvfp4_order_note(scales, codes, x, expected))
        elif element_report.count:
            every = np.flatnonzero(same_scale.reshape(-1))
            notes.insert(0, _nvfp4_element_order_note(codes, x, scale_table[element_scale_codes.reshape(-1)[every]],
                                                      every, expected))
        unread = np.count_nonzero(zero_scale & (codes != expected.codes))
        if unread:  # (an encode scale of FLT_MAX saturates such a block's inputs of |x| >= 6 / FLT_MAX to +-6)
            notes.append(f"{unread} of the element codes that differ lie in blocks whose scale code is 0x00, which "
                         f"dequantise to zeros whatever their codes: minifp8 encodes them as TransformerEngine does "
                         f"(encode = min(1 / 0, FLT_MAX): inputs of |x| >= 6 / FLT_MAX saturate to +-6); other codes "
                         f"there change no dequantised value")
    notes.insert(0, flush)
    return BlockReport(name, options, int(scales.size), int(scale_differs.sum()), scale_rows, element_report,
                       "\n".join(note for note in notes if note), tensor_scale)


def assert_mx_equal(scales: ArrayLike, codes: ArrayLike, x: ArrayLike, elem: str | FloatFormat | MXFormat, *,
                    nan: str = "exact", max_rows: int = 20, **quantize_options: Any) -> None:
    """Raise ``AssertionError`` with the `BlockReport` when a backend's scales or codes differ.

    The arguments are `compare_mx`'s: ``scales``, ``codes``, ``x``, ``elem``, ``nan``, ``max_rows``
    and `minifp8.mx.quantize`'s options (``scale_mode``, ``block_size``, ``axis``, ...).
    """
    report = compare_mx(scales, codes, x, elem, nan=nan, max_rows=max_rows, **quantize_options)
    if not report.ok:
        raise AssertionError(str(report))
