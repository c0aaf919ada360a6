"""Docstrings match the code they document.

For every public callable of every ``minifp8`` module (the names in the module's ``__all__``, or
its public names defined there when it has none; the public methods of its public classes; the
package's top-level re-exports), the numpy-style docstring's ``Parameters`` and ``Other
Parameters`` sections are read and held to ``inspect.signature``:

- every documented name is a parameter (a renamed or removed parameter is caught);
- where a docstring has such a section, every parameter is in it (``self``/``cls`` excepted;
  ``*args``/``**kwargs`` count, documented as ``*args``, ``**kwargs`` or plain ``args``);
- a default stated in a type line (``x : int, default 3`` or ``(default: 3)``), or by a
  description sentence that starts "Default 3", is the signature's default (a ``None`` default
  stands for one the code works out, which prose may describe by its meaning, so it is only held
  to a type line), and a parameter typed ``optional`` has a default.

A dataclass's ``Attributes`` (with its ``Parameters``) name exactly its fields (and any property
or attribute it sets itself); another class's ``Attributes`` name attributes it has or sets.

The ``>>>`` examples run in tests/test_model.py's ``test_docstring_examples_run`` (doctest over
every module that has one); here we check that doctest reaches every ``>>>`` line of the package
and that no docstring holds a fenced Python example that nothing would run.
"""
from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import minifp8

PACKAGE_DIR = Path(minifp8.__file__).parent
MODULE_NAMES = sorted(path.stem for path in PACKAGE_DIR.glob("*.py") if path.stem != "__init__")
PARAMETER_SECTIONS = ("Parameters", "Other Parameters")
UNDERLINE = re.compile(r"^-{3,}$")
ENTRY = re.compile(r"^(?P<names>[^:]+?)\s*(?::\s*(?P<type>.*))?$")
NAME = re.compile(r"^\*{0,2}[A-Za-z_]\w*$")
VALUE = r"(?P<value>\"[^\"]*\"|'[^']*'|``[^`]*``|[-+]?\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?|[A-Za-z_][\w.]*\w|\w)"
# In a type line: "int, default 3", "str (default: 'E4M3')", "default=3".
TYPE_DEFAULT = re.compile(r"\bdefault(?:\s*[:=]\s*|\s+)" + VALUE)
# In a description, a sentence that starts "Default 1e-5 (the paper's ...)" or "Default: E4M3".
PROSE_DEFAULT = re.compile(r"(?:^|[.;]\s+)Default(?:\s*:\s*|\s+)" + VALUE)


# ---- parsing ----------------------------------------------------------------------------------------

def sections(docstring: str) -> dict[str, list[str]]:
    """The numpy-style sections of a (cleaned) docstring: header -> its body lines."""
    lines = inspect.cleandoc(docstring).splitlines()
    found, current = {}, None
    for index, line in enumerate(lines):
        if index + 1 < len(lines) and line.strip() and not line.startswith(" ") and UNDERLINE.match(lines[index + 1]):
            current = line.strip()
            found[current] = []
        elif current is not None and not UNDERLINE.match(line):
            found[current].append(line)
    return found


def entries(body: list[str]) -> list[tuple[list[str], str, str]]:
    """A section's entries: (names, type line, description), one per unindented line (``a, b :
    int`` documents two names); the indented lines under it are its description. An unindented
    line that is not of that form is returned with names ``[line]``, so that the caller reports it
    (numpydoc renderers show such a line as an entry too)."""
    parsed = []
    for line in body:
        if line.strip() and line[0].isspace() and parsed:
            parsed[-1][2].append(line.strip())
        elif line.strip() and not line[0].isspace():
            match = ENTRY.match(line.strip())
            names = [name.strip() for name in match["names"].split(",")]
            if all(NAME.match(name) for name in names):
                parsed.append(([name.lstrip("*") for name in names], match["type"] or "", []))
            else:
                parsed.append(([line.strip()], "", []))
    return [(names, type_line, " ".join(description)) for names, type_line, description in parsed]


def documented(docstring: str | None, headers) -> dict[str, tuple[str, str]] | None:
    """Documented name -> (type line, description), from the given sections; None when the
    docstring has none of them."""
    found = sections(docstring or "")
    if not any(header in found for header in headers):
        return None
    names = {}
    for header in headers:
        for entry_names, type_line, description in entries(found.get(header, [])):
            for name in entry_names:
                names[name] = (type_line, description)
    return names


def stated_defaults(type_line: str, description: str) -> list[str]:
    """The defaults an entry states, as written (``int, default 3`` -> ``["3"]``)."""
    found = [match["value"] for match in TYPE_DEFAULT.finditer(type_line)]
    found += [match["value"] for match in PROSE_DEFAULT.finditer(description)]
    return [value.strip("`") for value in found]


def default_matches(stated: str, actual) -> bool:
    """Whether a default as written in a docstring is the signature's default."""
    try:
        value = ast.literal_eval(stated)
    except (ValueError, SyntaxError):
        # a name such as E4M3 or np.float32: compare with how the default prints
        return stated in {repr(actual), str(actual), getattr(actual, "__name__", None)}
    if isinstance(value, bool) or isinstance(actual, bool):
        return value is actual
    if isinstance(value, (int, float)) and isinstance(actual, (int, float)):
        return value == actual and isinstance(actual, float) == isinstance(value, float)
    return value == actual


# ---- what is public ---------------------------------------------------------------------------------

def public_names(module) -> list[str]:
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
            and (inspect.isfunction(value) or inspect.isclass(value))]


def public_methods(cls) -> list[tuple[str, object, bool]]:
    """(name, function, bound) for the public methods a class defines or inherits from minifp8:
    ``bound`` is False for staticmethods (no self/cls to drop). ``__call__`` counts as public."""
    methods = []
    for name in sorted(dir(cls)):
        if name.startswith("_") and name != "__call__":
            continue
        raw = inspect.getattr_static(cls, name)
        bound = not isinstance(raw, staticmethod)
        function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if inspect.isfunction(function) and function.__module__.startswith("minifp8"):
            methods.append((name, function, bound))
    return methods


def _callables():
    """One ``pytest.param(callable, drop_first, id=dotted name)`` per callable checked, each once
    (a method inherited by several classes is checked where it is first met)."""
    seen, found = set(), []

    def add(label, obj, drop_first=False):
        if id(obj) not in seen:
            seen.add(id(obj))
            found.append(pytest.param(obj, drop_first, id=label))

    modules = [importlib.import_module(f"minifp8.{name}") for name in MODULE_NAMES]
    exports = [(minifp8, name) for name in minifp8.__all__]  # after the modules: ids name where they live
    for module, name in [(module, name) for module in modules for name in public_names(module)] + exports:
        obj = getattr(module, name)
        where = module.__name__
        if inspect.isclass(obj) and obj.__module__.startswith("minifp8"):
            add(f"{where}.{name}", obj)
            for method_name, function, bound in public_methods(obj):
                add(f"{where}.{name}.{method_name}", function, drop_first=bound)
        elif inspect.isfunction(obj) and obj.__module__.startswith("minifp8"):
            add(f"{where}.{name}", obj)
    return found


CALLABLES = _callables()


# ---- the checks -------------------------------------------------------------------------------------

def _signature_parameters(obj, drop_first: bool) -> dict[str, inspect.Parameter]:
    parameters = list(inspect.signature(obj).parameters.values())
    if drop_first:
        parameters = parameters[1:]
    return {parameter.name: parameter for parameter in parameters}


def _parameter_problems(docstring, parameters: dict[str, inspect.Parameter]) -> list[str]:
    names = documented(docstring, PARAMETER_SECTIONS)
    if names is None:
        return []
    problems = [f"documents {name!r}, which is not a parameter" + (" (an entry of the form 'name : type'?)"
                if not NAME.match(name) else "") for name in names if name not in parameters]
    problems += [f"does not document parameter {name!r}" for name in parameters if name not in names]
    for name, (type_line, description) in names.items():
        parameter = parameters.get(name)
        if parameter is None:
            continue
        has_default = parameter.default is not inspect.Parameter.empty
        for stated in stated_defaults(type_line, description):
            # A None default that the code resolves ("Default 32", "Default: weight matrices")
            # is described by what it means, not by its value: only other defaults are compared.
            if parameter.default is None and "default" not in type_line:
                continue
            if not has_default or not default_matches(stated, parameter.default):
                actual = repr(parameter.default) if has_default else "no default"
                problems.append(f"says {name!r} defaults to {stated}, the signature has {actual}")
        variadic = parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if re.search(r"\boptional\b", type_line) and not (has_default or variadic):
            problems.append(f"types {name!r} optional, but it has no default")
    return problems


def _assigned_attributes(cls) -> set[str]:
    """Attributes a class (or a base from its package) sets on its instances in its source:
    ``self.name = ...`` (tuple targets and annotations too) or ``object.__setattr__(self, "name", ...)``."""
    names, package = set(), cls.__module__.split(".")[0]
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != package:
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "__setattr__" and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
    return names


def _attribute_problems(cls) -> list[str]:
    attributes = documented(cls.__doc__, ("Attributes",))
    if dataclasses.is_dataclass(cls):
        fields = {field.name for field in dataclasses.fields(cls)}
        named = {**(attributes or {}), **(documented(cls.__doc__, PARAMETER_SECTIONS) or {})}
        if attributes is None and not named:
            return []
        problems = [f"does not document field {name!r}" for name in sorted(fields - set(named))]
        extra = set(attributes or {}) - fields
    else:
        if attributes is None:
            return []
        problems, extra = [], set(attributes)
    known = _assigned_attributes(cls) | {name for name in dir(cls)}
    problems += [f"documents attribute {name!r}, which it neither has nor sets" for name in sorted(extra - known)]
    return problems


@pytest.mark.parametrize("obj, drop_first", CALLABLES)
def test_docstring_matches_signature(obj, drop_first):
    problems = []
    if inspect.isclass(obj):
        if documented(obj.__doc__, PARAMETER_SECTIONS) is not None:
            # (only then: an exception class's signature, a builtin's, cannot be read)
            problems += _parameter_problems(obj.__doc__, _signature_parameters(obj, drop_first=False))
        problems += _attribute_problems(obj)
        init = vars(obj).get("__init__")
        if inspect.isfunction(init) and init.__doc__:
            problems += [f"__init__ {problem}" for problem in
                         _parameter_problems(init.__doc__, _signature_parameters(init, drop_first=True))]
    else:
        problems += _parameter_problems(obj.__doc__, _signature_parameters(obj, drop_first))
    assert not problems, "\n".join(problems)


def test_every_module_and_export_is_checked():
    """The collection above is not empty or lopsided: every module with public callables is in
    it, methods included, and so is every top-level export."""
    ids = {param.id for param in CALLABLES}
    assert {"minifp8.codec.encode", "minifp8.autograd.Tensor.backward", "minifp8.model.GPT",
            "minifp8.formats.FloatFormat", "minifp8.autograd.Tensor.sum"} <= ids
    checked_modules = {label.split(".")[1] for label in ids}
    assert set(MODULE_NAMES) <= checked_modules, set(MODULE_NAMES) - checked_modules
    checked_objects = {id(param.values[0]) for param in CALLABLES}
    exports = [getattr(minifp8, name) for name in minifp8.__all__]
    assert all(id(obj) in checked_objects for obj in exports if callable(obj))


# ---- the parser itself, on known docstrings ---------------------------------------------------------

def _planted(x, fmt="E4M3", *values, rounding: str = "nearest_even", threshold=1e-5, **options):
    """A function to check the checker with.

    Parameters
    ----------
    x : array_like
    fmt : str, default "E4M3"
    *values
        Any number.
    rounding : str, optional
    threshold : float
        Default 1e-5 (a paper's).
    **options
    """


@dataclasses.dataclass
class _PlantedRecord:
    """A dataclass to check the checker with.

    Attributes
    ----------
    name : str
    size, count : int
    """

    name: str
    size: int
    count: int = 0


class _PlantedState:
    """A class to check the checker with.

    Attributes
    ----------
    steps : int
    kind : str
    """

    kind = "gemm"

    def __init__(self):
        self.steps = 0


def test_checker_passes_matching_docstrings():
    assert _parameter_problems(_planted.__doc__, _signature_parameters(_planted, False)) == []
    assert _attribute_problems(_PlantedRecord) == []
    assert _attribute_problems(_PlantedState) == []


@pytest.mark.parametrize("edit, problem", [
    (("x : array_like", "y : array_like"), "documents 'y', which is not a parameter"),
    (("x : array_like", "x, y : array_like"), "documents 'y', which is not a parameter"),
    (("*values\n    Any number.\n", ""), "does not document parameter 'values'"),
    (('default "E4M3"', 'default "E5M2"'), "says 'fmt' defaults to \"E5M2\""),
    (('str, default "E4M3"', "str (default: 'E5M2')"), "says 'fmt' defaults to 'E5M2'"),
    (("Default 1e-5", "Default 1e-4"), "says 'threshold' defaults to 1e-4"),
    (("x : array_like", "x : array_like, optional"), "types 'x' optional, but it has no default"),
    (("**options", "**options\n\nText at the margin is not an entry."),
     "documents 'Text at the margin is not an entry.', which is not a parameter"),
])
def test_checker_catches_a_planted_mismatch(edit, problem):
    # (Python 3.13 strips docstrings' indentation when it compiles them, earlier versions do not:
    # the edits apply to the docstring as inspect.cleandoc gives it in both.)
    original = inspect.cleandoc(_planted.__doc__)
    docstring = original.replace(*edit)
    assert docstring != original
    problems = _parameter_problems(docstring, _signature_parameters(_planted, False))
    assert any(found.startswith(problem) for found in problems), problems


@pytest.mark.parametrize("cls, edit, problem", [
    (_PlantedRecord, ("size, count", "size"), "does not document field 'count'"),
    (_PlantedRecord, ("name : str", "label : str"), "documents attribute 'label'"),
    (_PlantedState, ("steps : int", "step : int"), "documents attribute 'step'"),
])
def test_checker_catches_a_planted_attribute_mismatch(monkeypatch, cls, edit, problem):
    monkeypatch.setattr(cls, "__doc__", cls.__doc__.replace(*edit))
    problems = _attribute_problems(cls)
    assert any(found.startswith(problem) for found in problems), problems


def test_checker_reads_sections_up_to_the_next_header():
    docstring = "Summary.\n\nParameters\n----------\na : int\n    Text.\n\nReturns\n-------\nint\n    b : c\n"
    assert documented(docstring, PARAMETER_SECTIONS) == {"a": ("int", "Text.")}
    assert documented("No sections here.", PARAMETER_SECTIONS) is None


# ---- examples ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("module_name", MODULE_NAMES + ["__init__"])
def test_doctest_reaches_every_example(module_name):
    """Every ``>>>`` line in the package's source is an example doctest finds, so
    tests/test_model.py's test_docstring_examples_run (doctest.testmod on each module with one)
    runs it: none sits in a comment, a nested function or a string that is not a docstring."""
    path = PACKAGE_DIR / f"{module_name}.py"
    in_source = len(re.findall(r"^\s*>>>", path.read_text(encoding="utf-8"), flags=re.MULTILINE))
    module = minifp8 if module_name == "__init__" else importlib.import_module(f"minifp8.{module_name}")
    found = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
    assert found == in_source, f"{path.name}: {in_source} '>>>' lines, doctest finds {found} examples"


def test_no_fenced_python_in_docstrings():
    """Docstrings show code to run as ``>>>`` examples (which doctest runs); a fenced ```python
    block in a docstring would run nowhere. (Fenced ```text blocks, e.g. formulas, are fine.)"""
    fenced = [f"{path.name}:{number}" for path in sorted(PACKAGE_DIR.glob("*.py"))
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if re.match(r"^\s*(```|~~~)\s*(python|py|pycon)\s*$", line)]
    assert not fenced, fenced


# ---- markup, as the API reference renders it -------------------------------------------------------
# mkdocstrings renders each docstring as Markdown (its numpy sections become tables), so markup from
# reStructuredText or plain text that Markdown reads otherwise shows up garbled on the API page.

SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|ref|exc):`")
# Outside a code span, "2**-9" or "x**2" opens bold and "float8_*" opens italics, and Markdown then
# eats the stars up to the next ones in the paragraph. (Bold meant as bold opens after a space and
# closes before one: "**not**".)
EATEN_BOLD = re.compile(r"(?<=[\w)\]])\*\*(?=[-+\w(])")
EATEN_ITALIC = re.compile(r"(?<=_)\*")
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
# A one-backslash \n, \r or \t in a docstring that is not a raw string is a real line break or tab in
# its text, which splits a code span such as ``"\n"`` and breaks the section around it.
ESCAPED_CONTROL = re.compile(r"(?<!\\)(?:\\\\)*\\[nrt]")


def rendered_docstrings():
    """(where, docstring node's source text, docstring) for every docstring the API reference shows:
    those of the public modules and of their public classes, functions, methods and attributes
    (mkdocs.yml's mkdocstrings filters leave out names that start with an underscore)."""
    def walk(node, path, public):
        body = getattr(node, "body", None)
        if public and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            yield f"{path.name}:{body[0].lineno} ({getattr(node, 'name', 'module')})", body[0].value
        if isinstance(node, (ast.Module, ast.ClassDef)):  # (a function's nested definitions are not shown)
            for child, after in zip(body, body[1:] + [None]):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    # (__init__'s docstring is shown in its class's: mkdocs.yml's merge_init_into_class)
                    shown = not child.name.startswith("_") or child.name == "__init__"
                    yield from walk(child, path, public and shown)
                # an attribute's docstring: a string right after its assignment (`name = ...`)
                target = child.target if isinstance(child, ast.AnnAssign) else \
                    child.targets[0] if isinstance(child, ast.Assign) and len(child.targets) == 1 else None
                if public and isinstance(target, ast.Name) and not target.id.startswith("_") \
                        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                        and isinstance(after.value.value, str):
                    yield f"{path.name}:{after.lineno} ({target.id})", after.value

    for path in sorted(PACKAGE_DIR.glob("*.py")):
        if path.stem.startswith("_") and path.stem != "__init__":
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines(keepends=True)
        for where, constant in walk(ast.parse(source), path, True):
            # (the literal as written; ast.get_source_segment splits the whole file again at every call)
            first, last = constant.lineno - 1, constant.end_lineno - 1
            written = "".join(lines[first:last + 1]) if first < last else lines[first]
            yield where, written[constant.col_offset:len(written) - len(lines[last]) + constant.end_col_offset], \
                constant.value


def paragraphs(text: str) -> list[str]:
    """``text`` split at blank lines, and where an unindented line follows an indented one: the next
    entry of a numpy section, which the API page renders on its own."""
    found, current, indented = [], [], False
    for line in text.splitlines():
        if not line.strip() or (indented and not line[0].isspace()):
            found.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line)
            indented = line[0].isspace()
    return found + ["\n".join(current)]


def markup_problems(source_text: str, docstring: str) -> list[str]:
    """What the API page would show garbled, in one docstring."""
    problems = []
    text = inspect.cleandoc(docstring)
    if SPHINX_ROLE.search(text):
        problems.append(f"a Sphinx role, shown literally: {SPHINX_ROLE.search(text).group(0)}")
    prose = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith((">>>", "...")))
    for paragraph in paragraphs(CODE_SPAN.sub("code", prose)):
        for eaten, closing in ((EATEN_BOLD, "**"), (EATEN_ITALIC, "*")):
            match = eaten.search(paragraph)
            if match and closing in paragraph[match.end():]:
                problems.append(f"stars that Markdown pairs up as emphasis (put the expression in backticks): "
                                f"{paragraph[max(match.start() - 12, 0):match.end() + 12]!r}")
    if source_text.lstrip()[:1] not in "rR" and ESCAPED_CONTROL.search(source_text):
        problems.append(f"a one-backslash escape in a non-raw docstring (a real line break or tab in the text; "
                        f"write it with two backslashes): {ESCAPED_CONTROL.search(source_text).group(0)}")
    examples = re.search(r"^Examples\n-+$", text, re.M)
    if re.search(r"^\s*>>>", text[:examples.start() if examples else len(text)], re.M):
        problems.append("a '>>>' example outside an 'Examples' section (Markdown shows it as nested quotes)")
    if re.search(r"^Example\n-+$", text, re.M):
        problems.append("an 'Example' section: numpy style (and mkdocstrings) reads 'Examples'")
    return problems


def test_docstrings_render_as_written():
    problems = [f"{where}: {problem}" for where, source_text, docstring in rendered_docstrings()
                for problem in markup_problems(source_text, docstring)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source_text, caught", [
    ('"""See :func:`encode`."""', "Sphinx role"),
    ('"""Values 2**-9 to 2**8."""', "stars"),
    ('"""From 2**-9, **not** rounded."""', "stars"),
    ('"""Inputs (float8_*, float6_*) taken as float32."""', "stars"),
    ('"""Lines end with ``\\n``."""', "one-backslash"),
    ('"""Summary.\n\nExample\n-------\n>>> 1\n1\n"""', "'Example'"),
    ('"""Summary.\n\n>>> 1\n1\n"""', "outside an 'Examples' section"),
])
def test_markup_check_catches_a_planted_problem(source_text, caught):
    docstring = ast.literal_eval(source_text)
    assert any(caught in problem for problem in markup_problems(source_text, docstring))


@pytest.mark.parametrize("source_text", [
    '"""Values ``2**-9`` to ``2**8``; **not** saturating; *exact*."""',
    'r"""Lines end with ``\\n``."""',
    '"""Lines end with ``\\\\n``."""',
    '"""x ** 2, and f(**kwargs)."""',
    '"""Summary.\n\nExamples\n--------\n>>> 1\n1\n"""',
    '"""Summary.\n\nParameters\n----------\na : float\n    At most 2**8.\nb : float\n    At least 2**-9.\n"""',
    '"""Below 2**53.\n\nA **bold** word."""',
])
def test_markup_check_passes_what_renders(source_text):
    assert markup_problems(source_text, ast.literal_eval(source_text)) == []
