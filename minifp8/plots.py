"""Figures for the tutorials and the command line, one function per figure.

Every figure function returns a ``matplotlib.figure.Figure`` built with the object-oriented
API (no ``pyplot``; `gpt_cast_scales` returns the data one of them draws), so it uses no global
figure state and needs no display: save it with ``fig.savefig("name.svg")`` or show it in a
notebook. The tutorials site renders these functions at build time (``tutorials/_hooks/figures.py``).

matplotlib is an optional dependency (``pip install "minifp8[plot]"``). It is imported inside
the functions, so ``import minifp8`` and ``import minifp8.plots`` work with NumPy alone.

The file is organised by topic, in the order of the tutorials: formats, rounding, then scaling
and training figures as they are added.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import formats as _formats
from .codec import quantize
from .fastcast import _overflow_threshold
from .formats import FloatFormat, _check_int, _described, _is_int, _is_real, _is_real_type
from .fp8 import ScaleRecord, ScaleTracker
from .model import GPTConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure
else:  # matplotlib is optional and imported inside the functions only: at run time (typing.get_type_hints)
    Figure = Any  # the figures' return annotation resolves to Any

# One colour per format, the same in every figure (matplotlib's default cycle, colour-blind safe
# enough for two or three lines; subnormals and special regions get their own).
FORMAT_COLORS = {"E4M3": "#1f77b4", "E5M2": "#d62728", "E4M3FNUZ": "#17becf", "E5M2FNUZ": "#e377c2",
                 "E3M2": "#2ca02c", "E2M3": "#9467bd", "E2M1": "#8c564b"}
SUBNORMAL_COLOR = "#ff7f0e"
OVERFLOW_COLOR = "#7f7f7f"

# One colour, marker and line style per training run, the same in every figure and in train_tiny's
# loss.png. The colours are Okabe and Ito's ("Color Universal Design", 2008), chosen to stay apart
# under the common colour-vision deficiencies; the markers tell every pair apart without colour.
# The unit-scaled pair shares its colour (fp32 dashed), so that it reads as one comparison.
RUN_STYLES = {  # run label (train_tiny's, e.g. the headline runs) or recipe -> (colour, marker, line style)
    "fp32": ("#000000", "o", "-"),
    "fp8": ("#D55E00", "X", "-"),             # vermillion
    "fp8 + loss scale dynamic": ("#CC79A7", "P", "-"),  # reddish purple
    "unit fp32": ("#009E73", "d", "--"),      # bluish green
    "unit": ("#009E73", "D", "-"),
    "current": ("#0072B2", "s", "-"),         # blue
    "delayed": ("#56B4E9", "^", "-"),         # sky blue
    "mxfp8": ("#E69F00", "v", "-"),           # orange
    "blockwise": ("#666666", "<", "-"),       # grey (Okabe-Ito's yellow is too pale on white)
}
_EXTRA_LINE_STYLES = ("--", ":", "-.")
_EXTRA_MARKERS = ("h", "*", "p", "8", ">", "H", "1", "2")  # (none of RUN_STYLES')


def _new_figure(width: float, height: float, rows: int = 1, columns: int = 1, **subplot_options):
    """A Figure with ``rows`` x ``columns`` axes (a flat array, row by row); the one place matplotlib
    is imported."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised by a test that hides matplotlib
        raise ImportError('minifp8.plots needs matplotlib: pip install "minifp8[plot]"') from error
    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False, **subplot_options).reshape(-1)
    return figure, axes


def _color(fmt) -> str:
    return FORMAT_COLORS.get(fmt.name, "black")


def _run_styles(recipes: dict[str, str | None]) -> dict[str, tuple[str, str, str]]:
    """(colour, marker, line style) of each run, from its label (``label -> recipe or None``):
    `RUN_STYLES` by label; else by recipe (the first word of the label where no recipe is given),
    in the recipe's colour with a marker of its own and a line style no run of that colour has,
    while one is left (the FP8-LM options of one recipe); a run of an unknown recipe, or past eight
    extra runs of one, takes a combination of matplotlib's cycle colours and markers no other run
    has (cycling after 100 of them)."""
    styles = {label: RUN_STYLES[label] for label in recipes if label in RUN_STYLES}
    used = {(color, linestyle) for color, _, linestyle in styles.values()}
    extra: dict[str, int] = {}  # recipe -> runs styled after it so far
    fallback = itertools.cycle([(f"C{c}", m) for m in "ov^s<>DPX*" for c in range(10)])
    for label, recipe in recipes.items():
        if label in styles:
            continue
        key = recipe if isinstance(recipe, str) and recipe in RUN_STYLES else label.split(" ")[0]
        count = extra[key] = extra.get(key, 0) + 1
        if key in RUN_STYLES and count <= len(_EXTRA_MARKERS):
            color = RUN_STYLES[key][0]
            free = [style for style in _EXTRA_LINE_STYLES if (color, style) not in used]
            linestyle = free[0] if free else _EXTRA_LINE_STYLES[(count - 1) % len(_EXTRA_LINE_STYLES)]
            styles[label] = (color, _EXTRA_MARKERS[count - 1], linestyle)
        else:
            color, marker = next(fallback)
            linestyle = "-"
            styles[label] = (color, marker, linestyle)
        used.add((color, linestyle))
    return {label: styles[label] for label in recipes}


def _log2_axis(ax, low_exponent: int, high_exponent: int, step: int = 2) -> None:
    """A base-2 log x axis from 2**low to 2**high with ticks labelled as powers of two."""
    ax.set_xscale("log", base=2)
    ax.set_xlim(2.0**low_exponent, 2.0**high_exponent)
    while (high_exponent - low_exponent) / step > 24:  # a wide axis: at most 24 labels, at powers-of-two steps
        step *= 2
    ticks = range(low_exponent + (-low_exponent) % step, high_exponent + 1, step)
    ax.set_xticks([2.0**t for t in ticks], [f"$2^{{{t}}}$" for t in ticks])
    ax.xaxis.set_minor_locator(_null_locator())


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _percent_axis(ax, ticks=None) -> None:
    from matplotlib.ticker import FuncFormatter

    if ticks is not None:
        ax.set_yticks(ticks)
    ax.yaxis.set_minor_locator(_null_locator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{100 * value:g}%"))


def _number(value, name: str, none: bool = False, positive: bool = False) -> float:
    """``value`` (an argument, or a number of a results document) as a float: TypeError naming
    ``name`` unless it is a real number (or None where ``none``: JSON's null, which the results
    write for NaN, read as NaN); with ``positive``, ValueError unless it is finite and > 0."""
    if value is None and none:
        return math.nan
    if not _is_real(value):
        raise TypeError(f"{name} must be a number{' or None' if none else ''}, got {_described(value)}")
    if positive and not 0 < float(value) < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


# ================================================================================================
# Formats (tutorial 01)
# ================================================================================================
def value_grid(names: str | FloatFormat | Sequence[str | FloatFormat] = ("E4M3", "E5M2")) -> Figure:
    """Every positive finite value of each format on a log2 axis, and the gap to the next one.

    Top: one tick per value, subnormals in orange, with the smallest subnormal, the smallest
    normal and the largest value labelled. Bottom: the relative gap ``(next - v) / v`` from each
    value to the next, which is the format's precision: it repeats in every binade of normal
    numbers (``2**-M`` down to about ``2**-M / 2``) and grows in the subnormals.

    Parameters
    ----------
    names : str or sequence of str
        One format name, or several (see `minifp8.formats.get`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmts = _formats.get_list(names)
    figure, (grid_axis, gap_axis) = _new_figure(8.0, 5.2, rows=2, sharex=True)
    low = min(int(np.log2(f.min_subnormal)) for f in fmts) - 2
    high = max(int(np.ceil(np.log2(f.max))) for f in fmts) + 1

    for row, fmt in enumerate(fmts):
        values = _positive_finite_values(fmt)
        subnormal = values < fmt.min_normal
        y = len(fmts) - 1 - row
        grid_axis.vlines(values[~subnormal], y - 0.3, y + 0.3, color=_color(fmt), linewidth=0.8)
        grid_axis.vlines(values[subnormal], y - 0.3, y + 0.3, color=SUBNORMAL_COLOR, linewidth=0.8)
        for value, text, align in ((fmt.min_subnormal, _power_label(fmt.min_subnormal), "right"),
                                   (fmt.min_normal, _power_label(fmt.min_normal), "center"),
                                   (fmt.max, f"{fmt.max:g}", "left")):
            grid_axis.annotate(text, (value, y + 0.3), xytext=(0, 3), textcoords="offset points",
                               ha=align, va="bottom", fontsize=8)
        gaps = (values[1:] - values[:-1]) / values[:-1]
        normal_start = int(subnormal.sum())  # values[normal_start] is the smallest normal
        gap_axis.step(values[:normal_start + 1], gaps[:normal_start + 1], where="post", color=SUBNORMAL_COLOR)
        # (the last gap, from the largest value but one, drawn up to the largest value itself)
        gap_axis.step(values[normal_start:], np.append(gaps[normal_start:], gaps[-1]), where="post",
                      color=_color(fmt), label=fmt.name)

    grid_axis.set_yticks(range(len(fmts)), [f.name for f in reversed(fmts)])
    grid_axis.set_ylim(-0.6, len(fmts) - 0.1)
    grid_axis.set_title(f"The {len(_positive_finite_values(fmts[0]))} positive finite values of "
                        f"{fmts[0].name}" + "".join(f" and {len(_positive_finite_values(f))} of {f.name}"
                                                  for f in fmts[1:]) + " (subnormals in orange)",
                        fontsize=10)
    gap_axis.set_yscale("log", base=2)
    gap_axis.set_ylabel("gap to the next value,\nrelative")
    gap_axis.set_xlabel("value")
    _percent_axis(gap_axis)
    gap_axis.grid(True, which="major", alpha=0.3)
    gap_axis.legend(loc="upper right", fontsize=8)
    _log2_axis(gap_axis, low, high)
    return figure


def _positive_finite_values(fmt) -> np.ndarray:
    values = fmt.values()
    return np.unique(values[np.isfinite(values) & (values > 0)])


def _power_label(value: float) -> str:
    return f"$2^{{{int(np.log2(value))}}}$"


def rounding_error(names: str | FloatFormat | Sequence[str | FloatFormat] = ("E4M3", "E5M2"),
                   low_exponent: int = -19, high_exponent: int = 18, points: int = 6000) -> Figure:
    """Relative error of round-to-nearest-even over a wide range of inputs, one panel per format.

    In the normal range the error never exceeds half a gap, ``2**-(M+1)`` (the dashed line): 6.25%
    for E4M3, 12.5% for E5M2. In the subnormals (orange band, from half the smallest subnormal to
    the smallest normal) the gap stays fixed while the numbers shrink, so the relative error grows;
    below them (hatched) everything rounds to zero (100% error). Past half a gap above the largest
    value (grey band, from 464 for E4M3 and 61440 for E5M2; below it an input rounds to the max, as
    overflow is judged after rounding) there is no number at all: E4M3 gives NaN and E5M2 gives Inf
    (``saturate=False``); formats with neither (FP6, FP4) saturate to their max.

    Parameters
    ----------
    names : str or sequence of str
        One format name, or several: one panel each.
    low_exponent, high_exponent : int
        The input range is ``[2**low_exponent, 2**high_exponent]``, ``low_exponent < high_exponent``.
    points : int
        Number of log-spaced inputs (at least 2).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmts = _formats.get_list(names)
    low_exponent = _check_int(low_exponent, "low_exponent", -1074, 1022)  # float64's range
    high_exponent = _check_int(high_exponent, "high_exponent", low_exponent + 1, 1023)
    points = _check_int(points, "points", 2)
    figure, axes = _new_figure(8.0, 2.3 * len(fmts) + 0.6, rows=len(fmts), sharex=True, sharey=True)
    # Log-spaced inputs, nudged off the powers of two so that few land exactly on a value.
    x = np.logspace(low_exponent, high_exponent, points, base=2.0) * (1 + 1 / 3 * 2.0**-20)
    for ax, fmt in zip(axes, fmts):
        with np.errstate(invalid="ignore"):
            error = np.abs(quantize(x, fmt).astype(np.float64) - x) / x
        unit_roundoff = 2.0 ** -(fmt.mantissa_bits + 1)
        rounds_to_zero = fmt.min_subnormal / 2  # (below it every input rounds to zero)
        # Each region is drawn and labelled where it lies in view only (E8M0 overflows far beyond
        # 2**18: its band, from 1.5 * 2**127, covered the whole axis and its label sat in the margin).
        view_low, view_high = 2.0**low_exponent, 2.0**high_exponent
        subnormal_low, subnormal_high = max(rounds_to_zero, view_low), min(fmt.min_normal, view_high)
        if fmt.has_subnormals and subnormal_low < subnormal_high:
            ax.axvspan(subnormal_low, subnormal_high, color=SUBNORMAL_COLOR, alpha=0.12, linewidth=0)
            ax.text(np.sqrt(subnormal_low * subnormal_high), 1e-3, "subnormal", ha="center", fontsize=8,
                    color="#a0522d")
        if rounds_to_zero > view_low:
            zero_high = min(rounds_to_zero, view_high)
            ax.axvspan(view_low, zero_high, facecolor="none", edgecolor=SUBNORMAL_COLOR, alpha=0.35,
                       hatch="////", linewidth=0)
            if zero_high > 4 * view_low:  # (room for the label)
                ax.text(np.sqrt(zero_high * view_low), 1e-3, "rounds to 0", ha="center", fontsize=8,
                        color="#a0522d")
        overflows_from, _ = _overflow_threshold(fmt)  # max + half a gap (E4M3's tie 464 rounds to even, 448)
        if overflows_from < view_high:
            overflow_low = max(overflows_from, view_low)
            ax.axvspan(overflow_low, view_high, color=OVERFLOW_COLOR, alpha=0.18, linewidth=0)
            overflow_name = "Inf" if fmt.has_infinity else "NaN" if fmt.has_nan else f"saturates to {fmt.max:g}"
            ax.text(np.sqrt(overflow_low * view_high), 1e-2, f"overflow: {overflow_name}",
                    ha="center", va="center", rotation=90, fontsize=8)
        ax.plot(x, error, color=_color(fmt), linewidth=0.6)
        ax.axhline(unit_roundoff, color="black", linestyle="--", linewidth=0.8)
        ax.text(2.0 ** (low_exponent + 0.3), unit_roundoff * 1.15, f"$2^{{-{fmt.mantissa_bits + 1}}}$ = "
                f"{100 * unit_roundoff:g}%", fontsize=8, va="bottom")
        ax.set_title(f"{fmt.name}: relative error of round-to-nearest-even", fontsize=10)
        ax.set_yscale("log")
        ax.set_ylim(3e-4, 2.0)
        _percent_axis(ax, ticks=[1e-3, 1e-2, 1e-1, 1.0])
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_ylabel("|q(x) - x| / |x|")
    axes[-1].set_xlabel("x")
    _log2_axis(axes[-1], low_exponent, high_exponent)
    return figure


# ================================================================================================
# Rounding (tutorial 02)
# ================================================================================================
def rounding_modes(name: str | FloatFormat = "E4M3", inputs: Sequence[float] = (1.0625, 1.1875, 1.28, 1.45),
                   random_bit_count: int = 8) -> Figure:
    """Where each rounding mode of `minifp8.quantize` sends a few inputs, on a number line.

    One row per mode: the format's values as ticks, each input as a dot with an arrow to the value
    it becomes. ``nearest_even`` and ``nearest_away`` part only at a tie (labelled), ``toward_zero``
    takes the neighbour below a positive input, and ``stochastic`` takes either neighbour: its two
    arrows are labelled with the fraction of the ``2**random_bit_count`` random-bit patterns that
    give each one, counted by running `minifp8.quantize` on every pattern (so the labels are the
    codec's own probabilities, ``f`` rounded to ``random_bit_count`` bits, not a formula's).

    Parameters
    ----------
    name : str or FloatFormat
        Format name.
    inputs : sequence of float
        Positive finite inputs, at most the format's largest value, that together span at most 40
        of its values (so that the ticks stay readable); rounded to float32 first.
    random_bit_count : int
        Width of the random bits of ``stochastic``, in ``[1, 16]``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmt = _formats.get(name)
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence) or not inputs:
        raise TypeError(f"rounding_modes needs inputs: a non-empty sequence of numbers, got {_described(inputs)}")
    x = np.array([_number(value, f"inputs[{index}]", positive=True) for index, value in enumerate(inputs)],
                 np.float32)
    if not (0 < x).all() or (x > fmt.max).any():  # (a number > 0 can round to 0 or Inf in float32)
        raise ValueError(f"rounding_modes needs inputs in (0, {fmt.max:g}], {fmt.name}'s largest value, as float32; "
                         f"got {x.tolist()}")
    random_bit_count = _check_int(random_bit_count, "random_bit_count", 1, 16)
    values = _positive_finite_values(fmt)
    below = values[np.searchsorted(values, x.min(), side="right") - 1] if x.min() >= values[0] else 0.0
    above = values[min(np.searchsorted(values, x.max(), side="left"), values.size - 1)]
    shown = values[(values >= below) & (values <= above)]
    if below == 0.0:
        shown = np.concatenate([[0.0], shown])
    if shown.size > 40:
        raise ValueError(f"rounding_modes draws one tick per {fmt.name} value between the inputs; these span "
                         f"{shown.size} of them, more than 40: keep the inputs within a few gaps of each other")
    patterns = np.arange(1 << random_bit_count, dtype=np.uint16)
    every_pattern = quantize(np.repeat(x[:, None], patterns.size, axis=1), fmt, rounding="stochastic",
                             random_bits=np.broadcast_to(patterns, (x.size, patterns.size)),
                             random_bit_count=random_bit_count).astype(np.float64)
    rounded = {mode: quantize(x, fmt, rounding=mode).astype(np.float64)
               for mode in ("nearest_even", "nearest_away", "toward_zero")}
    low_neighbour, away, x64 = rounded["toward_zero"], rounded["nearest_away"], x.astype(np.float64)
    tie = (x64 != low_neighbour) & (x64 - low_neighbour == away - x64)

    rules = {"nearest_even": "the nearer; a tie to the even code", "nearest_away": "the nearer; a tie away from 0",
             "toward_zero": "the one toward 0 (truncation)",
             "stochastic": f"either one, with the probability marked ({random_bit_count} random bits)"}
    figure, axes = _new_figure(8.0, 6.4, rows=len(rules), sharex=True)
    color = _color(fmt)
    arrow = {"arrowstyle": "-|>", "color": color, "shrinkA": 3, "shrinkB": 1}
    for axis, (mode, rule) in zip(axes, rules.items()):
        axis.axhline(0, color="black", linewidth=0.8)
        axis.vlines(shown, -0.12, 0.12, color="black", linewidth=1.0)
        axis.plot(x, np.full(x.size, 0.75), "o", color=color, markersize=5)
        axis.set_ylim(-0.35, 1.25)
        axis.set_yticks([])
        axis.tick_params(axis="x", length=0)
        for side in ("left", "right", "top", "bottom"):
            axis.spines[side].set_visible(False)
        axis.set_title(f"{mode}: {rule}", fontsize=9, loc="left")
        if mode == "stochastic":
            for value, low, patterns_rounded in zip(x64, low_neighbour, every_pattern):
                up = int(np.count_nonzero(patterns_rounded != low))
                if up == 0:  # (x is one of the format's values)
                    axis.annotate("", xy=(low, 0.12), xytext=(value, 0.75), arrowprops=arrow)
                    continue
                high = float(patterns_rounded[patterns_rounded != low][0])
                for target, count in ((low, patterns.size - up), (high, up)):
                    if count:
                        axis.annotate("", xy=(target, 0.12), xytext=(value, 0.75),
                                      arrowprops={**arrow, "linewidth": 0.5 + 2.5 * count / patterns.size})
                        axis.text((value + target) / 2, 0.43, f"{count}/{patterns.size}", ha="center",
                                  va="center", fontsize=7, color=color,
                                  bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
            continue
        for value, target, is_tie in zip(x64, rounded[mode], tie):
            axis.annotate("", xy=(target, 0.12), xytext=(value, 0.75), arrowprops=arrow)
            if mode != "toward_zero" and is_tie:
                axis.text(value, 0.95, "tie", ha="center", va="bottom", fontsize=7)
    axes[-1].set_xticks(shown, [f"{value:g}" for value in shown], fontsize=7)
    axes[-1].set_xlabel(f"{fmt.name} values (ticks) and the inputs (dots)")
    return figure


def stochastic_rounding_bias(name: str = "E4M3", low: float = 1.0, high: float = 1.5, points: int = 161,
                             samples: int = 4096, seed: int = 0) -> Figure:
    """Mean of many stochastic roundings against the input, next to round-to-nearest-even.

    Top: the average of ``samples`` stochastic roundings of each input lies on the diagonal
    (unbiased), while nearest rounding is a staircase. Bottom: the bias ``mean - x`` in units of
    the gap between neighbouring values: nearest rounding swings between -1/2 and +1/2, stochastic
    rounding's scatters within sampling noise, the band of +-2 standard errors of a mean of
    ``samples`` draws (which holds about 95% of the points: 154 of the default 161).

    Parameters
    ----------
    name : str
        Format name.
    low, high : float
        Input range, ``0 < low < high``; best kept inside one binade so that the gap is constant.
    points : int
        Number of inputs (at least 2).
    samples : int
        Stochastic roundings averaged per input (16 random bits each; at least 1).
    seed : int
        Seed of the ``numpy.random.Generator`` that draws the random bits.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmt = _formats.get(name)
    low, high = _number(low, "low"), _number(high, "high")
    if not 0 < low < high < math.inf:
        raise ValueError(f"stochastic_rounding_bias draws positive inputs: it needs 0 < low < high, got "
                         f"low={low!r}, high={high!r}")
    points, samples = _check_int(points, "points", 2), _check_int(samples, "samples", 1)
    seed = _check_int(seed, "seed", 0)
    x = np.linspace(low, high, points)
    random_bits = np.random.default_rng(seed).integers(0, 1 << 16, size=(points, samples), dtype=np.uint16)
    inputs = np.broadcast_to(x[:, None], random_bits.shape)
    stochastic = quantize(inputs, fmt, rounding="stochastic", random_bits=random_bits).astype(np.float64)
    mean = stochastic.mean(axis=1)
    nearest = quantize(x, fmt).astype(np.float64)
    # The spacing of the values around each x: its binade's, or below the smallest normal the
    # subnormals' fixed one, 2**(emin - M).
    gap = 2.0 ** (np.maximum(np.floor(np.log2(x)), fmt.emin) - fmt.mantissa_bits)

    figure, (value_axis, bias_axis) = _new_figure(8.0, 5.6, rows=2, sharex=True)
    value_axis.plot(x, x, color="black", linestyle=":", linewidth=0.8, label="x (no rounding)")
    value_axis.plot(x, nearest, color=OVERFLOW_COLOR, linewidth=1.5, label="nearest_even(x)")
    value_axis.plot(x, mean, ".", color=_color(fmt), markersize=3,
                    label=f"mean of {samples} stochastic roundings")
    value_axis.set_ylabel(f"value after rounding to {fmt.name}")
    value_axis.legend(loc="upper left", fontsize=8)
    value_axis.grid(True, alpha=0.3)
    value_axis.set_title(f"Rounding inputs in [{low:g}, {high:g}] to {fmt.name}: "
                         "stochastic rounding is unbiased on average", fontsize=10)

    fraction = x / gap - np.floor(x / gap)
    standard_error = np.sqrt(fraction * (1 - fraction) / samples)
    bias_axis.fill_between(x, -2 * standard_error, 2 * standard_error, color=_color(fmt), alpha=0.15,
                           linewidth=0, label="±2 standard errors of the mean")
    bias_axis.plot(x, (nearest - x) / gap, color=OVERFLOW_COLOR, linewidth=1.5, label="nearest_even")
    bias_axis.plot(x, (mean - x) / gap, ".-", color=_color(fmt), markersize=3, linewidth=0.6,
                   label="stochastic (mean)")
    bias_axis.axhline(0, color="black", linewidth=0.6)
    bias_axis.set_ylim(-0.6, 0.9)
    bias_axis.set_ylabel("bias (mean - x)\nin gaps between values")
    bias_axis.set_xlabel("x")
    bias_axis.legend(loc="upper center", fontsize=8, ncols=3)
    bias_axis.grid(True, alpha=0.3)
    return figure


# ================================================================================================
# Scaling (tutorials 03-04)
# ================================================================================================
def delayed_scaling_outlier(steps: int = 50, spike_step: int = 30, spike_factor: float = 8.0,
                            history_len: int = 16, size: int = 4096, name: str = "E4M3", seed: int = 0) -> Figure:
    """Delayed scaling through one outlier step, next to current scaling.

    Every step casts a fresh tensor of ``size`` standard normal values (drawn from one
    ``numpy.random.Generator`` seeded with ``seed``); at ``spike_step`` the tensor is
    ``spike_factor`` times larger. `minifp8.scaling.DelayedScaling` casts each step with the
    scale computed from the amax history of the steps before.

    Top: the amax of each step, and the amax the delayed scale was computed from (``fp8_max /
    scale``): the max of the last ``history_len`` steps, which holds the outlier for
    ``history_len`` steps afterwards. Middle: the scale each recipe multiplies by. Bottom: the
    number of values that clip at ``+-fp8_max`` in each step (current scaling never clips).

    ``spike_step`` must be one of the ``steps`` (``0 <= spike_step < steps``), ``spike_factor``
    a finite positive number that keeps the outlier step's float32 tensor finite and nonzero,
    ``size`` at least 1 and ``seed`` a non-negative integer. ``name``
    is a format with NaN or Inf (the FP8 formats): a clipped value is one whose cast without
    saturation overflows to them.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .scaling import DelayedScaling, scale_from_amax

    steps = _check_int(steps, "steps", 1)
    spike_step = _check_int(spike_step, "spike_step", 0, steps - 1)
    size, seed = _check_int(size, "size", 1), _check_int(seed, "seed", 0)
    spike_factor = _number(spike_factor, "spike_factor", positive=True)
    fmt = _formats.get(name)
    if not (fmt.has_nan or fmt.has_infinity):
        raise ValueError(f"delayed_scaling_outlier needs a format whose overflow shows as NaN or Inf (an FP8 "
                         f"format), got {fmt.name}, which saturates instead")
    rng = np.random.default_rng(seed)
    recipe = DelayedScaling(fmt, history_len=history_len)
    amax: list[float] = []
    delayed_scales: list[float] = []
    current_scales: list[float] = []
    clipped_counts: list[int] = []
    for step in range(steps):
        x = rng.normal(0.0, 1.0, size).astype(np.float32)
        if step == spike_step:
            with np.errstate(over="ignore", under="ignore"):
                x *= np.float32(spike_factor)
            if not (np.isfinite(x).all() and x.any()):  # (an Inf or 0 amax is no outlier to draw on a log axis)
                raise ValueError(f"spike_factor must keep the outlier step's float32 tensor finite and nonzero, "
                                 f"got {spike_factor!r}, which makes its amax {float(np.max(np.abs(x)))!r}")
        result = recipe.quantize(x)
        amax.append(float(result.amax))
        delayed_scales.append(float(result.scale))
        current_scales.append(float(scale_from_amax(result.amax, fmt)))
        with np.errstate(over="ignore"):  # saturated: the cast without saturation would overflow
            overflow = quantize(x * result.scale, fmt)
        clipped_counts.append(int(np.sum(~np.isfinite(overflow))))
    step_axis = np.arange(steps)
    delayed_scale, current_scale, clipped = map(np.array, (delayed_scales, current_scales, clipped_counts))
    window = "#2ca02c"

    figure, (amax_axis, scale_axis, clip_axis) = _new_figure(8.0, 7.0, rows=3, sharex=True)
    for ax in (amax_axis, scale_axis, clip_axis):
        ax.axvspan(spike_step + 0.5, spike_step + history_len + 0.5, color=window, alpha=0.18, linewidth=0)
        ax.grid(True, alpha=0.3)
    amax_axis.plot(step_axis, amax, "o", color="black", markersize=3.5, label="amax of this step's tensor")
    # Step 0 has no history yet and casts with scale 1; the lines start at step 1.
    amax_axis.step(step_axis[1:], fmt.max / delayed_scale[1:], where="mid", color=_color(fmt), linewidth=1.5,
                   label=f"amax the delayed scale came from (max of the {history_len} steps before)")
    amax_axis.set_yscale("log", base=2)
    amax_axis.set_ylabel("amax")
    amax_axis.legend(loc="upper left", fontsize=8)
    amax_axis.annotate(f"outlier step: {spike_factor:g}x larger", (spike_step, amax[spike_step]),
                       xytext=(-8, -4), textcoords="offset points", ha="right", va="top", fontsize=8)
    amax_axis.set_ylim(top=amax_axis.get_ylim()[1] * 2)
    amax_axis.text(spike_step + history_len / 2 + 0.5, amax[spike_step] * 1.25,
                   f"the outlier is in the {history_len}-step history", ha="center", va="bottom", fontsize=8,
                   color="#1a6e1a")
    amax_axis.set_title(f"Delayed scaling ({fmt.name}, history_len={history_len}, amax_compute_algo='max') "
                        f"through one outlier step", fontsize=10)

    scale_axis.step(step_axis[1:], delayed_scale[1:], where="mid", color=_color(fmt), linewidth=1.5,
                    label="delayed: fp8_max / amax of the history")
    scale_axis.plot(step_axis, current_scale, ".", color=OVERFLOW_COLOR, markersize=5,
                    label="current: fp8_max / amax of this step")
    scale_axis.set_yscale("log", base=2)
    scale_axis.set_ylabel("scale")
    scale_axis.legend(loc="lower left", fontsize=8)

    shown = np.where(clipped > 0, clipped, np.nan)
    clip_axis.bar(step_axis, shown, color=_color(fmt), width=0.7, label="delayed")
    for clipped_step in np.flatnonzero(clipped):
        clip_axis.annotate(f"{clipped[clipped_step]}", (clipped_step, clipped[clipped_step]), xytext=(0, 2),
                           textcoords="offset points", ha="center", va="bottom", fontsize=8)
    clip_axis.set_yscale("log")
    clip_axis.set_ylim(0.5, size * 4)
    clip_axis.set_ylabel(f"values clipped\nat ±{fmt.max:g} (of {size})")
    clip_axis.set_xlabel("training step")
    clip_axis.text(0.99, 0.93, "current scaling clips none", transform=clip_axis.transAxes, ha="right", va="top",
                   fontsize=8, color=OVERFLOW_COLOR)
    clip_axis.set_xlim(-0.8, steps - 0.2)
    return figure


BLOCK_RECIPE_COLORS = {"E4M3 per tensor": FORMAT_COLORS["E4M3"], "MXFP8_E4M3": "#ff7f0e",
                       "MXFP6_E2M3": FORMAT_COLORS["E2M3"], "MXFP4_E2M1": FORMAT_COLORS["E2M1"],
                       "NVFP4": "#2ca02c"}
BLOCK_RECIPE_MARKERS = {"E4M3 per tensor": "o", "MXFP8_E4M3": "s", "MXFP6_E2M3": "^", "MXFP4_E2M1": "v",
                        "NVFP4": "D"}  # (some colour pairs meet under colour-vision deficiencies)


def block_scaling_snr(rows: int = 57, columns: int = 2048, low_exponent: int = -28, seed: int = 0) -> Figure:
    """Signal-to-noise ratio of each row of a tensor whose rows differ in scale, per recipe.

    Row i holds ``columns`` standard normal values times ``2**e_i``, with ``e_i`` evenly spaced
    from ``low_exponent`` to 0, so the tensor's amax lies in the top row. Each row's SNR,
    ``10 log10(sum x^2 / sum (q(x) - x)^2)`` in dB, is plotted against its scale for E4M3 with
    one current scale for the whole tensor, MXFP8 (E4M3), MXFP6 (E2M3), MXFP4 (E2M1) and NVFP4.

    A per-tensor scale serves the rows near the amax and flushes the rows below it ever more (with
    the defaults: 37% of a row's values at ``2**-16``, 96% at ``2**-18``, all but one of the 2048 at
    ``2**-19``, and all of them from ``2**-19.5`` down).
    MX block scales (E8M0, any power of two) keep every row at its format's SNR. NVFP4 shares one
    float32 scale per tensor and E4M3 block scales, which cover about ``2**17`` below the amax.

    ``rows`` and ``columns`` are at least 1, ``low_exponent`` from -126 to -1.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from . import mx
    from .scaling import quantize_current

    rows, columns = _check_int(rows, "rows", 1), _check_int(columns, "columns", 1)
    low_exponent, seed = _check_int(low_exponent, "low_exponent", -126, -1), _check_int(seed, "seed", 0)

    exponents, x = _rows_at_scales(rows, columns, low_exponent, seed)
    results = {"E4M3 per tensor": quantize_current(x, "E4M3").dequantize()}
    for name in ("MXFP8_E4M3", "MXFP6_E2M3", "MXFP4_E2M1"):
        results[name] = mx.quantize(x, name).dequantize()
    results["NVFP4"] = mx.quantize_nvfp4(x).dequantize()
    bits = {"E4M3 per tensor": "8", "MXFP8_E4M3": "8.25", "MXFP6_E2M3": "6.25", "MXFP4_E2M1": "4.25",
            "NVFP4": "4.5"}

    figure, (ax,) = _new_figure(8.0, 4.6)
    signal = np.sum(np.square(x, dtype=np.float64), axis=1)
    for name, values in results.items():
        noise = np.sum(np.square(values.astype(np.float64) - x), axis=1)
        snr = 10 * np.log10(signal / np.maximum(noise, np.finfo(np.float64).tiny))
        ax.plot(exponents, snr, "-", marker=BLOCK_RECIPE_MARKERS[name], color=BLOCK_RECIPE_COLORS[name],
                linewidth=1.2, markersize=3.5, label=f"{name} ({bits[name]} bits/value)")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.text(low_exponent + 0.5, -0.4, "0 dB: every value of the row rounded to zero", fontsize=8, va="top",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})
    ax.set_xlabel("scale of the row, relative to the top row ($\\log_2$)")
    ax.set_ylabel("SNR of the row (dB)")
    ax.set_xlim(low_exponent - 0.5, 0.5)
    ax.set_ylim(-4, 40)
    ax.set_xticks(np.arange(0, low_exponent - 1, -4))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncols=2)
    scales = f"rows of {columns} normal values, scales $2^{{{low_exponent}}}$ to $2^0$" if rows > 1 else \
        f"row of {columns} normal values, at scale $2^0$"  # (one row is the top row)
    ax.set_title(f"Quantising {rows} {scales}: per-tensor vs per-block scales", fontsize=10)
    return figure


def _rows_at_scales(rows: int, columns: int, low_exponent: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`block_scaling_snr`'s tensor (its arguments checked): the row exponents, evenly spaced from
    ``low_exponent`` to 0, and float32 ``(rows, columns)`` standard normal values times ``2**e_i``."""
    exponents = np.linspace(low_exponent, 0, rows) if rows > 1 else np.zeros(1)  # (one row: the top row, at 0)
    rng = np.random.default_rng(seed)
    with np.errstate(under="ignore"):  # (low_exponent may reach float32's subnormals)
        return exponents, (rng.standard_normal((rows, columns)) * np.exp2(exponents)[:, None]).astype(np.float32)


# ================================================================================================
# Scale tracking (unit scaling)
# ================================================================================================
NORMAL_BAND_ALPHA, SUBNORMAL_BAND_ALPHA = 0.2, 0.1  # scale_plot's shading of each format's ranges
SCALE_FORMATS = ("E4M3", "E5M2")  # the forward values are cast to E4M3, the gradients to E5M2


def scale_plot(records: ScaleTracker | dict[str, ScaleRecord] | Iterable[ScaleRecord], title: str | None = None,
               statistic: str = "std") -> Figure:
    """The scale of every tracked tensor and of its gradient, one row per tensor on a log2 axis.

    After the unit-scaling library's visualiser (``unit_scaling.analysis.plot``): each row is one
    tensor recorded by ``minifp8.fp8.track`` inside a ``ScaleTracker``, top to bottom in the order
    they were tracked. A circle marks the scale of the value (forward pass) and a triangle that of
    its gradient (backward pass). Behind them, the upper half of each row shades the E4M3 range the
    values are cast to and the lower half the E5M2 range of the gradients: shaded for the normal
    numbers, lighter and dotted for the subnormals (fewer significant bits). A scale left of the
    shading is flushed to zero by a naive cast; right of it, it overflows. A statistic of exactly 0
    is drawn as a hollow marker on the left edge, an Inf one (a tensor holding an Inf: its mean |x|)
    as a hollow marker on the right edge, and a NaN one (a tensor holding a NaN, or an Inf: its std)
    as a cross on the right edge; the legend then says so. A record without a gradient
    (``backward_*`` None) draws no triangle.

    Parameters
    ----------
    records : ScaleTracker, dict of str -> ScaleRecord, or sequence of ScaleRecord
        What a ``minifp8.fp8.ScaleTracker`` recorded.
    title : str, optional
    statistic : {"std", "mean_abs"}
        The standard deviation or the mean of |x|.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if statistic not in ("std", "mean_abs"):
        raise ValueError(f"statistic must be 'std' or 'mean_abs', got {statistic!r}")
    given: object = getattr(records, "records", records)  # (a ScaleTracker's dict, or records itself)
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise TypeError("scale_plot needs a ScaleTracker, a dict of name -> ScaleRecord or a sequence of "
                        f"ScaleRecords, got {_described(given)}")
    tracked: list[ScaleRecord] = list(given.values()) if isinstance(given, dict) else list(given)
    if not tracked:
        raise ValueError("scale_plot needs at least one record (track tensors inside a ScaleTracker)")
    for record in tracked:
        if not hasattr(record, f"forward_{statistic}"):
            raise TypeError(f"scale_plot needs ScaleRecords (what a ScaleTracker records), got "
                            f"{type(record).__name__} {record!r}")
    forward = np.array([getattr(r, f"forward_{statistic}") for r in tracked], dtype=np.float64)
    gradients = [getattr(r, f"backward_{statistic}") for r in tracked]
    backward = np.array([np.nan if g is None else g for g in gradients], dtype=np.float64)
    no_gradient = np.array([g is None for g in gradients])  # (NaN in backward, but drawn as nothing)
    fmts = [_formats.get(name) for name in SCALE_FORMATS]
    shown = np.concatenate([forward, backward])
    positive = shown[np.isfinite(shown) & (shown > 0)]
    low = min([int(np.floor(np.log2(f.min_subnormal))) - 1 for f in fmts]
              + ([int(np.floor(np.log2(positive.min()))) - 1] if positive.size else []))
    high = max([int(np.ceil(np.log2(f.max))) + 1 for f in fmts]
               + ([int(np.ceil(np.log2(positive.max()))) + 1] if positive.size else []))

    rows = len(tracked)
    figure, (ax,) = _new_figure(8.0, 0.32 * rows + 1.9)
    for fmt, (top, bottom) in zip(fmts, ((0.0, 0.45), (-0.45, 0.0))):  # forward above, backward below
        color = _color(fmt)
        for row in range(rows):
            band = (row - bottom, row - top)  # the y axis is inverted: row 0 at the top
            ax.fill_betweenx(band, fmt.min_normal, fmt.max, color=color, alpha=NORMAL_BAND_ALPHA, linewidth=0)
            ax.fill_betweenx(band, fmt.min_subnormal, fmt.min_normal, color=color, alpha=SUBNORMAL_BAND_ALPHA,
                             linewidth=0, hatch="....", edgecolor=color)  # (dots: apart from the normals without colour)
    y = np.arange(rows)
    hollow = crossed = False  # (whether the legend must explain the edge markers)
    for values, absent, offset, marker, fmt, label in (
            (forward, np.zeros(rows, dtype=bool), -0.22, "o", fmts[0], "value (forward)"),
            (backward, no_gradient, 0.22, "^", fmts[1], "gradient (backward)")):
        finite = np.isfinite(values) & (values > 0)
        ax.plot(values[finite], y[finite] + offset, marker, color=_color(fmt), markersize=6, linestyle="none",
                label=f"{label}: {statistic}")
        # on the edges, not clipped: 0 on the left, Inf on the right (hollow), NaN on the right (a cross)
        for where, at, look in ((values == 0, 2.0**low, marker), (values == np.inf, 2.0**high, marker),
                                (np.isnan(values) & ~absent, 2.0**high, "x")):
            if where.any():
                ax.plot(np.full(int(where.sum()), at), y[where] + offset, look, color=_color(fmt), markersize=6,
                        linestyle="none", clip_on=False, **({"markerfacecolor": "none"} if look != "x" else {}))
                hollow, crossed = hollow or look != "x", crossed or look == "x"
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    if hollow:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", color="grey", linestyle="none",
                              label="hollow: 0 (left edge) or Inf (right edge)"))
    if crossed:
        handles.append(Line2D([], [], marker="x", color="grey", linestyle="none", label="cross: NaN (right edge)"))
    for fmt in fmts:
        handles.append(Patch(facecolor=_color(fmt), alpha=NORMAL_BAND_ALPHA, linewidth=0, label=f"{fmt.name} normal"))
        handles.append(Patch(facecolor=_color(fmt), alpha=SUBNORMAL_BAND_ALPHA, linewidth=0, hatch="....",
                             edgecolor=_color(fmt), label=f"{fmt.name} subnormal"))
    # Below the x label, wherever the tick labels put it: constrained layout makes room for an
    # "outside" figure legend (matplotlib 3.7).
    figure.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    ax.set_yticks(y, [r.name for r in tracked])
    ax.set_ylim(rows - 0.5, -0.5)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel(f"{'standard deviation' if statistic == 'std' else 'mean |x|'} (log scale)")
    _log2_axis(ax, low, high, step=max(2, (high - low) // 12))
    ax.set_title(title or "Scales of the tracked tensors and their gradients", fontsize=10)
    return figure


def gpt_cast_scales(config: GPTConfig, batch_size: int, seed: int = 0) -> list[ScaleRecord]:
    """The activations and gradients that the FP8 casts of a freshly initialised GPT would see, from
    one forward and backward pass.

    Builds ``minifp8.model.GPT(config)`` (weights from ``seed``), takes one training batch of
    ``batch_size`` windows of ``config.block_size`` tokens from the bundled arithmetic corpus, and
    runs the loss forward and backward in float32 (no casts) inside a ``ScaleTracker``. Every
    linear layer's GEMM and every attention core is wrapped with ``fp8.track`` at the tensors
    ``fp8.apply_recipe`` would cast (`minifp8.fp8`'s module docstring), giving one record per cast point in
    the order the forward pass reaches them, ready for `scale_plot`:

    * a linear layer: ``forward_*`` of its input x (cast to E4M3), ``backward_*`` of the gradient
      of its output (cast to E5M2);
    * an attention core: ``forward_*`` of q, k and v together (each cast to E4M3), ``backward_*``
      of the gradient of its output (cast to E5M2).

    The weights, which the recipes cast to E4M3 too, are not recorded (their scale is the
    initialisation's: tutorial 6 counts the share of each below E4M3's smallest normal), nor are the
    model's own ``track`` calls (embedding, residual stream, ...).

    Parameters
    ----------
    config : minifp8.model.GPTConfig
        Its ``vocab_size`` must be the corpus' (14).
    batch_size : int
    seed : int
        Seeds the weights, the corpus and the batch.

    Returns
    -------
    list of minifp8.fp8.ScaleRecord
    """
    from . import data, fp8
    from .autograd import Tensor
    from .model import GPT

    batch_size, seed = _check_int(batch_size, "batch_size", 1), _check_int(seed, "seed", 0)
    model = GPT(config, rng=np.random.default_rng(seed))
    for name, module in model.named_modules():
        if hasattr(module, "gemm"):
            module.gemm = (lambda x, weight, bias=None, name=name, gemm=module.gemm:
                           fp8.track(f"{name}:out", gemm(fp8.track(f"{name}:in", x), weight, bias)))
        if hasattr(module, "attention_core"):

            def core(q, k, v, causal, name=name, attention=module.attention_core):
                fp8.track(f"{name}:in", Tensor(np.stack([q.data, k.data, v.data])))  # forward only
                return fp8.track(f"{name}:out", attention(q, k, v, causal))

            module.attention_core = core
    dataset = data.load_dataset(seed=seed)
    if dataset.vocab_size != config.vocab_size:
        raise ValueError(f"gpt_cast_scales: config.vocab_size is {config.vocab_size}, the arithmetic corpus has "
                         f"{dataset.vocab_size} tokens")
    ids, targets = dataset.get_batch("train", batch_size, config.block_size, np.random.default_rng(seed))
    with fp8.ScaleTracker() as tracker:
        model(ids, targets)[1].backward()
    records = tracker.records
    names = [key[:-len(":in")] for key in records if key.endswith(":in")]  # in the order the forward pass ran
    return [fp8.ScaleRecord(name, records[f"{name}:in"].shape, records[f"{name}:in"].forward_std,
                            records[f"{name}:in"].forward_mean_abs, records[f"{name}:out"].backward_std,
                            records[f"{name}:out"].backward_mean_abs)
            for name in names]


# The contraction axis of each GEMM of a linear layer Y = X W^T, and what it computes (fp8.GEMMS
# gives the copies each reads).
_LINEAR_GEMMS = {"fprop": ("in_features", "Y = X W\u1d40"), "dgrad": ("out_features", "dX = dY W"),
                 "wgrad": ("tokens", "dW = dY\u1d40 X")}
_LINEAR_TENSORS = {"x": "X", "w": "W", "grad": "dY"}


def fp8_linear_gemms() -> Figure:
    """The three GEMMs of an FP8 linear layer ``Y = X W^T`` and the casts in front of each.

    One row per GEMM of `minifp8.fp8.GEMMS` (TransformerEngine's fprop, dgrad and wgrad), with the
    two copies it reads: X and W cast to `minifp8.fastcast.FORWARD_FORMAT` (E4M3), the output
    gradient dY to `BACKWARD_FORMAT` (E5M2), each along the GEMM's contraction axis. A ``_t`` copy
    is the same tensor cast along its other axis: under a per-tensor recipe it is the plain copy,
    under a block recipe it has scales of its own (but ``blockwise``'s 128x128 weight tiles serve
    ``w_t`` too). A cast's backward pass is the identity (the
    straight-through estimator), so dX and dW reach the float32 X and W unrounded.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .fastcast import BACKWARD_FORMAT, FORWARD_FORMAT
    from .fp8 import GEMMS

    figure, axes = _new_figure(9.0, 5.0)  # (without matplotlib: its ImportError first)
    axis = axes[0]
    axis.set_xlim(0, 10)
    axis.set_ylim(0, 9.4)
    axis.set_axis_off()
    box = {"boxstyle": "round,pad=0.3", "linewidth": 1.0}
    arrow = {"arrowstyle": "-|>", "color": "#444444", "linewidth": 1.0, "shrinkA": 2, "shrinkB": 2}
    for row, (gemm, copies) in enumerate(GEMMS.items()):
        contraction, product = _LINEAR_GEMMS[gemm]
        middle = 7.6 - 3.0 * row
        for offset, copy in zip((0.65, -0.65), copies):
            tensor = copy.removesuffix("_t")
            fmt = BACKWARD_FORMAT if tensor == "grad" else FORWARD_FORMAT
            name = _LINEAR_TENSORS[tensor] + (f" ({copy} copy)" if copy != tensor else "")
            y = middle + offset
            axis.text(1.2, y, name, ha="center", va="center", fontsize=9,
                      bbox={**box, "facecolor": "#f2f2f2", "edgecolor": "#999999"})
            axis.text(4.0, y, f"cast to {fmt.name}\nalong {contraction}", ha="center", va="center", fontsize=9,
                      bbox={**box, "facecolor": "white", "edgecolor": _color(fmt)}, color=_color(fmt))
            axis.annotate("", xy=(3.05, y), xytext=(2.0, y), arrowprops=arrow)
            axis.annotate("", xy=(6.2, middle), xytext=(4.95, y), arrowprops=arrow)
        axis.text(7.05, middle, f"{gemm}\n{product}", ha="center", va="center", fontsize=10,
                  bbox={**box, "facecolor": "#fff7e0", "edgecolor": "#E69F00"})
        axis.annotate("", xy=(8.75, middle), xytext=(7.95, middle), arrowprops=arrow)
        axis.text(9.35, middle, product.split(" = ")[0], ha="center", va="center", fontsize=10)
    axis.text(5.0, 0.2, "The casts' backward passes are the identity (straight-through): dX and dW reach the "
              "float32 X and W", ha="center", va="center", fontsize=8.5, style="italic")
    return figure


# ================================================================================================
# Training (tutorial 07): add figures here as that part lands.
# ================================================================================================
def _require(figure: str, where: str, mapping, keys, hints: dict[str, str] | None = None) -> None:
    """TypeError unless ``mapping`` is a dict, ValueError naming the first of ``keys`` it lacks (and
    saying ``hints[key]`` after it, where ``hints`` has one for that key)."""
    if not isinstance(mapping, dict):
        raise TypeError(f"{figure}: {where} must be a dict, got {type(mapping).__name__}")
    for key in keys:
        if key not in mapping:
            hint = f": {hints[key]}" if hints and key in hints else ""
            raise ValueError(f"{figure}: {where} has no {key!r} (it has {', '.join(map(repr, mapping)) or 'nothing'})"
                             f"{hint}")


def _first_non_number(values, none: bool) -> int | None:
    """The index of the first of ``values`` that is not a real number (nor None, where ``none``), or
    None if there is none: each distinct type is checked once, and only a failure looks for the index."""
    bad = {kind for kind in set(map(type, values)) if not (_is_real_type(kind) or (none and kind is type(None)))}
    return next(index for index, value in enumerate(values) if type(value) in bad) if bad else None


def _series(values, name: str) -> np.ndarray:
    """A list of numbers of a results document as a 1-D float64 array, None (JSON's null, which the
    results write for NaN) as NaN: TypeError for anything but a list, tuple or 1-D array of numbers,
    ValueError for a nested one."""
    flat = f"{name} must be a flat list of numbers"
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        if values.ndim != 1:
            raise ValueError(f"{flat}, got {_described(values)}")
        return values.astype(np.float64)
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{flat}, got {_described(values)}")
    index = _first_non_number(values, none=True)
    if index is not None:
        if isinstance(values[index], (list, tuple, np.ndarray)):
            raise ValueError(f"{flat}, got a nested one (entry {index} is {_described(values[index])})")
        raise TypeError(f"{flat}, got entry {index} {_described(values[index])}")
    return np.array(values, dtype=np.float64)  # (None gives NaN)


def _runs(results, figure: str, run_keys: tuple, entry_keys: dict,
          hints: dict[str, str] | None = None) -> tuple[dict, dict]:
    """The runs of a ``train_tiny`` results document, checked for what ``figure`` reads, and their
    lists of entries as float64 arrays.

    Each run must hold ``run_keys``; each of its lists named in ``entry_keys`` (``{"val": ("step",
    "loss")}``) must be a list (or None) of dicts with the keys listed there: a number for the
    first (the step), a number or None (NaN) for the others; ``hints`` (field -> text) says more
    where an entry lacks that field (`_require`). Returns ``(runs, columns)`` with
    ``columns[label][key][field]`` the values of ``field`` over the entries of the run's list ``key``
    (empty where a run lacks the list: it is left out of the figure).
    """
    try:
        _require(figure, "results", results, ("runs",))
    except ValueError as error:
        raise ValueError(f"{error}: pass a train_tiny results document (metrics.json of --out DIR, or "
                         f"train_tiny.load_results())") from None
    runs = results["runs"]
    if not isinstance(runs, dict):
        raise TypeError(f"{figure}: results['runs'] must be a dict of run label -> metrics, got {type(runs).__name__}")
    if not runs:
        raise ValueError(f"{figure}: results holds no runs")
    columns: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for label, metrics in runs.items():
        if not isinstance(label, str):
            raise TypeError(f"{figure}: a run's label must be a str, got {_described(label)}")
        _require(figure, f"run {label!r}", metrics, run_keys)
        columns[label] = {}
        for key, fields in entry_keys.items():
            entries = metrics.get(key)
            if entries is not None and not isinstance(entries, (list, tuple)):
                raise TypeError(f"{figure}: run {label!r}: {key!r} must be a list of dicts, got {_described(entries)}")
            columns[label][key] = _entry_columns(entries or [], fields, figure, f"run {label!r}: an entry of {key!r}",
                                                 hints)
    return runs, columns


def _entry_columns(entries, fields: tuple, figure: str, where: str,
                   hints: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """``{field: values}`` over a list of entries of a results document (dicts), as float64 arrays:
    each entry must hold ``fields`` (`_require`, with its ``hints``), a number for the first (the
    step) and a number or None (NaN) for the others, else a ValueError or TypeError naming
    ``where`` and the field."""
    for entry in entries:
        _require(figure, where, entry, fields, hints)
    columns = {}
    for number, field in enumerate(fields):
        values = [entry[field] for entry in entries]
        index = _first_non_number(values, none=number > 0)
        if index is not None:
            _number(values[index], f"{figure}: {where}: {field!r}", none=number > 0)  # raises, naming it
        columns[field] = np.array(values, dtype=np.float64)  # (None gives NaN)
    return columns


def _loss_floor(results: dict, figure: str) -> dict[str, float | None]:
    """``results['loss_floor']`` (the corpus' entropy rate) and ``results['window_loss_floor']`` (the
    floor of the loss over the run's windows, which results before 2026-12-02 lack), checked; None
    where one is not known."""
    return {key: None if results.get(key) is None else _number(results[key], f"{figure}: results[{key!r}]")
            for key in ("loss_floor", "window_loss_floor")}


def _draw_loss_floor(axis, floors: dict[str, float | None]) -> None:
    """Dotted lines at the corpus' entropy rate and at the floor of the run's windowed loss, where
    they are known and finite."""
    for key, style, text in (("loss_floor", ":", "entropy rate of the corpus (whole lines)"),
                             ("window_loss_floor", "-.", "floor of the loss over the run's windows")):
        floor = floors[key]
        if floor is not None and math.isfinite(floor):
            axis.axhline(floor, color="grey", linestyle=style, linewidth=1.0)
            axis.text(0.99, floor, text, transform=axis.get_yaxis_transform(), ha="right", va="bottom", fontsize=8,
                      color="grey")


def _run_curve(losses: np.ndarray, every: int, smooth_steps: int):
    """(steps, losses) of one run's training loss, averaged over windows of about ``smooth_steps``
    (shorter ones where a run would have fewer than ten, so that a short run still draws a line).

    Entry ``i`` of ``losses`` holds steps ``i * every + 1`` to ``(i + 1) * every``; each mean is drawn
    at the middle of the steps it averages. The last window may be shorter: a run that stopped
    early, or diverged, is drawn to its last step."""
    window = max(1, min(round(smooth_steps / every), len(losses) // 10))  # at most len(losses), or 1
    starts = np.arange(0, len(losses), window)
    counts = np.diff(np.append(starts, len(losses)))
    means = np.add.reduceat(losses, starts) / counts if len(losses) else np.empty(0)
    return (starts + counts / 2) * every + 0.5, means


def _loss_axis_limits(curves: dict, columns: dict, floors: dict[str, float | None]) -> tuple[float, float] | None:
    """``(bottom, top)`` of `training_curves`' loss axis where a loss runs far above where the runs
    began, else None (the axis fits the data). The top is 1.25 times the highest first loss (each
    run's first validation loss, or its first training window); the bottom fits what lies below it,
    the drawn floors included, with a 5% margin: matplotlib's own margin, from a loss of 1e12, would
    leave the other curves a line along the top edge."""
    firsts, below = [], []
    highest = -math.inf
    for label, (_, losses) in curves.items():
        finite = [series[np.isfinite(series)] for series in (columns[label]["val"]["loss"], losses)]
        highest = max([highest, *(float(part.max()) for part in finite if part.size)])
        below += [float(part.min()) for part in finite if part.size]
        first = next((float(part[0]) for part in finite if part.size), None)
        if first is not None:
            firsts.append(first)
    if not firsts or highest <= 1.25 * max(firsts):
        return None
    top = 1.25 * max(firsts)
    lowest = min([*below, *(floor for floor in floors.values() if floor is not None and math.isfinite(floor))])
    return lowest - 0.05 * (top - lowest), top


#: `training_curves`' title when none is given (train_tiny's loss.png adds to it).
TRAINING_CURVES_TITLE = "Training the mini-GPT under each recipe"


def training_curves(results: dict, smooth_steps: int = 20, title: str | None = None) -> Figure:
    """Loss curves of every run of a ``train_tiny`` results document, and their worst FP8 underflow.

    Top: the training loss (averaged over windows of about ``smooth_steps`` steps, thin) and the
    validation loss (the run's markers) of each run; the dotted line is the corpus' entropy rate
    when it is known (`minifp8.data.arithmetic_loss_floor`: the floor with whole lines of context),
    and the dash-dotted one the floor of the loss over the run's windows, higher, where the results
    give it (``window_loss_floor``).
    A run that diverged ends in a cross. Where a loss runs above 1.25 times the highest first loss
    (a run that blew up), the axis stops there and says so. Each run has its colour, marker and line style
    (`RUN_STYLES`: the same in every figure); the runs ``unit`` and ``unit fp32`` (the
    unit-scaled model with naive casts and in float32) share a colour, the fp32 one dashed.
    Bottom: the largest fraction of a tensor flushed to zero
    among the cast points of each FP8 run, at each progress line (fp32 runs have no casts). Naive
    FP8 loses most of a gradient here (89-99% in the headline runs); per-tensor and block scales keep
    nearly all (0.1% at most), and unit scaling most (its logits' gradient loses up to 27%).

    Parameters
    ----------
    results : dict
        ``metrics.json`` of ``python -m minifp8.train_tiny --out DIR``, or the headline results
        (``minifp8.train_tiny.load_results()``), whose training losses are window means
        (``train_loss_every`` steps each). At least one run; each needs ``train_loss`` (a list of
        numbers), and is drawn with the ``val`` and ``cast_stats`` it has. A missing key raises a
        ValueError that names the run and the key, as does a document in which no run has a training
        loss or an evaluation; a value of the wrong type, a TypeError.
    smooth_steps : int
        Width of the averaging window of the training loss, in steps (at least 1).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    runs, columns = _runs(results, "training_curves", ("train_loss",),
                          {"val": ("step", "loss"), "cast_stats": ("step", "max_underflow")})
    every = _check_int(results.get("train_loss_every", 1), "training_curves: results['train_loss_every']", 1)
    smooth_steps = _check_int(smooth_steps, "smooth_steps", 1)
    loss_floor = _loss_floor(results, "training_curves")
    curves = {label: _run_curve(_series(metrics["train_loss"], f"training_curves: run {label!r}: 'train_loss'"),
                                every, smooth_steps) for label, metrics in runs.items()}
    if not any(curves[label][0].size or columns[label]["val"]["step"].size for label in runs):  # (an empty figure)
        raise ValueError("training_curves: no run has a training loss or an evaluation (every run's 'train_loss' "
                         "and 'val' are empty): nothing to draw")
    figure, (loss_axis, underflow_axis) = _new_figure(8.0, 6.4, rows=2, sharex=True,
                                                      gridspec_kw={"height_ratios": (2.2, 1)})
    looks = _run_styles({label: metrics.get("recipe") for label, metrics in runs.items()})
    limits = _loss_axis_limits(curves, columns, loss_floor)
    top = None if limits is None else limits[1]
    for label, metrics in runs.items():
        color, marker, style = looks[label]
        steps, losses = curves[label]
        val, stats = columns[label]["val"], columns[label]["cast_stats"]
        # the line is the training loss; the run's markers, its validation losses (the legend shows both)
        loss_axis.plot(steps, losses, style, color=color, linewidth=1.0, alpha=0.8, label=label,
                       marker=marker if val["step"].size else None, markersize=4.5, markevery=[])
        if steps.size == 1:  # (one window draws no line: a run of one step, or one that diverged in its second)
            loss_axis.plot(steps, losses, ".", color=color, markersize=7)
        if val["step"].size:
            loss_axis.plot(val["step"], val["loss"], marker, color=color, markersize=4.5)
        diverged = metrics.get("diverged")
        # at the step whose loss or gradients were not finite, at the last finite loss (a validation
        # loss where the run diverged in its first step and has no training loss), kept on the axis
        finite_series = [series[np.isfinite(series)] for series in (losses, val["loss"])]
        last = next((float(finite[-1]) for finite in finite_series if finite.size), None)
        if diverged and last is not None:
            step = diverged.get("step") if isinstance(diverged, dict) else None
            at = step if _is_int(step) else steps[-1] if steps.size else val["step"][-1]
            loss_axis.plot([at], [last if top is None else min(last, top)], "x", color=color, markersize=8,
                           markeredgewidth=2, clip_on=False)
        if stats["step"].size:
            marker_every = max(1, stats["step"].size // 12)  # a dozen markers a line, enough to tell each apart
            underflow_axis.plot(stats["step"], 100 * stats["max_underflow"], style, color=color,
                                linewidth=1.2, marker=marker, markersize=4, markevery=marker_every, label=label)
    _draw_loss_floor(loss_axis, loss_floor)
    if limits is not None:  # (a run whose loss blew up would flatten every other curve)
        loss_axis.set_ylim(*limits)
        loss_axis.text(0.01, 0.98, f"losses above {top:.2f} run off the top", transform=loss_axis.transAxes,
                       ha="left", va="top", fontsize=8, color="grey")
    loss_axis.set_ylabel("cross-entropy (nats/char)\nline: train, markers: validation")
    loss_axis.grid(True, alpha=0.3)
    loss_axis.legend(loc="best", fontsize=8, ncols=2)
    loss_axis.set_title(title or TRAINING_CURVES_TITLE, fontsize=10)
    underflow_axis.set_ylabel("worst cast point:\n% flushed to zero")
    underflow_axis.set_xlabel("step")
    underflow_axis.set_ylim(-3, 103)
    underflow_axis.grid(True, alpha=0.3)
    return figure


def validation_curves(results: dict, title: str | None = None) -> Figure:
    """Validation loss and whole answers right at every evaluation of each run of a ``train_tiny``
    results document on the arithmetic corpus (``--experiment long``: which runs learn to add).

    Top: the validation loss, with the corpus' entropy rate dotted where the document knows it.
    Bottom: the share of validation problems whose whole answer the model predicts exactly
    (`minifp8.data.answer_accuracy`). Each run has its colour, marker and line style
    (`RUN_STYLES`, as in `training_curves`).

    Parameters
    ----------
    results : dict
        ``metrics.json`` of ``python -m minifp8.train_tiny --out DIR`` or a committed results file
        (``minifp8.train_tiny.load_results(minifp8.train_tiny.LONG_RESULTS)``). Each run needs
        ``val``, a list of evaluations with ``step``, ``loss`` and ``exact_match`` (a number, or None
        for NaN); a run with an empty list is left out, and a ValueError says when every run is. ``exact_match`` is only measured on the
        bundled arithmetic corpus: a run on ``--data`` text raises a ValueError that says so, as
        does any missing key (naming the run and the key); a value of the wrong type raises a
        TypeError.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    runs, columns = _runs(results, "validation_curves", ("val",), {"val": ("step", "loss", "exact_match")},
                          hints={"exact_match": "answer accuracy is measured on the bundled arithmetic corpus only, "
                                                "not on --data text"})
    if not any(columns[label]["val"]["step"].size for label in runs):  # (an empty figure, and a warning)
        raise ValueError("validation_curves: no run has an evaluation (every run's 'val' is empty): nothing "
                         "to draw")
    loss_floor = _loss_floor(results, "validation_curves")
    figure, (loss_axis, exact_axis) = _new_figure(8.0, 6.4, rows=2, sharex=True)
    looks = _run_styles({label: metrics.get("recipe") for label, metrics in runs.items()})
    for label in runs:
        color, marker, style = looks[label]
        val = columns[label]["val"]
        if not val["step"].size:
            continue
        for axis, values in ((loss_axis, val["loss"]), (exact_axis, val["exact_match"])):
            axis.plot(val["step"], values, style, color=color, linewidth=1.2, marker=marker, markersize=4,
                      label=label)
    _draw_loss_floor(loss_axis, loss_floor)
    loss_axis.set_ylabel("validation loss (nats/char)")
    loss_axis.grid(True, alpha=0.3)
    exact_axis.legend(loc="upper left", fontsize=8, ncols=2)  # (where no run has learned to add yet)
    loss_axis.set_title(title or "Validation loss and exact answers of each run", fontsize=10)
    exact_axis.set_ylabel("whole answers right")
    _percent_axis(exact_axis)
    exact_axis.set_xlabel("step")
    exact_axis.grid(True, alpha=0.3)
    return figure


def gap_curves(arms: dict, title: str | None = None) -> Figure:
    """How far each arm's validation loss lies above its fp32 run's at every evaluation, one panel
    per seed: when a gap opens and how it moves, which a table of final losses cannot show
    (tutorial 7b).

    Parameters
    ----------
    arms : dict of str -> dict of str -> (list, list)
        For each arm (its label in the legend), for each seed (a panel, "seed S"), the arm's ``val``
        list and its fp32 run's, as ``train_tiny``'s results hold them: evaluations with a ``step``
        and a ``loss`` (None for NaN), the two at the same steps, or the arm's at the first of its
        fp32 run's (an arm that stopped early or diverged, drawn to a cross). The panels follow the
        first arm's seeds, and every arm needs each of them. A missing key raises a ValueError
        naming it; a value of the wrong type, a TypeError. So do an fp32 loss that is not a finite
        number > 0 at a step the arm reached (the gap divides by it), and arms without a single
        evaluation (every list empty: nothing to draw).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes per seed, sharing the y axis: ``loss / fp32 loss - 1`` against the step.
    """
    name = "gap_curves"
    if not isinstance(arms, dict):
        raise TypeError(f"{name}: arms must be a dict of arm label -> {{seed: (val, fp32 val)}}, got {_described(arms)}")
    if not arms:
        raise ValueError(f"{name}: arms holds no arm")
    seeds: list = []
    gaps: dict[str, dict[Any, tuple[np.ndarray, np.ndarray]]] = {}
    for label, pairs in arms.items():
        if not isinstance(label, str):
            raise TypeError(f"{name}: an arm's label must be a str, got {_described(label)}")
        if not isinstance(pairs, dict) or not pairs:
            raise (TypeError if not isinstance(pairs, dict) else ValueError)(
                f"{name}: arm {label!r} must be a non-empty dict of seed -> (val, fp32 val), got {_described(pairs)}")
        seeds = seeds or list(pairs)
        _require(name, f"arm {label!r}", pairs, seeds)
        gaps[label] = {}
        for seed in seeds:
            where = f"arm {label!r} at seed {seed!r}"
            pair = pairs[seed]
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise TypeError(f"{name}: {where} must be a pair (its val, its fp32 run's val), got {_described(pair)}")
            columns = []
            for evaluations, which in zip(pair, ("val", "fp32 val")):
                if not isinstance(evaluations, (list, tuple)):
                    raise TypeError(f"{name}: {where}: {which} must be a list of evaluations (dicts with 'step' and "
                                    f"'loss'), got {_described(evaluations)}")
                columns.append(_entry_columns(evaluations, ("step", "loss"), name, f"{where}: {which}: an evaluation"))
            run, baseline = columns
            # (an arm that stopped early, or diverged, has the first of its fp32 run's evaluations)
            if not np.array_equal(run["step"], baseline["step"][:run["step"].size]):
                shown = [", ".join(f"{step:g}" for step in steps) for steps in (run["step"], baseline["step"])]
                raise ValueError(f"{name}: {where}: its evaluations are not its fp32 run's steps, or the first of "
                                 f"them (an arm that stopped early): steps {shown[0]} against {shown[1]}")
            divisor = baseline["loss"][:run["step"].size]
            bad = np.flatnonzero(~(np.isfinite(divisor) & (divisor > 0)))  # (NaN included: None in the results)
            if bad.size:
                loss = divisor[bad[0]]
                raise ValueError(f"{name}: {where}: fp32 val: the loss at step {run['step'][bad[0]]:g} is "
                                 f"{'None (NaN)' if np.isnan(loss) else f'{loss:g}'}: the gap divides by the fp32 "
                                 "run's loss, which must be a finite number > 0")
            gaps[label][seed] = run["step"], run["loss"] / divisor - 1
    if not any(steps.size for per_seed in gaps.values() for steps, _ in per_seed.values()):  # (an empty figure)
        raise ValueError(f"{name}: no arm has an evaluation (every val list is empty): nothing to draw")
    figure, axes = _new_figure(3.2 * len(seeds) + 0.8, 3.8, columns=len(seeds), sharey=True)
    markers = "osD^v<>ph*"
    looks = {label: (f"C{index % 10}", markers[index % len(markers)]) for index, label in enumerate(arms)}
    for axis, seed in zip(axes, seeds):
        axis.axhline(0.0, color="black", linewidth=0.8)
        for label in arms:
            color, marker = looks[label]
            steps, gap = gaps[label][seed]
            axis.plot(steps, gap, "-", color=color, linewidth=1.2, marker=marker, markersize=3.5, label=label)
            if steps.size < len(arms[label][seed][1]) and steps.size:  # stopped early: a cross at its last gap
                axis.plot(steps[-1:], gap[-1:], "x", color=color, markersize=7, markeredgewidth=2)
        axis.set_title(f"seed {seed}", fontsize=9)
        axis.set_xlabel("step")
        axis.grid(True, alpha=0.3)
        _percent_axis(axis)
    axes[0].set_ylabel("validation loss above its fp32 run's")
    # Below the panels (constrained layout makes room for an "outside" figure legend): inside one,
    # a gap that grows would run under it.
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=min(len(arms), 4),
                  fontsize=8, frameon=False)
    figure.suptitle(title or "How far each run's validation loss lies above its fp32 run's", fontsize=10)
    return figure


def scale_curves(results: dict, tensor: str = "residual#2", statistic: str = "mean_abs",
                 title: str | None = None) -> Figure:
    """The scale of one tracked tensor and of its gradient over training, one line per run, against
    the E5M2 range its gradient is cast to (tutorial 7b: why naive FP8 climbs back).

    Top: the tensor's standard deviation. Middle, where the scales hold a
    ``forward_shared_fraction`` (those recorded since 2026-12-01 do): the share of the tensor's
    mean square that every position shares (`minifp8.fp8.ScaleRecord`), which a norm over the
    features does not remove. Bottom: its gradient's ``statistic`` as backward carries it (the loss
    scale included, before any cast), on a log2 axis with E5M2's normal numbers shaded and its
    subnormals lighter and dotted, as in `scale_plot`: a gradient below the shading is flushed to
    zero by a naive cast; a gradient of exactly zero is a hollow marker on the bottom edge. Each run
    has its colour, marker and line style (`RUN_STYLES`).

    Parameters
    ----------
    results : dict
        ``metrics.json`` of ``python -m minifp8.train_tiny --track-scales --out DIR``, or a committed
        study of such runs (``long_scales.json``). Each run with a non-empty ``scales`` list is
        drawn (runs without one are left out): entries with a ``step``, ``forward_std``,
        ``backward_<statistic>`` and optionally ``forward_shared_fraction``, each of the latter a
        dict of tensor name -> number (None for NaN). A missing key raises a ValueError naming it (a
        name the runs lack, the names they have); a value of the wrong type, a TypeError.
    tensor : str
        The tracked tensor's name (`minifp8.fp8.ScaleTracker`'s: ``"residual#2"`` is the second
        block's output, the residual stream the final norm reads in a two-layer model).
    statistic : {"mean_abs", "std"}
        The gradient's mean of |x| (the typical element, which a cast flushes or keeps) or its
        standard deviation.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    name = "scale_curves"
    if not isinstance(tensor, str):
        raise TypeError(f"{name}: tensor must be a str (a tracked tensor's name), got {_described(tensor)}")
    if statistic not in ("mean_abs", "std"):
        raise ValueError(f"{name}: statistic must be 'mean_abs' or 'std', got {statistic!r}")
    gradient_key = f"backward_{statistic}"
    runs, _ = _runs(results, name, (), {})
    curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for label, metrics in runs.items():
        entries = metrics.get("scales") or []  # (none in runs trained without --track-scales)
        if not isinstance(entries, (list, tuple)):
            raise TypeError(f"{name}: run {label!r}: 'scales' must be a list of dicts, got {_described(entries)}")
        steps: list[float] = []
        values: list[float] = []
        shares: list[float] = []  # (NaN where an entry predates forward_shared_fraction)
        gradients: list[float] = []
        for entry in entries:
            where = f"run {label!r}: an entry of 'scales'"
            _require(name, where, entry, ("step", "forward_std", gradient_key))
            steps.append(_number(entry["step"], f"{name}: {where}: 'step'"))
            values.append(_tensor_value(name, where, entry, "forward_std", tensor))
            gradients.append(_tensor_value(name, where, entry, gradient_key, tensor))
            shares.append(_tensor_value(name, where, entry, "forward_shared_fraction", tensor)
                          if "forward_shared_fraction" in entry else math.nan)
        if steps:
            curves[label] = np.array(steps), np.array(values), np.array(shares), np.array(gradients)
    if not curves:
        raise ValueError(f"{name}: no run has scales: train with python -m minifp8.train_tiny --track-scales --out DIR")
    with_shares = any(np.isfinite(curve[2]).any() for curve in curves.values())
    figure, axes = _new_figure(8.0, 8.4 if with_shares else 6.4, rows=3 if with_shares else 2, sharex=True)
    value_axis, gradient_axis = axes[0], axes[-1]
    e5m2 = _formats.get("E5M2")
    gradient_axis.axhspan(e5m2.min_normal, e5m2.max, color=_color(e5m2), alpha=NORMAL_BAND_ALPHA, linewidth=0,
                          label="E5M2 normal numbers")
    gradient_axis.axhspan(e5m2.min_subnormal, e5m2.min_normal, facecolor=_color(e5m2), alpha=SUBNORMAL_BAND_ALPHA,
                          linewidth=0, hatch="....", edgecolor=_color(e5m2), label="E5M2 subnormals")
    looks = _run_styles({label: runs[label].get("recipe") for label in curves})
    for label, (at, value_curve, share_curve, gradient_curve) in curves.items():
        color, marker, style = looks[label]
        marker_every = max(1, at.size // 12)
        drawn = [(value_axis, value_curve), (axes[1], share_curve)] if with_shares else [(value_axis, value_curve)]
        for axis, series in [*drawn, (gradient_axis, gradient_curve)]:
            axis.plot(at, series, style, color=color, linewidth=1.2, marker=marker, markersize=4,
                      markevery=marker_every, label=label)
    every = np.concatenate([curve[3] for curve in curves.values()])
    positive = every[np.isfinite(every) & (every > 0)]
    low = min(np.log2(e5m2.min_subnormal) - 1, np.floor(np.log2(positive.min())) - 1 if positive.size else 0)
    high = np.ceil(np.log2(positive.max())) + 1 if positive.size else 0
    # (E5M2's normal range always starts inside the axis: the shading is what the figure compares with;
    # its top, E5M2's max, lies far above)
    gradient_axis.set_ylim(2.0**low, 2.0**max(high, np.log2(e5m2.min_normal) + 2, low + 4))
    for label, (at, _, _, gradient_curve) in curves.items():  # a gradient of exactly 0: hollow, on the bottom edge
        zero = gradient_curve == 0
        if zero.any():
            color, marker, _ = looks[label]
            gradient_axis.plot(at[zero], np.full(zero.sum(), 2.0**low), marker, color=color, markerfacecolor="none",
                               markersize=5, clip_on=False)
    stds = np.concatenate([curve[1] for curve in curves.values()])
    if not (np.isfinite(stds) & (stds > 0)).any():  # (NaN, Inf or 0 throughout: a log axis has no limits)
        value_axis.set_ylim(0.5, 2.0)
        value_axis.autoscale(False, axis="y")
        value_axis.text(0.5, 0.5, f"no run has a finite std > 0 of {tensor}", transform=value_axis.transAxes,
                        ha="center", va="center", fontsize=9, color="grey")
    for axis in (value_axis, gradient_axis):
        axis.set_yscale("log", base=2)
        axis.grid(True, alpha=0.3)
    value_axis.set_ylabel(f"{tensor}: std")
    if with_shares:
        axes[1].set_ylim(0, 1.05)
        axes[1].grid(True, alpha=0.3)
        axes[1].set_ylabel("share every position\nshares (its mean)")
    gradient_axis.set_ylabel(f"its gradient: {'mean |g|' if statistic == 'mean_abs' else 'std'}")
    gradient_axis.set_xlabel("step")
    value_axis.set_title(title or f"The scale of {tensor} and of its gradient over training", fontsize=10)
    figure.legend(*gradient_axis.get_legend_handles_labels(), loc="outside lower center",
                  ncols=min(len(curves) + 2, 4), fontsize=8, frameon=False)
    return figure


def _tensor_value(figure: str, where: str, entry: dict, key: str, tensor: str) -> float:
    """``entry[key][tensor]`` of a ``scales`` entry as a float (None read as NaN), with clear errors."""
    _require(figure, f"{where}: {key!r}", entry[key], (tensor,), {tensor: "pass tensor= one of these names"})
    return _number(entry[key][tensor], f"{figure}: {where}: {key!r}: {tensor!r}", none=True)


def _is_option_run(label: str, recipe: str) -> bool:
    """Whether run ``label`` is recipe ``recipe``'s own run (``unit``) or it with options (``unit + fp8 grads``)."""
    return label == recipe or (label.startswith(recipe) and label[len(recipe)] in " +")


def _options_label(label: str, recipe: str) -> str:
    """The FP8-LM part of a run label: ``unit + fp8 grads`` -> ``fp8 grads``; the recipe's own run
    -> ``baseline``; a run whose label does not start with its recipe (``unit fp32``, recipe fp32)
    is no option of it: its whole label."""
    if not _is_option_run(label, recipe):
        return label
    return label[len(recipe):].lstrip(" +") or "baseline"


LINE_STYLES = ("-", "--", ":", "-.")
FP8LM_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")  # one per combination of options
MEMORY_HATCHES = ("", "////", "....", "\\\\\\\\", "xxxx")  # the memory bars' components, apart without colour
LINE_STYLE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
FP8LM_MAX_RUNS = 10 * len(LINE_STYLES)  # each its own pair of the ten colours C0-C9 and a line style


#: `fp8lm_options`' loss panel stops at this change (+-25%) where a run's loss runs beyond it (a
#: run that blew up; FP8-LM's options move fp8lm.json's runs by 3.2% at most).
FP8LM_CHANGE_LIMIT = 0.25


def fp8lm_options(results: dict) -> Figure:
    """What FP8-LM's options do to the headline config (``train_tiny --experiment fp8lm``).

    Top: the validation loss of every run relative to the run of the same recipe without options
    (a run that is not its recipe's name followed by options, such as ``unit fp32`` of the
    headline results, is its own reference). A run that diverged ends in a cross; where a change
    runs beyond `FP8LM_CHANGE_LIMIT` (a run that blew up), the axis stops there and says so. With
    at most four recipes, one colour per combination of options and one line style per recipe
    (for ``fp8lm.json``: solid for the unit-scaled model, ``unit``, dashed for the standard model
    with current scaling, ``current``); with more, each run its own colour and line style.
    Middle: the FP8 gradients
    against the FP32 all-reduce of the same gradients, as the relative error ``||g_fp8 -
    g_fp32|| / ||g_fp32||`` at each progress line (FP8-LM section 2.1).
    Bottom: the bytes per parameter each run held for weights, master weights, gradients and both
    Adam moments, read from its arrays (`minifp8.fp8lm.measure_memory`), against FP32 AdamW's 16:
    the runs of the first recipe whose runs record it.

    Parameters
    ----------
    results : dict
        The ``fp8lm.json`` results of ``python -m minifp8.train_tiny --experiment fp8lm --out DIR``
        (``minifp8.train_tiny.load_results(minifp8.train_tiny.FP8LM_RESULTS)``) or its ``metrics.json``.
        From 1 to 40 runs; each needs ``recipe`` (a str), and is drawn with the ``val``,
        ``fp8_grads`` and ``memory`` it has, and a run with options needs its recipe's run without
        them (``unit`` for ``unit + fp8 grads``). A missing key or run raises a ValueError that names
        the run and what it lacks; a value of the wrong type, a TypeError.

    Returns
    -------
    matplotlib.figure.Figure
    """
    runs, columns = _runs(results, "fp8lm_options", ("recipe",),
                          {"val": ("step", "loss"), "fp8_grads": ("step", "relative_error")})
    for label, metrics in runs.items():
        if not isinstance(metrics["recipe"], str):
            raise TypeError(f"fp8lm_options: run {label!r}: 'recipe' must be a str, got "
                            f"{_described(metrics['recipe'])}")
    if len(runs) > FP8LM_MAX_RUNS:
        raise ValueError(f"fp8lm_options draws at most {FP8LM_MAX_RUNS} runs (each with its own colour and line "
                         f"style), got {len(runs)}")
    recipes = list(dict.fromkeys(m["recipe"] for m in runs.values()))
    components = ("weights", "master_weights", "gradients", "first_moment", "second_moment")
    # (the runs of the first recipe with a memory report: a document's first recipe may have none)
    memory_recipe = next((m["recipe"] for m in runs.values() if m.get("memory")), None)
    first = [(label, m) for label, m in runs.items() if m["recipe"] == memory_recipe and m.get("memory")]
    memory = np.zeros((len(first), len(components)))  # bytes per parameter: a row per run, a column per component
    for row, (label, m) in enumerate(first):
        _require("fp8lm_options", f"run {label!r}: memory", m["memory"], ("bytes_per_parameter",))
        where = f"run {label!r}: memory['bytes_per_parameter']"
        _require("fp8lm_options", where, m["memory"]["bytes_per_parameter"], components)
        memory[row] = [_number(m["memory"]["bytes_per_parameter"][component], f"fp8lm_options: {where}[{component!r}]")
                       for component in components]

    # one colour per combination of options and one line style per recipe, where that tells every
    # run apart; else each run its own colour (C0-C9) and line style
    options = {label: _options_label(label, m["recipe"]) for label, m in runs.items()}
    names = list(dict.fromkeys(options.values()))
    looks = {label: (f"C{names.index(options[label])}", dict(zip(recipes, LINE_STYLES)).get(m["recipe"]),
                     FP8LM_MARKERS[names.index(options[label]) % len(FP8LM_MARKERS)])  # (colour, line style, marker)
             for label, m in runs.items()}
    by_recipe = (len(recipes) <= len(LINE_STYLES) and len(names) <= 10
                 and len({look[:2] for look in looks.values()}) == len(looks))
    if not by_recipe:
        looks = {label: (f"C{i % 10}", LINE_STYLES[i // 10], FP8LM_MARKERS[i % len(FP8LM_MARKERS)])
                 for i, label in enumerate(runs)}

    figure, (loss_axis, error_axis, memory_axis) = _new_figure(8.0, 9.0, rows=3,
                                                               gridspec_kw={"height_ratios": (2, 1.3, 1.5)})
    drawn: list[np.ndarray] = []  # the finite changes of each run
    crosses: list[tuple[float, float, str]] = []  # (step, change, colour) where a run diverged
    for label, metrics in runs.items():
        color, linestyle, marker = looks[label]
        style = dict(color=color, linestyle=linestyle, linewidth=1.2, marker=marker, markersize=4)
        # each evaluation after step 0 against the same step of the recipe's run without options
        reference_label = metrics["recipe"] if _is_option_run(label, metrics["recipe"]) else label
        if reference_label not in columns:  # (its line would be missing from the top panel, without a word)
            raise ValueError(f"fp8lm_options: run {label!r} has no run of its recipe without options "
                             f"({reference_label!r}) to compare its validation loss with: include that run")
        reference = columns[reference_label]
        alone = dict(zip(reference["val"]["step"], reference["val"]["loss"]))  # step -> loss
        steps, losses = columns[label]["val"]["step"], columns[label]["val"]["loss"]
        compared = (steps > 0) & np.isin(steps, list(alone))
        with np.errstate(divide="ignore", invalid="ignore"):
            changes = losses[compared] / np.array([alone[step] for step in steps[compared]]) - 1
        loss_axis.plot(steps[compared], changes, label=label, **style)
        finite = np.isfinite(changes)
        drawn.append(changes[finite])
        if metrics.get("diverged") and finite.any():  # (a cross at its last finite change, as training_curves)
            crosses.append((steps[compared][finite][-1], changes[finite][-1], color))
        grads = columns[label]["fp8_grads"]
        cast = ~np.isnan(grads["relative_error"])  # (None, read as NaN: nothing was cast)
        if cast.any():
            error_axis.plot(grads["step"][cast], grads["relative_error"][cast], label=label, **style)
    _percent_axis(loss_axis)
    changes = np.concatenate(drawn) if drawn else np.empty(0)
    if changes.size and np.abs(changes).max() > FP8LM_CHANGE_LIMIT:  # (a run that blew up hides the others)
        kept = np.clip(changes, -FP8LM_CHANGE_LIMIT, FP8LM_CHANGE_LIMIT)
        low, high = float(kept.min()), float(kept.max())
        low, high = low - 0.05 * (high - low), high + 0.05 * (high - low)
        loss_axis.text(0.01, 0.02, f"changes beyond \u00b1{100 * FP8LM_CHANGE_LIMIT:g}% run off the axis",
                       transform=loss_axis.transAxes, ha="left", va="bottom", fontsize=8, color="grey")
    else:
        low, high = loss_axis.get_ylim()
    for step, change, color in crosses:
        loss_axis.plot([step], [min(max(change, low), high)], "x", color=color, markersize=8, markeredgewidth=2,
                       clip_on=False)
    loss_axis.set_ylim(low, high + 0.6 * (high - low))  # headroom for the legend
    loss_axis.set_ylabel("validation loss against\nthe recipe alone")
    loss_axis.set_xlabel("step")
    loss_axis.grid(True, alpha=0.3)
    if by_recipe:  # the title keys the line styles: the legend, one entry per combination of options
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=f"C{i}", marker=FP8LM_MARKERS[i % len(FP8LM_MARKERS)], markersize=4,
                          linewidth=1.2) for i in range(len(names))]
        loss_axis.legend(handles, names, fontsize=8, ncols=2, loc="upper right")
    else:
        loss_axis.legend(fontsize=7, ncols=2, loc="upper right")
    if by_recipe:
        key = ", ".join(f"{LINE_STYLE_NAMES[LINE_STYLES[i]]}: {recipe}" for i, recipe in enumerate(recipes))
        separator = " " if len(recipes) <= 2 else "\n"  # a long key on a line of its own
        loss_axis.set_title(f"FP8-LM's options on the headline config{separator}({key})", fontsize=10)
    else:
        loss_axis.set_title(f"FP8-LM's options on the headline config ({len(recipes)} recipes: each run its own "
                            "colour and line style)", fontsize=10)
    _percent_axis(error_axis)
    error_axis.set_ylim(bottom=0)
    error_axis.set_ylabel("FP8 gradient error\nvs FP32 all-reduce")
    error_axis.set_xlabel("step")
    error_axis.grid(True, alpha=0.3, which="both")
    # memory: one group of bars per combination of options (the first recipe's runs), stacked by component
    left = np.zeros(len(first))
    for i, component in enumerate(components):
        memory_axis.barh(np.arange(len(first)), memory[:, i], left=left, color=f"C{i}", alpha=0.75,
                         edgecolor="white", linewidth=0.8, hatch=MEMORY_HATCHES[i], label=component.replace("_", " "))
        left += memory[:, i]
    for y, total in enumerate(left):
        memory_axis.text(total + 0.2, y, f"{total:.1f} B", va="center", fontsize=8)
    memory_axis.axvline(16, color="black", linestyle=":", linewidth=1.0)
    memory_axis.text(16.25, 0.5, "FP32 AdamW: 16 B", rotation=90, va="center", fontsize=8,
                     transform=memory_axis.get_xaxis_transform())
    memory_axis.set_yticks(np.arange(len(first)), [options[label] for label, _ in first], fontsize=8)
    memory_axis.invert_yaxis()
    if not first:
        memory_axis.text(0.5, 0.5, "no run records the memory it held", transform=memory_axis.transAxes,
                         ha="center", va="center", fontsize=9, color="grey")
    memory_axis.set_ylabel(f"options ({memory_recipe} runs)" if first else "options")
    memory_axis.set_xlim(0, 1.15 * max([16.0, *left]))  # (room for the longest bar's label)
    memory_axis.set_xlabel("bytes per parameter held (float32 weights are the simulation's working copy)")
    memory_axis.legend(fontsize=8, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return figure


# ================================================================================================
# Testing backends (tutorial 08)
# ================================================================================================
# The kernels of `scaled_gemm_errors`: legend label, colour, line style, and the options their
# outputs are judged with (each as `minifp8.gemm.compare_matmul` would judge a kernel that declares
# float32 accumulation and its output type).
GEMM_KERNELS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (  # (options: compare_matmul's keywords)
    ("float32 accumulator", "#1f77b4", "-", {}),
    ("float32 accumulator, bfloat16 output", "#1f77b4", "--", {"output": "bfloat16"}),
    ("14-bit accumulator, no promotion", "#ff7f0e", "--", {}),
    ("14 bits, promoted to float32 every 128 (DeepSeek-V3)", "#ff7f0e", "-", {}),
    ("bug: activation scales read one block late", "#d62728", "-", {}))
GEMM_BLOCK = 128  # DeepSeek-V3's block along K: 1x128 activation tiles, 128x128 weight blocks


def scaled_gemm_errors(seed: int = 2) -> Figure:
    """Each output's error over its tolerance, for five kernels of one blockwise-scaled FP8 GEMM.

    The GEMM is tutorial 8's: 16x512 activations (standard normal) times 512x256 weights (normal,
    standard deviation 0.05, the last 128 columns times 10), cast to E4M3 in DeepSeek-V3's 1x128
    and 128x128 blocks (`minifp8.scaling.quantize_blockwise`, ``power_of_2=False``: float32 scales
    ``448 / amax``, whose float32 inverses the kernels multiply by; DeepGEMM stores ``amax / 448``,
    one ulp off in a quarter to a third of tiles). Left: those operands; right: their absolute
    values, where no rounding error cancels another. The kernels (tutorial 8 defines three of them):

    * float32 accumulator: each block of 128 products summed in float32, times the two blocks'
      scales, added into a float32 output;
    * the same, its output rounded to bfloat16;
    * a 14-bit accumulator (rounding to nearest) without promotion: every product, times its two
      scales, added into one 14-bit sum over all of K;
    * a 14-bit accumulator promoted every 128 (DeepSeek-V3, arXiv:2412.19437, section 3.3.2): each
      block summed at 14 bits, then scaled and added into float32;
    * a bug: the float32 kernel reading each block's activation scales one block late.

    Each curve is ``|output - reference| / tolerance`` with the reference and tolerance of
    `minifp8.gemm.compare_matmul` for a float32 accumulator (and ``output="bfloat16"`` for that
    kernel), sorted from the worst output; the black line is the tolerance, and an output above it
    is one the report counts as beyond tolerance.

    Parameters
    ----------
    seed : int
        The seed of the operands' normal values, >= 0 (2, as in tutorial 8).

    Returns
    -------
    matplotlib.figure.Figure
    """
    seed = _check_int(seed, "seed", 0)
    figure, axes = _new_figure(8.0, 4.6, columns=2, sharey=True)  # (without matplotlib: its ImportError first)
    panels = _scaled_gemm_ratios(seed)
    for axis, (title, ratios) in zip(axes, panels.items()):
        for label, color, linestyle, _ in GEMM_KERNELS:
            axis.plot(np.arange(1, ratios[label].size + 1), ratios[label], color=color, linestyle=linestyle,
                      linewidth=1.5, label=label)
        axis.axhline(1.0, color="black", linewidth=1.0, label="tolerance: compare_matmul's for a float32 accumulator")
        axis.axhspan(1.0, 1e4, color="#d62728", alpha=0.07, linewidth=0, label="beyond tolerance: a mismatch")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlim(1, ratios[label].size)
        axis.set_ylim(1e-6, 1e4)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("outputs, from the worst (rank)")
        axis.grid(True, alpha=0.3)
    axes[0].set_ylabel("|output - reference| / tolerance")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncols=2, fontsize=8)
    return figure


def _scaled_gemm_ratios(seed: int) -> dict:
    """`scaled_gemm_errors`' data: panel title -> kernel label -> ``|output - reference| / tolerance``,
    sorted from the largest. The reference and tolerances are those of `minifp8.gemm.compare_matmul`
    for a correct kernel's output (a report without mismatches: no hints to compute)."""
    from .gemm import compare_matmul

    panels = {}
    for title, positive in (("random signs (tutorial 8's operands)", False),
                            ("all positive: the rounding errors add up", True)):
        a, b = _blockwise_operands(seed, positive)
        outputs = _gemm_kernel_outputs(a, b)
        reports = {}  # output type -> the report for the correct float32 kernel's output in it
        ratios = {}
        for (label, _, _, options), output in zip(GEMM_KERNELS, outputs):
            key = options.get("output", "float32")
            if key not in reports:
                reports[key] = compare_matmul(output, a.codes, a.scale_inv, b.codes, b.scale_inv, a_format="E4M3",
                                              b_format="E4M3", **options)
            report = reports[key]
            reference, tolerance = report.reference.value, report.tolerance
            ratios[label] = np.sort(np.abs(output - reference) / tolerance, axis=None)[::-1]
        panels[title] = ratios
    return panels


def _blockwise_operands(seed: int, positive: bool):
    """Tutorial 8's GEMM operands (their absolute values where ``positive``), cast to E4M3 with
    DeepSeek-V3's blocks: 1x128 tiles of A (16 x 512), 128x128 blocks of B (512 x 256)."""
    from .scaling import quantize_blockwise

    rng = np.random.default_rng(seed)
    activations = rng.normal(0.0, 1.0, size=(16, 512)).astype(np.float32)
    weights = rng.normal(0.0, 0.05, size=(512, 256)).astype(np.float32)
    weights[:, 128:] *= 10  # the second 128 outputs: larger weights, other scales
    if positive:
        activations, weights = np.abs(activations), np.abs(weights)
    a = quantize_blockwise(activations, "E4M3", block_shape=(1, GEMM_BLOCK), axis=1, power_of_2=False)
    b = quantize_blockwise(weights, "E4M3", block_shape=(GEMM_BLOCK, GEMM_BLOCK), axis=0, power_of_2=False)
    return a, b


def _gemm_kernel_outputs(a, b) -> list:
    """The outputs of `GEMM_KERNELS`, in order, for blockwise operands ``a`` and ``b``."""
    from .codec import decode

    a_values, b_values = decode(a.codes, "E4M3"), decode(b.codes, "E4M3")  # float32, exact
    b_scales = np.repeat(b.scale_inv, GEMM_BLOCK, axis=1)  # (K / 128, N): one per output column
    float32 = _blockwise_gemm(a_values, a.scale_inv, b_values, b_scales)
    return [float32, _significand_rounded(float32.astype(np.float64), 8),  # bfloat16 (normal range)
            _narrow_gemm(a_values, a.scale_inv, b_values, b_scales, bits=14),
            _blockwise_gemm(a_values, a.scale_inv, b_values, b_scales, bits=14),
            _blockwise_gemm(a_values, a.scale_inv, b_values, b_scales, shift=1)]


def _significand_rounded(x: np.ndarray, bits: int) -> np.ndarray:
    """float64 ``x`` rounded to ``bits`` significant bits, to nearest even, with float64's exponent
    range (as a narrow type for values well inside its range: bfloat16 is 8 bits)."""
    mantissa, exponent = np.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)


def _blockwise_gemm(a_values, a_scales, b_values, b_scales, bits: int | None = None, shift: int = 0):
    """A DeepSeek-V3 kernel: per block of K, the products summed in float32 (``bits=None``) or at
    ``bits`` significant bits (in K order), times the two blocks' scales, added into float32;
    ``shift=1`` reads A's scales one block late. ``b_scales`` holds one scale per block and column."""
    blocks = a_scales.shape[1]
    out = np.zeros((a_values.shape[0], b_values.shape[1]), np.float32)
    for j in range(blocks):
        k = slice(GEMM_BLOCK * j, GEMM_BLOCK * (j + 1))
        if bits is None:
            partial = a_values[:, k] @ b_values[k]  # float32
        else:
            partial = np.zeros(out.shape)  # each sum exact in float64 (E4M3 products: multiples of 2**-18)
            for column in range(k.start, k.stop):
                partial = _significand_rounded(partial + a_values[:, column, None].astype(np.float64)
                                               * b_values[column], bits)
            partial = partial.astype(np.float32)
        out += partial * a_scales[:, (j + shift) % blocks, None] * b_scales[j]
    return out


def _narrow_gemm(a_values, a_scales, b_values, b_scales, bits: int):
    """A kernel with one accumulator of ``bits`` significant bits over all of K, no promotion: each
    product ``x y`` times A's scale, then B's, each rounded to ``bits``, added in K order."""
    out = np.zeros((a_values.shape[0], b_values.shape[1]))
    for column in range(a_values.shape[1]):
        block = column // GEMM_BLOCK
        product = a_values[:, column, None].astype(np.float64) * b_values[column]  # exact
        term = _significand_rounded(_significand_rounded(product * a_scales[:, block, None], bits)
                                    * b_scales[block], bits)  # each product exact before its rounding
        out = _significand_rounded(out + term, bits)
    return out


# ================================================================================================
# Speed (tutorial 09)
# ================================================================================================
def train_speed(results: dict, title: str | None = None) -> Figure:
    """How much longer a simulated FP8 training step takes than an fp32 one, over a training run.

    One line per FP8 recipe: the median, over each window of steps, of the ratio of its step time
    to that of its fp32 partner stepped in turn (``python -m minifp8.bench train --json PATH``).
    Dashed lines mark the targets the run states (issue 6: 1.5x, 2x for mxfp8), grey for a target
    several recipes share; the legend gives each recipe's median over the whole run (and, for a
    run with ``--family auto``, the model family each recipe trained). The ratios rise as
    training goes on, because more elements fall outside the FP8 ranges and take the casts' slow
    path.

    Parameters
    ----------
    results : dict
        The JSON written by ``python -m minifp8.bench train --json PATH`` (the committed one:
        ``minifp8.bench.load_speed_results()``). Needs ``window_steps`` (an int >= 1), ``recipes``
        (a non-empty dict) and ``fp32`` (its ``step_ms``, a number > 0); each recipe a ``ratio`` (a
        number > 0) and ``window_ratios`` (a flat list of numbers, at least one of them finite),
        and ``target``, if any, a number > 0. A missing key raises a ValueError naming it; a value
        of the wrong type, a TypeError.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    name = "train_speed"
    _require(name, "results", results, ("window_steps", "recipes", "fp32"))
    recipes = results["recipes"]
    if not isinstance(recipes, dict):
        raise TypeError(f"{name}: results['recipes'] must be a dict of recipe -> measurements, got "
                        f"{_described(recipes)}")
    if not recipes:
        raise ValueError(f"{name}: results['recipes'] must be a non-empty dict of recipe -> measurements, got {{}}")
    _require(name, "results['fp32']", results["fp32"], ("step_ms",))
    fp32_ms = _number(results["fp32"]["step_ms"], f"{name}: results['fp32']['step_ms']", positive=True)
    window = _check_int(results["window_steps"], f"{name}: results['window_steps']", 1)
    model = results.get("model")
    if model is not None and not isinstance(model, dict):
        raise TypeError(f"{name}: results['model'] must be a dict (family, n_embd, ...), got {_described(model)}")
    model = model or {}
    auto = model.get("family") == "auto"  # --family auto: each recipe on the model train_tiny gives it
    lines = []
    for recipe, measured in recipes.items():
        if not isinstance(recipe, str):  # (as `_runs` refuses a run's label: the styles split the name)
            raise TypeError(f"{name}: a recipe's name must be a str, got {_described(recipe)}")
        where = f"recipe {recipe!r}"
        _require(name, where, measured, ("ratio", "window_ratios"))
        ratio = _number(measured["ratio"], f"{name}: {where}: 'ratio'", positive=True)
        ratios = _series(measured["window_ratios"], f"{name}: {where}: 'window_ratios'")
        if not np.isfinite(ratios).any():
            raise ValueError(f"{name}: {where}: 'window_ratios' holds no finite ratio to draw, got "
                             f"{_described(measured['window_ratios'])}")
        if (ratios <= 0).any():  # (NaN compares False: a window without a ratio is allowed)
            raise ValueError(f"{name}: {where}: 'window_ratios' must be > 0 (a step time over fp32's), got "
                             f"{float(ratios[ratios <= 0][0])!r}")
        target = measured.get("target")
        target = None if target is None else _number(target, f"{name}: {where}: 'target'", positive=True)
        family = measured.get("family")
        label = f"{recipe} ({family})" if auto and isinstance(family, str) else f"{recipe}"
        lines.append((recipe, ratios, f"{label}: {ratio:.2f}x", target))

    figure, (axis,) = _new_figure(8.0, 4.6)
    targets: dict[float, list[tuple[str, str]]] = {}
    looks = _run_styles({recipe: recipe for recipe, *_ in lines})
    for recipe, ratios, label, target in lines:
        color, marker, linestyle = looks[recipe]
        steps = (np.arange(len(ratios)) + 0.5) * window
        axis.plot(steps, ratios, linestyle, marker=marker, color=color, markersize=4, linewidth=1.3, label=label)
        if target is not None:
            targets.setdefault(target, []).append((recipe, color))
    for target, holders in targets.items():  # a target of one recipe in its colour, a shared one grey
        (recipe, color), = holders if len(holders) == 1 else [("", "grey")]
        axis.axhline(target, color=color, linestyle="--", linewidth=1.0,
                     label=f"{recipe + ' ' if recipe else ''}target {target:g}x")
    axis.axhline(1.0, color="black", linewidth=0.8)
    lowest = min(float(np.nanmin(ratios)) for _, ratios, _, _ in lines)
    axis.set_ylim(bottom=min(0.95, 0.98 * lowest))  # (a recipe faster than fp32 somewhere stays in view)
    axis.set_xlabel(f"training step (median over each {window} steps)")
    axis.set_ylabel("FP8 step time / fp32 step time")
    axis.grid(True, alpha=0.3)
    axis.legend(title="recipe: median ratio\nover the run", fontsize=8, title_fontsize=8, loc="center left",
                bbox_to_anchor=(1.01, 0.5))
    if auto:
        shape = f"each recipe on its train_tiny model, n_embd {model.get('n_embd', '?')}, "
    else:
        shape = f"{model.get('family', '?')} model, n_embd {model.get('n_embd', '?')}, " if model else ""
    axis.set_title(title or f"Simulated FP8 against fp32, step by step ({shape}fp32 step {fp32_ms:.1f} ms)",
                   fontsize=10)
    return figure
