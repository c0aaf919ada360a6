"""Speed measurements: ``python -m minifp8.bench [SECTION ...]``.

Every section times minifp8 against a baseline measured in the same run, on the same data, and
reports the median of several repetitions. The machine this runs on is usually shared and noisy,
so the ratios are the numbers to quote, not the absolute times.

Sections register themselves with :func:`section`; ``python -m minifp8.bench`` with no argument
runs them all.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

import numpy as np

SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {}


def section(name: str):
    """Register a benchmark section under ``name`` (a decorator)."""

    def register(function):
        SECTIONS[name] = function
        return function

    return register


def median_seconds(function: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``function()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def report(label: str, seconds: float, elements: int | None = None, baseline: float | None = None) -> None:
    """Print one result line: time, throughput in Melem/s and the speed ratio against a baseline."""
    line = f"  {label:<44s} {seconds * 1e3:9.2f} ms"
    if elements is not None:
        line += f" {elements / seconds / 1e6:9.1f} Melem/s"
    if baseline is not None:
        line += f"   x{baseline / seconds:5.2f} speed of baseline"
    print(line, flush=True)


# ---- sections (each adds itself below) ---------------------------------------------------------

@section("codec")
def bench_codec(args) -> None:
    """Encode and decode 2^24 float32 values (E4M3, E5M2); baseline: ml_dtypes ``astype``."""
    from . import codec

    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
        print("  (ml_dtypes is not installed: no baseline; pip install ml_dtypes for the ratios)")
    x = np.random.default_rng(0).standard_normal(1 << 24).astype(np.float32) * 64
    for name, dtype_name in (("E4M3", "float8_e4m3fn"), ("E5M2", "float8_e5m2")):
        codes = codec.encode(x, name)
        encode_baseline = decode_baseline = None
        if ml_dtypes is not None:
            dtype = getattr(ml_dtypes, dtype_name)
            encode_baseline = median_seconds(lambda: x.astype(dtype), args.repeats)
            decode_baseline = median_seconds(lambda: codes.view(dtype).astype(np.float32), args.repeats)
            report(f"ml_dtypes astype float32 -> {name}", encode_baseline, x.size)
            report(f"ml_dtypes astype {name} -> float32", decode_baseline, x.size)
        report(f"minifp8 encode {name}", median_seconds(lambda: codec.encode(x, name), args.repeats), x.size,
               encode_baseline)
        report(f"minifp8 decode {name}", median_seconds(lambda: codec.decode(codes, name), args.repeats), x.size,
               decode_baseline)


# (new sections go above this line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minifp8.bench",
        description="Time minifp8 against baselines measured in the same run (medians; quote the ratios).",
    )
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"sections to run (default: all). Choices: {', '.join(SECTIONS) or 'none yet'}")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per measurement (default: 5)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    for name in args.sections or list(SECTIONS):
        print(f"[{name}]", flush=True)
        SECTIONS[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
