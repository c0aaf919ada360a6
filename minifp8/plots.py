"""Figures for the tutorials and the command line, one function per figure.

Every function returns a :class:`matplotlib.figure.Figure` built with the object-oriented API
(no ``pyplot``), so it uses no global figure state and needs no display: save it with
``fig.savefig("name.svg")`` or show it in a notebook. The tutorials site renders these functions at
build time (``tutorials/_hooks/figures.py``).

matplotlib is an optional dependency (``pip install "minifp8[plot]"``). It is imported inside
the functions, so ``import minifp8`` and ``import minifp8.plots`` work with NumPy alone.

The file is organised by topic, in the order of the tutorials: formats, rounding, then scaling
and training figures as they are added.
"""
from __future__ import annotations

import numpy as np

from . import formats as _formats
from .codec import quantize

# One colour per format, the same in every figure (matplotlib's default cycle, colour-blind safe
# enough for two or three lines; subnormals and special regions get their own).
FORMAT_COLORS = {"E4M3": "#1f77b4", "E5M2": "#d62728", "E4M3FNUZ": "#17becf", "E5M2FNUZ": "#e377c2",
                 "E3M2": "#2ca02c", "E2M3": "#9467bd", "E2M1": "#8c564b"}
SUBNORMAL_COLOR = "#ff7f0e"
OVERFLOW_COLOR = "#7f7f7f"


def _new_figure(width: float, height: float, rows: int = 1, **subplot_options):
    """A Figure with ``rows`` stacked axes; the one place matplotlib is imported."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised by a test that hides matplotlib
        raise ImportError('minifp8.plots needs matplotlib: pip install "minifp8[plot]"') from error
    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(rows, 1, squeeze=False, **subplot_options)[:, 0]
    return figure, axes


def _color(fmt) -> str:
    return FORMAT_COLORS.get(fmt.name, "black")


def _log2_axis(ax, low_exponent: int, high_exponent: int, step: int = 2) -> None:
    """A base-2 log x axis from 2**low to 2**high with ticks labelled as powers of two."""
    ax.set_xscale("log", base=2)
    ax.set_xlim(2.0**low_exponent, 2.0**high_exponent)
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


# ================================================================================================
# Formats (tutorial 01)
# ================================================================================================
def value_grid(names=("E4M3", "E5M2")):
    """Every positive finite value of each format on a log2 axis, and the gap to the next one.

    Top: one tick per value, subnormals in orange, with the smallest subnormal, the smallest
    normal and the largest value labelled. Bottom: the relative gap ``(next - v) / v`` from each
    value to the next, which is the format's precision: it repeats in every binade of normal
    numbers (``2**-M`` down to about ``2**-M / 2``) and grows in the subnormals.

    Parameters
    ----------
    names : sequence of str
        Format names (see :func:`minifp8.formats.get`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmts = [_formats.get(name) for name in names]
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
        gap_axis.step(values[normal_start:-1], gaps[normal_start:], where="post", color=_color(fmt),
                      label=fmt.name)

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


def rounding_error(names=("E4M3", "E5M2"), low_exponent: int = -19, high_exponent: int = 18,
                   points: int = 6000):
    """Relative error of round-to-nearest-even over a wide range of inputs, one panel per format.

    In the normal range the error never exceeds half a gap, ``2**-(M+1)`` (the dashed line): 6.25%
    for E4M3, 12.5% for E5M2. Below the smallest normal (orange band) the gap stays fixed while
    the numbers shrink, so the relative error grows until everything below half the smallest
    subnormal rounds to zero (100% error). Above the largest value (grey band) there is no
    number at all: E4M3 gives NaN and E5M2 gives Inf (``saturate=False``).

    Parameters
    ----------
    names : sequence of str
        Format names.
    low_exponent, high_exponent : int
        The input range is ``[2**low_exponent, 2**high_exponent]``.
    points : int
        Number of log-spaced inputs.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmts = [_formats.get(name) for name in names]
    figure, axes = _new_figure(8.0, 2.3 * len(fmts) + 0.6, rows=len(fmts), sharex=True, sharey=True)
    # Log-spaced inputs, nudged off the powers of two so that few land exactly on a value.
    x = np.logspace(low_exponent, high_exponent, points, base=2.0) * (1 + 1 / 3 * 2.0**-20)
    for ax, fmt in zip(axes, fmts):
        with np.errstate(invalid="ignore"):
            error = np.abs(quantize(x, fmt).astype(np.float64) - x) / x
        unit_roundoff = 2.0 ** -(fmt.mantissa_bits + 1)
        ax.axvspan(2.0**low_exponent, fmt.min_normal, color=SUBNORMAL_COLOR, alpha=0.12, linewidth=0)
        ax.axvspan(fmt.max, 2.0**high_exponent, color=OVERFLOW_COLOR, alpha=0.18, linewidth=0)
        ax.plot(x, error, color=_color(fmt), linewidth=0.6)
        ax.axhline(unit_roundoff, color="black", linestyle="--", linewidth=0.8)
        ax.text(2.0 ** (low_exponent + 0.3), unit_roundoff * 1.15, f"$2^{{-{fmt.mantissa_bits + 1}}}$ = "
                f"{100 * unit_roundoff:g}%", fontsize=8, va="bottom")
        overflow_name = "Inf" if fmt.has_infinity else "NaN"
        ax.text(np.sqrt(fmt.max * 2.0**high_exponent), 1e-2, f"overflow: {overflow_name}",
                ha="center", va="center", rotation=90, fontsize=8)
        ax.text(np.sqrt(fmt.min_normal * 2.0**low_exponent) if fmt.min_subnormal > 2.0**low_exponent
                else fmt.min_normal, 1e-3, "subnormal", ha="right" if fmt.min_subnormal <= 2.0**low_exponent
                else "center", fontsize=8, color="#a0522d")
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
def stochastic_rounding_bias(name: str = "E4M3", low: float = 1.0, high: float = 1.5, points: int = 161,
                             samples: int = 4096, seed: int = 0):
    """Mean of many stochastic roundings against the input, next to round-to-nearest-even.

    Top: the average of ``samples`` stochastic roundings of each input lies on the diagonal
    (unbiased), while nearest rounding is a staircase. Bottom: the bias ``mean - x`` in units of
    the gap between neighbouring values: nearest rounding swings between -1/2 and +1/2, stochastic
    rounding stays inside the band of +-2 standard errors of a mean of ``samples`` draws.

    Parameters
    ----------
    name : str
        Format name.
    low, high : float
        Input range; best kept inside one binade so that the gap is constant.
    points : int
        Number of inputs.
    samples : int
        Stochastic roundings averaged per input (16 random bits each).
    seed : int
        Seed of the ``numpy.random.Generator`` that draws the random bits.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fmt = _formats.get(name)
    x = np.linspace(low, high, points)
    random_bits = np.random.default_rng(seed).integers(0, 1 << 16, size=(points, samples), dtype=np.uint16)
    inputs = np.broadcast_to(x[:, None], random_bits.shape)
    stochastic = quantize(inputs, fmt, rounding="stochastic", random_bits=random_bits).astype(np.float64)
    mean = stochastic.mean(axis=1)
    nearest = quantize(x, fmt).astype(np.float64)
    gap = 2.0 ** (np.floor(np.log2(x)) - fmt.mantissa_bits)  # the spacing of the binade of each x

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
# Scaling (tutorials 03-04) and training (tutorial 07): add figures here as those parts land.
# ================================================================================================
