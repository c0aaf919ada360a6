"""Shared pytest fixtures. The `slow` marker (deselected by default) holds the exhaustive sweeps;
the `draws_figures` marker lets a test's in-process ``train_tiny`` runs draw their PNGs."""
import sys

import numpy as np
import pytest

CPYTHON_DEFAULT_RECURSION_LIMIT = 1000

# Lower 16-bit patterns of the structured float32 sweep: exact ties land on 0x0000 (every rounding
# boundary of our formats has its lower half zero), and the rest probe both sides of them.
SWEEP_LOW_HALVES = (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000)


@pytest.fixture(scope="session")
def structured_sweep() -> np.ndarray:
    """Every upper-16-bit float32 pattern times the low patterns above (524,288 float32s)."""
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array(SWEEP_LOW_HALVES, dtype=np.uint32)
    return (upper[:, None] | low[None, :]).reshape(-1).view(np.float32)


@pytest.fixture(autouse=True)
def recursion_limit_left_as_found():
    """No test may change the interpreter's recursion limit for the tests after it (mypy's API raises
    it to 2**14 and leaves it there; the depth tests below assume the default)."""
    limit = sys.getrecursionlimit()
    yield
    assert sys.getrecursionlimit() == limit, f"the recursion limit was {limit} and is now {sys.getrecursionlimit()}"


@pytest.fixture
def default_recursion_limit():
    """CPython's default recursion limit, 1000, for the test's duration: a graph deeper than it proves
    that backward and freeing do not recurse, whatever limit the process runs with."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(CPYTHON_DEFAULT_RECURSION_LIMIT)
    try:
        yield CPYTHON_DEFAULT_RECURSION_LIMIT
    finally:
        sys.setrecursionlimit(limit)


#: What train_tiny's PNGs hold in a test without the `draws_figures` marker.
UNDRAWN_FIGURE = b"(a figure that this test did not draw: tests/conftest.py)"


@pytest.fixture(autouse=True)
def train_tiny_figures_undrawn(request, monkeypatch):
    """``python -m minifp8.train_tiny --out`` run in the test's process builds its figures but does
    not draw them (`train_tiny._png_bytes` gives `UNDRAWN_FIGURE`): drawing loss.png took 1 s of
    a 1.8 s 20-step run, for the ~100 runs of tests about resuming, flags and results. Tests of the
    figures (`draws_figures`), tests/test_plots.py and the site's figures draw them."""
    if request.node.get_closest_marker("draws_figures") is None:
        from minifp8 import train_tiny

        monkeypatch.setattr(train_tiny, "_png_bytes", lambda figure: UNDRAWN_FIGURE)
