"""Every tutorial page runs, and says only what its code computes.

- Each ```python block of a page runs top to bottom in one namespace per page.
- A ```text block right after a ```python block (blank lines between are fine) is that block's
  printed output: the test compares it with what the block really prints, so the numbers shown
  on the site are the numbers the code produces. The blocks' own ``assert`` statements check the
  numbers the prose states.
- Every figure a page shows is registered in the figures hook, has alt text and a caption, and
  renders to deterministic SVG (these need matplotlib and skip without it).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")  # before anything imports matplotlib

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
HOOK = TUTORIALS / "_hooks" / "figures.py"
PAGES = sorted(path for path in TUTORIALS.rglob("*.md") if "_hooks" not in path.parts)

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<language>[\w+-]*)(?P<rest>.*)$")


def code_blocks(markdown: str) -> list[dict]:
    """The fenced code blocks of a page, in order: language, source, first line, and whether
    only blank lines separate the block from the one before."""
    blocks, lines, number = [], markdown.splitlines(), 0
    previous_end = None
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body, end = [], number + 1
        while end < len(lines):
            closing = re.match(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}[ \t]*$", lines[end])
            if closing:
                break
            body.append(lines[end][len(indent):] if lines[end].startswith(indent) else lines[end].lstrip())
            end += 1
        else:
            raise AssertionError(f"unclosed code fence opened at line {number + 1}")
        adjacent = previous_end is not None and all(not text.strip() for text in lines[previous_end + 1:number])
        blocks.append({"language": opening["language"].lower(), "source": "\n".join(body) + "\n",
                       "line": number + 1, "follows_previous": adjacent})
        previous_end = end
        number = end + 1
    return blocks


def python_blocks_with_output(markdown: str) -> list[tuple[dict, str | None]]:
    """Each python block with the text block that shows its output, or None."""
    blocks = code_blocks(markdown)
    pairs = []
    for index, block in enumerate(blocks):
        if block["language"] not in ("python", "py"):
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        shown = following["source"] if following and following["language"] == "text" and following["follows_previous"] else None
        pairs.append((block, shown))
    return pairs


def _normalised(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


def page_id(path: Path) -> str:
    return path.relative_to(TUTORIALS).as_posix()


def load_hook():
    spec = importlib.util.spec_from_file_location("minifp8_docs_figures_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the pages run -----------------------------------------------------------------------------
def test_pages_found():
    names = {page_id(path) for path in PAGES}
    assert {"index.md", "01-formats.md", "02-rounding.md", "api.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_page_runs_and_prints_what_it_shows(page):
    namespace = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    for block, shown in python_blocks_with_output(page.read_text(encoding="utf-8")):
        where = f"{page_id(page)}, block at line {block['line']}"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(block["source"], where, "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"{where} failed:\n{textwrap.indent(block['source'], '    ')}") from error
        if shown is not None:
            assert _normalised(printed.getvalue()) == _normalised(shown), (
                f"{where}: the page shows\n{shown}\nbut the code prints\n{printed.getvalue()}")


def test_block_parser_pairs_code_with_output():
    page = textwrap.dedent("""\
        Text.

        ```python
        print(1)
        ```

        ```text title="Output"
        1
        ```

        ```python
        x = 2
        ```

        Prose in between.

        ```text
        not an output
        ```

        !!! note
            ```python
            print(x)
            ```
        """)
    pairs = python_blocks_with_output(page)
    assert [(block["source"], shown) for block, shown in pairs] == [
        ("print(1)\n", "1\n"), ("x = 2\n", None), ("print(x)\n", None)]


# ---- figures -------------------------------------------------------------------------------------
def _referenced_figures():
    hook = load_hook()
    return hook, {page_id(page): hook.figure_references(page.read_text(encoding="utf-8")) for page in PAGES}


def test_every_figure_is_registered_with_alt_text_and_caption():
    hook, references = _referenced_figures()
    problems = [f"{page}: {problem}" for page in references
                for problem in hook.figure_problems((TUTORIALS / page).read_text(encoding="utf-8"))]
    assert not problems, "\n".join(problems)
    assert any(references.values()), "no page shows a figure: the reference pattern is probably broken"


def test_every_registered_figure_is_shown_somewhere():
    hook, references = _referenced_figures()
    shown = {reference["name"] for page in references.values() for reference in page}
    assert set(hook.FIGURES) <= shown, f"registered but never shown: {sorted(set(hook.FIGURES) - shown)}"


def test_figure_problems_are_reported():
    hook = load_hook()
    name = next(iter(hook.FIGURES))
    good = f"![A description](figures/{name}.svg)\n\n/// caption\nWhat to see.\n///\n"
    assert hook.figure_problems(good) == []
    problems = hook.figure_problems(f"![](figures/{name}.svg)\n\nno caption\n\n![x](../figures/unknown.svg)\n")
    assert len(problems) == 4 and any("not registered" in p for p in problems)
    assert sum("no alt text" in p for p in problems) == 1 and sum("caption" in p for p in problems) == 2


@pytest.mark.parametrize("name", sorted(load_hook().FIGURES))
def test_figure_renders_deterministically_with_its_legends_off_the_data(name):
    """Two renders give the same SVG bytes, and no legend covers a line or a point (found in a
    review: the headline figure's legend covered the end of naive fp8's loss curve). One test, so
    that each figure is drawn twice, not three times (the scale figures train a model: 3-5 s each)."""
    pytest.importorskip("matplotlib")
    hook = load_hook()
    first = hook.render_svg(name)
    with hook.figure_settings():
        figure = hook.FIGURES[name]()
        second = hook.svg_bytes(figure)
        hidden = _data_under_legends(figure)
    assert first.startswith(b"<?xml") and b"<svg" in first
    assert first == second, "two renders differ: the SVG is not deterministic"
    assert b"<dc:date>" not in first  # no build date in the metadata
    assert hidden == [], f"a legend covers {hidden}"


def _data_under_legends(figure) -> list[str]:
    """Every line (its label) with a point, or a point of a segment, drawn under a legend box."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    legends = [axis.get_legend() for axis in figure.axes if axis.get_legend()] + list(figure.legends)
    boxes = [legend.get_window_extent(canvas.get_renderer()) for legend in legends]
    hidden = []
    for axis in figure.axes:
        for line in axis.get_lines():
            with np.errstate(invalid="ignore", over="ignore"):  # NaN and Inf points draw nothing
                pixels = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
                if line.get_linestyle() not in ("None", "", " ") and len(pixels) > 1:  # the segments too
                    fractions = np.linspace(0.0, 1.0, 21)[:, None, None]
                    pixels = (pixels[:-1] * (1 - fractions) + pixels[1:] * fractions).reshape(-1, 2)
            pixels = pixels[np.isfinite(pixels).all(axis=1)]
            for box in boxes:
                if ((pixels[:, 0] > box.x0) & (pixels[:, 0] < box.x1)
                        & (pixels[:, 1] > box.y0) & (pixels[:, 1] < box.y1)).any():
                    hidden.append(line.get_label())
    return hidden


def test_the_legend_check_sees_a_line_under_a_legend():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 3))
    axis = figure.subplots()
    axis.plot([0, 1], [0, 1], label="diagonal")
    axis.plot([0.5], [0.1], "o", label="dot")
    axis.legend(loc="upper left")
    assert _data_under_legends(figure) == []  # the diagonal passes right of the box, the dot below it
    axis.legend(loc="center")  # over the diagonal's middle segment, not over either end
    assert _data_under_legends(figure) == ["diagonal"]
    axis.legend(loc="lower center")
    assert _data_under_legends(figure) == ["dot"]


# ---- found in a review: the hook drew an installed minifp8, and with the builder's matplotlib settings ----
def _fake_minifp8(tmp_path: Path) -> Path:
    """A folder holding another package named minifp8, as a pip install from elsewhere would provide."""
    package = tmp_path / "elsewhere" / "minifp8"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plots.py").write_text("OTHER = True\n")
    return package.parent


def test_figure_hook_draws_this_checkout_before_an_installed_minifp8(tmp_path):
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('hook', {str(HOOK)!r})\n"
            "hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)\n"
            "print(hook.plots.__file__)\n")
    env = {**os.environ, "PYTHONPATH": str(_fake_minifp8(tmp_path))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == ROOT / "minifp8" / "plots.py"


def test_figure_hook_refuses_a_minifp8_imported_from_elsewhere(tmp_path):
    code = ("import importlib.util, sys\n"
            "import minifp8.plots  # the other one, imported before the hook\n"
            f"spec = importlib.util.spec_from_file_location('hook', {str(HOOK)!r})\n"
            "hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)\n")
    elsewhere = _fake_minifp8(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(elsewhere)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode != 0
    assert (f"ImportError: the figures hook draws the minifp8 of this checkout ({ROOT}), but minifp8 was already "
            f"imported from {(elsewhere / 'minifp8').resolve()}") in result.stderr
    hook = load_hook()
    hook.check_checkout(ROOT / "minifp8" / "plots.py")
    with pytest.raises(ImportError, match="already imported from"):
        hook.check_checkout(elsewhere / "minifp8" / "plots.py")
    # found in a review: a copy installed inside the checkout passed as this checkout's
    for copy in (ROOT / ".venv" / "lib" / "python3.12" / "site-packages", ROOT / "build" / "lib"):
        with pytest.raises(ImportError, match=re.escape(f"already imported from {copy / 'minifp8'}")):
            hook.check_checkout(copy / "minifp8" / "plots.py")


def test_figure_renders_the_same_whatever_the_builders_matplotlib_settings():
    matplotlib = pytest.importorskip("matplotlib")
    hook = load_hook()
    name = "train-speed"  # (the quickest to draw)
    expected = hook.render_svg(name)
    builder = {"font.size": 14.0, "lines.linewidth": 3.0, "axes.grid": True, "svg.fonttype": "none",
               "axes.prop_cycle": matplotlib.cycler(color=["red", "green"])}
    with matplotlib.rc_context(builder):
        assert hook.render_svg(name) == expected
        assert matplotlib.rcParams["font.size"] == 14.0  # and the builder's settings are left as they were


def test_plots_need_matplotlib_only_when_called():
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # makes any matplotlib import fail
            "import minifp8, minifp8.plots\n"
            "try:\n    minifp8.plots.value_grid()\nexcept ImportError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert 'pip install "minifp8[plot]"' in result.stdout
