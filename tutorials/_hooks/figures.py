"""MkDocs hook: figures from ``minifp8.plots`` rendered at build time, and MathJax served locally.

Figures
-------
A page shows a figure with a Markdown image whose target is ``figures/NAME.svg``, followed by a
caption block (``pymdownx.blocks.caption``) that says what to see in it::

    ![Every positive E4M3 and E5M2 value on a log2 axis](figures/value-grid.svg)

    /// caption
    E4M3 has finer steps, E5M2 a wider range; subnormals are orange.
    ///

:data:`FIGURES` maps each ``NAME`` to the ``minifp8.plots`` call that draws it. ``on_files`` renders
every registered figure to SVG and adds it to the site as ``figures/NAME.svg``; no image file is
committed. ``on_page_markdown`` warns (an error under ``strict``) about a figure that is not
registered, has no alt text or has no caption. To add a figure: write the function in
``minifp8/plots.py``, register it here, reference it from a page.

The SVG is deterministic: it is drawn from matplotlib's own defaults (``rcParamsDefault``, not
the builder's matplotlibrc or style) plus :data:`SVG_SETTINGS`, matplotlib's ``svg.hashsalt`` is
fixed (the ids of clip paths and glyphs are hashes), no date is written, text is drawn as paths
(no font is needed to view it), and every random number comes from a seeded
``numpy.random.Generator`` inside the plots function. The figures are drawn by the ``minifp8`` of
this checkout, which the hook puts first on ``sys.path`` (an ImportError if another one was
imported before it).

MathJax
-------
Math is written as ``$...$`` / ``$$...$$`` and marked up by ``pymdownx.arithmatex`` (generic mode).
MathJax 3 comes from the ``django-static-mathjax`` package on PyPI, a plain copy of MathJax's
``es5`` build with no dependencies (it needs no Django to be used this way). ``on_files`` copies
the SVG-output bundle and the components it loads on demand into ``assets/mathjax/``, so neither
the build nor a reader's browser fetches anything from the network. The SVG output embeds its
glyphs, so no font files are needed.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")  # never open a window, even if something imports pyplot

# The site draws this checkout's code and committed results: its root (tutorials/_hooks/ -> the
# directory of mkdocs.yml) goes first on sys.path, ahead of a minifp8 installed from elsewhere
# (CI in a clone of a checkout that was pip-installed).
CHECKOUT = Path(__file__).resolve().parents[2]
if not sys.path or Path(sys.path[0] or ".").resolve() != CHECKOUT:
    sys.path.insert(0, str(CHECKOUT))
from minifp8 import plots  # noqa: E402  (plots imports matplotlib lazily, inside each function)


def check_checkout(module_file, checkout: Path = CHECKOUT) -> None:
    """ImportError unless ``module_file`` (``minifp8.plots.__file__``) is ``checkout``'s own
    ``minifp8/plots.py``: a minifp8 imported before the hook ran from anywhere else (another
    directory, or a copy installed inside the checkout: ``.venv/.../site-packages``, ``build/lib``)
    would draw that code and its results."""
    if Path(module_file).resolve().parent != Path(checkout).resolve() / "minifp8":
        raise ImportError(f"the figures hook draws the minifp8 of this checkout ({checkout}), but minifp8 was "
                          f"already imported from {Path(module_file).resolve().parent}: run mkdocs (or the "
                          f"tests) where this checkout's minifp8 is imported, e.g. pip install -e {checkout}")


check_checkout(plots.__file__)

log = logging.getLogger("mkdocs.hooks.figures")  # under "mkdocs", so strict mode counts warnings

# ---- the registry: figure name -> a call of minifp8.plots that returns a matplotlib Figure ------
FIGURES = {
    "value-grid": lambda: plots.value_grid(("E4M3", "E5M2")),
    "rounding-error": lambda: plots.rounding_error(("E4M3", "E5M2")),
    "rounding-modes": lambda: plots.rounding_modes("E4M3", (1.0625, 1.1875, 1.28, 1.45), random_bit_count=8),
    "stochastic-rounding-bias": lambda: plots.stochastic_rounding_bias("E4M3", low=1.0, high=1.5, seed=0),
    "delayed-scaling-outlier": lambda: plots.delayed_scaling_outlier(steps=50, spike_step=30, spike_factor=8.0,
                                                                     history_len=16, seed=0),
    "block-scaling-snr": lambda: plots.block_scaling_snr(rows=57, columns=2048, low_exponent=-28, seed=0),
    "fp8-linear-gemms": plots.fp8_linear_gemms,
    "scales-standard-gpt": lambda: headline_gpt_scales("standard"),
    "scales-unit-gpt": lambda: headline_gpt_scales("unit"),
    "headline-training": lambda: plots.training_curves(train_results()),
    "fp8lm-options": lambda: plots.fp8lm_options(train_results("fp8lm")),
    "long-training": lambda: plots.validation_curves(train_results("long")),
    "long-lm-head-gaps": lambda: plots.gap_curves(long_lm_head_arms()),
    "long-lm-head-gemms": lambda: plots.gap_curves(long_lm_head_gemm_arms()),
    "long-scales": lambda: plots.scale_curves(long_study("long_scales.json"), tensor="residual#2",
                                              title="The second block's output (the residual stream) and its gradient"),
    "scaled-gemm-errors": lambda: plots.scaled_gemm_errors(seed=2),
    "train-speed": lambda: plots.train_speed(speed_results()),
}


def speed_results() -> dict:
    """The committed ``python -m minifp8.bench train --json`` run (package data)."""
    from minifp8 import bench

    return bench.load_speed_results()


def train_results(experiment: str = "headline") -> dict:
    """The committed results of ``python -m minifp8.train_tiny --experiment EXPERIMENT`` (package data)."""
    from minifp8 import train_tiny

    return train_tiny.load_results(train_tiny.HEADLINE_RESULTS.with_name(f"{experiment}.json"))


def long_lm_head_arms() -> dict:
    """`plots.gap_curves`' arms for tutorial 7b: current's 4000-step runs at seeds 0, 1 and 2 with
    every cast (long.json, long_seeds.json), with the LM head's gradient in float32 and with the LM
    head centred (long_lm_head.json), each against the fp32 run of its seed, and with weight decay
    against the fp32 run with it (long_weight_decay.json)."""
    plain = long_plain_curves()
    lm_head, decay = long_study("long_lm_head.json")["seeds"], long_study("long_weight_decay.json")["seeds"]
    return {"every cast": {seed: (plain[seed]["current"], plain[seed]["fp32"]) for seed in "012"},
            "LM head's gradient in float32": {seed: (lm_head[seed]["lm_head:grad"], plain[seed]["fp32"])
                                              for seed in "012"},
            "LM head centred every step": {seed: (lm_head[seed]["centred"], plain[seed]["fp32"]) for seed in "012"},
            "weight decay 0.1 (fp32 with it too)": {seed: (decay[seed]["current"], decay[seed]["fp32"])
                                                    for seed in "012"}}


def long_lm_head_gemm_arms() -> dict:
    """`plots.gap_curves`' arms for tutorial 7b: current's 4000-step runs at seeds 0, 1 and 2 with
    every cast, with the LM head's gradient in float32 for both backward GEMMs (long_lm_head.json),
    and for its weight-gradient or its data-gradient GEMM alone (long_lm_head_gemms.json), each
    against the fp32 run of its seed."""
    plain = long_plain_curves()
    both, gemms = long_study("long_lm_head.json")["seeds"], long_study("long_lm_head_gemms.json")["seeds"]
    return {"every cast": {seed: (plain[seed]["current"], plain[seed]["fp32"]) for seed in "012"},
            "gradient in float32 (both GEMMs)": {seed: (both[seed]["lm_head:grad"], plain[seed]["fp32"])
                                                 for seed in "012"},
            "weight gradient in float32 (wgrad)": {seed: (gemms[seed]["lm_head:wgrad"], plain[seed]["fp32"])
                                                   for seed in "012"},
            "gradient passed back in float32 (dgrad)": {seed: (gemms[seed]["lm_head:dgrad"], plain[seed]["fp32"])
                                                        for seed in "012"}}


def long_study(name: str) -> dict:
    """A study file committed beside long.json (package data)."""
    import json

    from minifp8 import train_tiny

    return json.loads(train_tiny.LONG_RESULTS.with_name(name).read_text(encoding="utf-8"))


def long_plain_curves() -> dict:
    """The validation curves of the 4000-step runs with every cast, by seed and label: seed 0 from
    long.json, seeds 1 and 2 from long_seeds.json."""
    return {"0": {label: run["val"] for label, run in train_results("long")["runs"].items()},
            **long_study("long_seeds.json")["seeds"]}


def headline_gpt_scales(family: str):
    """``plots.scale_plot`` of the activations and gradients the FP8 casts would see in the headline
    experiment's GPT (``train_tiny.HEADLINE_CONFIG``) at initialisation, one forward and backward pass
    (`plots.gpt_cast_scales`: the weights, cast to E4M3 too, are not drawn; tutorial 6 counts them)."""
    from minifp8.model import GPTConfig
    from minifp8.train_tiny import HEADLINE_CONFIG as shape

    config = GPTConfig(vocab_size=14, block_size=shape["block_size"], n_layer=shape["n_layer"],
                       n_head=shape["n_head"], n_embd=shape["n_embd"], family=family)
    records = plots.gpt_cast_scales(config, batch_size=shape["batch_size"], seed=0)
    return plots.scale_plot(records, title=f"{family.capitalize()} GPT at initialisation: activations and gradients "
                                           f"at its FP8 casts ({shape['batch_size']} x {shape['block_size']} tokens)")

FIGURE_DIRECTORY = "figures"
SVG_SETTINGS = {"svg.hashsalt": "minifp8", "svg.fonttype": "path"}

# ![alt](figures/NAME.svg), with any relative prefix (../figures/...) for pages in sub-folders.
FIGURE_REFERENCE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>(?:\.\./)*" + FIGURE_DIRECTORY
                              + r"/(?P<name>[^)\s/]+)\.svg)\)")
CAPTION_START = re.compile(r"^\s*/// caption\s*$")

MATHJAX_DESTINATION = "assets/mathjax"
# The bundle the pages load, and the folders of components it may load on demand: TeX extensions
# (autoload), the context menu, and the accessibility explorer with its speech rules.
MATHJAX_PARTS = ("tex-svg.js", "input", "ui", "a11y", "sre", "adaptors")


@contextlib.contextmanager
def figure_settings():
    """matplotlib's built-in defaults plus :data:`SVG_SETTINGS`, whatever the builder's matplotlibrc
    says; the caller's settings come back afterwards."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(SVG_SETTINGS)
        yield


def render_svg(name: str) -> bytes:
    """Draw the registered figure ``name`` and return it as deterministic SVG bytes."""
    with figure_settings():
        return svg_bytes(FIGURES[name]())


def svg_bytes(figure) -> bytes:
    """``figure`` as SVG bytes without a date in their metadata (call it under `figure_settings`)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def figure_references(markdown: str) -> list[dict]:
    """Every figure a page references: name, alt text, line number and whether a caption follows."""
    lines = markdown.splitlines()
    references = []
    for number, line in enumerate(lines):
        for match in FIGURE_REFERENCE.finditer(line):
            following = [text for text in lines[number + 1:number + 3] if text.strip()]
            references.append({"name": match["name"], "alt": match["alt"].strip(), "line": number + 1,
                               "captioned": bool(following) and bool(CAPTION_START.match(following[0]))})
    return references


def figure_problems(markdown: str) -> list[str]:
    """What is wrong with a page's figures: unregistered, without alt text, or without a caption."""
    problems = []
    for reference in figure_references(markdown):
        where = f"line {reference['line']}: figure {reference['name']!r}"
        if reference["name"] not in FIGURES:
            problems.append(f"{where} is not registered in FIGURES ({', '.join(sorted(FIGURES))})")
        if not reference["alt"]:
            problems.append(f"{where} has no alt text: ![what the picture shows](...)")
        if not reference["captioned"]:
            problems.append(f"{where} needs a '/// caption' block right after it saying what to see")
    return problems


def mathjax_root() -> Path:
    """The ``es5`` folder of the MathJax copy installed by ``django-static-mathjax``."""
    from mkdocs.exceptions import PluginError

    try:
        import mathjax
    except ImportError as error:
        raise PluginError("the site serves MathJax locally from the 'django-static-mathjax' package: "
                          "pip install -e \".[docs]\" (or pip install django-static-mathjax)") from error
    root = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (root / "tex-svg.js").is_file():
        raise PluginError(f"no MathJax es5 build at {root}: the installed 'mathjax' module is not the one "
                          "from django-static-mathjax")
    return root


# ---- MkDocs events -------------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    for name in FIGURES:
        uri = f"{FIGURE_DIRECTORY}/{name}.svg"
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"{uri} is drawn by the figures hook; remove the file from the docs folder")
        files.append(File.generated(config, uri, content=render_svg(name)))

    root = mathjax_root()
    for part in MATHJAX_PARTS:
        paths = [root / part] if (root / part).is_file() else sorted(p for p in (root / part).rglob("*") if p.is_file())
        for path in paths:
            uri = f"{MATHJAX_DESTINATION}/{path.relative_to(root).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    for problem in figure_problems(markdown):
        log.warning("%s, %s", page.file.src_uri, problem)
    return markdown
