"""The commands and examples the docs show work as written.

- Every ``python -m minifp8...`` command in README.md, CHANGELOG.md, the tutorials and the docstrings
  gets through its module's whole command line (flags, the checks of flag combinations, the data,
  the output folder) up to the work itself, which is stubbed out: a command a reader copies must
  not stop at "error: unrecognized arguments" or a refused combination.
- The README's Python examples run, with a stand-in for the reader's backend, and each value a
  ``# -> [...]`` comment shows is the value the code computes, bit for bit.

(The tutorials' Python blocks run in test_tutorials.py; their printed output is compared there.)
"""
from __future__ import annotations

import ast
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import minifp8
from minifp8 import __main__ as package_main
from minifp8 import bench, explain, fp8, golden, train_tiny
from test_tutorials import code_blocks  # (the fenced blocks of a page, as the tutorials' test reads them)

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "tutorials").glob("*.md"))]
MODULES = sorted((ROOT / "minifp8").glob("*.py"))

COMMAND = re.compile(r"python -m minifp8(?:\.(?P<module>\w+))?(?P<rest>.*)", re.S)


# ---- finding the commands --------------------------------------------------------------------------
def _command(text: str) -> tuple[str, str] | None:
    """(module, arguments) of the command that ``text`` starts at: to the end of the text, a shell
    comment, a pipe or a redirection."""
    match = COMMAND.match(text)
    if match is None:
        return None
    rest = re.split(r"\s#|\s\||\s>|\s&&|;", match["rest"], maxsplit=1)[0]
    if rest and not rest[0].isspace():  # (prose: "python -m minifp8: ...", "python -m minifp8...")
        return None
    return match["module"] or "", " ".join(rest.split())


def markdown_commands(markdown: str) -> list[tuple[int, str, str]]:
    """(line, module, arguments) of each command in a page: each line of a fenced shell block
    that holds one (not a Python block's string), and each inline code span that holds one with
    its arguments (spans may break over lines; a span of the bare command names it, as
    "`python -m minifp8.golden` writes...")."""
    found, prose = [], markdown.splitlines()
    for block in code_blocks(markdown):
        body = block["source"].splitlines()
        for offset, line in enumerate(body, 1):
            if offset > 1 and body[offset - 2].endswith("\\"):
                continue  # (the rest of the command above)
            following = body[offset:]
            while line.endswith("\\") and following:  # a shell command continued on the next line
                line, following = line[:-1] + " " + following[0].strip(), following[1:]
            start = line.find("python -m minifp8")
            if block["language"] not in ("python", "py") and start >= 0 and (command := _command(line[start:])):
                found.append((block["line"] + offset, *command))
        prose[block["line"] - 1:block["line"] + len(body) + 1] = [""] * (len(body) + 2)  # (the line numbers stay)
    text = "\n".join(prose)
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        code = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", span[1])  # (an environment prefix, VAR=value)
        if code.startswith("python -m minifp8") and (command := _command(code)) and command[1]:
            found.append((text.count("\n", 0, span.start()) + 1, *command))
    return found


def docstring_commands(source: str) -> list[tuple[int, str, str]]:
    """(line, module, arguments) of each command in a module's docstrings: a line that starts with
    one (a literal block), and each ````...```` span that holds one with its arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        docstring = ast.get_docstring(node, clean=False)
        if not docstring:
            continue
        first = node.body[0].lineno
        for offset, line in enumerate(docstring.splitlines()):
            if line.strip().startswith("python -m minifp8") and (command := _command(line.strip())):
                found.append((first + offset, *command))
        for span in re.finditer(r"``(.+?)``", docstring, re.S):
            if span[1].startswith("python -m minifp8") and (command := _command(span[1])) and command[1]:
                found.append((first + docstring.count("\n", 0, span.start()), *command))
    return found


def documented_commands() -> list[tuple[str, str, str]]:
    """(where, module, arguments) of every command the docs show, once per distinct command."""
    commands: dict[tuple[str, str], str] = {}
    for page in PAGES:
        for line, module, arguments in markdown_commands(page.read_text(encoding="utf-8")):
            commands.setdefault((module, arguments), f"{page.relative_to(ROOT)}:{line}")
    for path in MODULES:
        for line, module, arguments in docstring_commands(path.read_text(encoding="utf-8")):
            commands.setdefault((module, arguments), f"{path.relative_to(ROOT)}:{line}")
    return [(where, module, arguments) for (module, arguments), where in sorted(commands.items())]


COMMANDS = documented_commands()

#: Placeholders the docs write for a value the reader chooses, and what the test puts there.
PLACEHOLDERS = {"R": sorted(fp8.RECIPES)}


def _instances(arguments: str) -> list[list[str]]:
    """The argument lists a documented command stands for: a placeholder gives one per value;
    a command with "..." (the rest left out) or "[SECTION ...]" (a usage line) gives none."""
    if "..." in arguments:
        return []
    argv = shlex.split(arguments)
    for index, token in enumerate(argv):
        if token in PLACEHOLDERS:
            return [argv[:index] + [value] + argv[index + 1:] for value in PLACEHOLDERS[token]]
    return [argv]


def test_the_docs_show_commands_of_every_module():
    """The finders see what the docs show (so that the test below has something to check)."""
    modules = {module for _, module, _ in COMMANDS}
    assert {"train_tiny", "bench", "golden", "explain"} <= modules
    arguments = {(module, arguments) for _, module, arguments in COMMANDS}
    assert ("train_tiny", "--recipe fp32,fp8,unit") in arguments  # a fenced block (README, tutorial 7)
    assert ("explain", "3/10 E4M3 --rounding toward_zero") in arguments  # a docstring's literal block
    assert ("golden", "--out DIR") in arguments  # a docstring's ``...`` span and README's prose
    assert len(COMMANDS) >= 25


def test_finders_on_planted_text():
    page = ("Run `python -m minifp8.train_tiny --recipe fp8\n  --steps 5` here; not `python -m minifp8: x`.\n\n"
            "```bash\nOPENBLAS_NUM_THREADS=1 python -m minifp8.bench train  # a comment\n"
            "python -m minifp8.golden --out g | head\n"
            "python -m minifp8.train_tiny --recipe fp8 \\\n    --steps 3\n```\n"
            "```python\nprint('python -m minifp8.explain 1 E4M3')\n```\n"
            "Or `OPENBLAS_CORETYPE=Haswell python -m minifp8.bench train --steps 2`.\n")
    assert markdown_commands(page) == [(5, "bench", "train"), (6, "golden", "--out g"),
                                       (7, "train_tiny", "--recipe fp8 --steps 3"),
                                       (1, "train_tiny", "--recipe fp8 --steps 5"), (13, "bench", "train --steps 2")]
    source = '"""Doc.\n\n    python -m minifp8.explain 0.3 E4M3\n\nAs ``python -m minifp8.bench\nmx``."""\n'
    assert docstring_commands(source) == [(3, "explain", "0.3 E4M3"), (5, "bench", "mx")]
    assert _instances("--recipe R --steps 2") == [["--recipe", r, "--steps", "2"] for r in sorted(fp8.RECIPES)]
    assert _instances("[SECTION ...]") == [] and _instances("...") == []


# ---- running them, up to the work --------------------------------------------------------------------
class _Stopped(Exception):
    """Raised by the stubs in place of the work: the command got through every check before it."""


def _run_train_tiny(argv, monkeypatch):
    def stop(run, config, dataset, **_):
        raise _Stopped(run.label)
    monkeypatch.setattr(train_tiny, "train", stop)
    try:
        status = train_tiny.main(argv)
    except _Stopped:
        return 0
    return status


def _run_bench(argv, monkeypatch):
    ran = []
    for name in list(bench.SECTIONS):
        monkeypatch.setitem(bench.SECTIONS, name, lambda args, name=name: ran.append(name))
    status = bench.main(argv)
    assert status != 0 or ran, "bench ran no section"
    return status


RUNNERS = {
    "train_tiny": _run_train_tiny,
    "bench": _run_bench,
    "golden": lambda argv, monkeypatch: golden.main(argv),  # (about a second: the files themselves)
    "explain": lambda argv, monkeypatch: explain.main(argv),
    "": lambda argv, monkeypatch: package_main.main(argv),
}


@pytest.mark.parametrize("where, module, arguments", COMMANDS, ids=[f"{w} {m} {a}"[:90] for w, m, a in COMMANDS])
def test_documented_command_gets_through_its_checks(where, module, arguments, tmp_path, monkeypatch, capsys):
    """Run in an empty folder (relative --out paths land there); a --data file the docs name
    exists there as a small text file."""
    assert module in RUNNERS, f"{where}: python -m minifp8.{module} is no command of the package"
    monkeypatch.chdir(tmp_path)
    if not _instances(arguments):
        pytest.skip(f"{where}: a usage line or a command with its arguments left out ({arguments})")
    for argv in _instances(arguments):
        if "--data" in argv:
            (tmp_path / argv[argv.index("--data") + 1]).write_text("To be, or not to be: that is the question.\n"
                                                                   * 40, encoding="utf-8")
        try:
            status = RUNNERS[module](argv, monkeypatch)
        except SystemExit as exit_:  # (-h, or an argparse error in a module whose main lets it through)
            status = exit_.code or 0
        err = capsys.readouterr().err
        assert status == 0, f"{where}: python -m minifp8.{module} {shlex.join(argv)} exits {status}: {err}"


# ---- the README's Python examples ----------------------------------------------------------------------
def readme_python_blocks() -> list[tuple[int, str]]:
    return [(block["line"], block["source"]) for block in code_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
            if block["language"] in ("python", "py")]


def _shown_values(text: str) -> list[float]:
    """The numbers of a comment's list, as "[0.1015625, 448., nan, -0.]"."""
    assert text.startswith("[") and text.endswith("]"), text
    return [float(token) for token in text[1:-1].replace(",", " ").split()]


def _same_bits(computed, shown: list[float]) -> bool:
    computed = np.asarray(computed, dtype=np.float64).ravel()
    shown_array = np.asarray(shown, dtype=np.float64)
    return computed.shape == shown_array.shape and all(
        (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
        for a, b in zip(computed.tolist(), shown_array.tolist()))


def test_same_bits_sees_the_sign_of_zero_and_nan():
    assert _same_bits([0.5, float("nan"), -0.0], _shown_values("[0.5, nan, -0.]"))
    assert not _same_bits([0.5, float("nan"), 0.0], _shown_values("[0.5, nan, -0.]"))
    assert not _same_bits([0.5, 1.0], _shown_values("[0.5, nan]"))


def test_readme_python_examples_run_and_show_what_they_compute():
    """The oracle examples: a backend is the reader's own, so ``my_backend_cast_to_e4m3`` stands in
    as the codec itself, saturating (the example compares with saturate=True)."""
    blocks = readme_python_blocks()
    assert len(blocks) >= 2
    namespace = {"__name__": "readme_example",
                 "my_backend_cast_to_e4m3": lambda x: minifp8.encode(x, "E4M3", saturate=True)}
    checked = 0
    for start, source in blocks:
        exec(compile(source, f"README.md, block at line {start}", "exec"), namespace)
        for offset, line in enumerate(source.splitlines(), 1):
            code, arrow, shown = line.partition("# ->")
            if arrow:
                value = eval(code.strip(), namespace)
                assert _same_bits(value, _shown_values(shown.strip())), (
                    f"README.md:{start + offset}: shows {shown.strip()}, the code gives {value!r}")
                checked += 1
    assert checked >= 1
