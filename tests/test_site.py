"""The tutorials site as a reader gets it, checked without a browser or a full ``mkdocs build``.

Each page is rendered with the Markdown extensions of ``mkdocs.yml`` (about a second for all of
them), and the rendered HTML is checked for what a browser review of the site found:

- a list written straight after a paragraph line, with no blank line between, is not a list in
  Python-Markdown: its ``- item`` lines run on inside the paragraph;
- a ``\\|`` inside a code span of a table is shown with its backslash (Python-Markdown does not
  split cells at a pipe inside backticks, so the escape is not needed);
- every image has alt text, and nothing on a page or in the theme settings loads from the network
  (mkdocs.yml promises that the site serves everything itself).

Skips without the ``docs`` extra (mkdocs, pymdown-extensions).
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
PAGES = sorted(path for path in TUTORIALS.rglob("*.md") if "_hooks" not in path.parts)


def page_id(path: Path) -> str:
    return path.relative_to(TUTORIALS).as_posix()


def docs_module(name: str):
    """The module, or a skip that names the extra that installs it (the README's test path has no docs)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"needs the docs extra (pip install -e \".[docs]\"): could not import {name!r}")


def site_config() -> dict:
    docs_module("mkdocs")
    yaml = docs_module("yaml")
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def render(markdown_text: str) -> str:
    """``markdown_text`` as HTML, with the Markdown extensions (and their settings) of mkdocs.yml."""
    markdown = docs_module("markdown")
    docs_module("pymdownx")
    names, settings = [], {}
    for entry in site_config()["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        names.append(name)
        if options:
            settings[name] = options
    return markdown.Markdown(extensions=names, extension_configs=settings).convert(markdown_text)


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return {page_id(page): render(page.read_text(encoding="utf-8")) for page in PAGES}


# A line of a paragraph that starts like a list item: "- x", "* x", "+ x" or "1. x".
LIST_ITEM_IN_PARAGRAPH = re.compile(r"<p>(?:(?!</p>).)*?\n\s*(?:[-*+]|\d+\.) \S", re.S)


def test_lists_render_as_lists(rendered):
    problems = [f"{page}: {match.group(0)[-120:]!r}" for page, html in rendered.items()
                for match in LIST_ITEM_IN_PARAGRAPH.finditer(html)]
    assert not problems, ("a list must follow a blank line, or its items run on inside the paragraph "
                          "before it:\n" + "\n".join(problems))


def test_the_list_check_sees_a_list_glued_to_a_paragraph():
    assert LIST_ITEM_IN_PARAGRAPH.search(render("Read it:\n- one\n- two\n"))
    assert not LIST_ITEM_IN_PARAGRAPH.search(render("Read it:\n\n- one\n- two\n"))


def test_no_escaped_pipe_shows_in_code(rendered):
    problems = [f"{page}: {match.group(0)}" for page, html in rendered.items()
                for match in re.finditer(r"<code>[^<]*\\\|[^<]*</code>", html)]
    assert not problems, "a \\| in a code span is shown with its backslash:\n" + "\n".join(problems)


def test_every_image_has_alt_text(rendered):
    problems = [f"{page}: {tag}" for page, html in rendered.items()
                for tag in re.findall(r"<img\b[^>]*>", html) if not re.search(r'\balt="[^"]+"', tag)]
    assert not problems, "\n".join(problems)


def test_nothing_loads_from_the_network(rendered):
    remote = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
    problems = [f"{page}: {source}" for page, html in rendered.items()
                for source in re.findall(r'<(?:img|script|iframe|source|video|audio)\b[^>]*\bsrc="([^"]+)"', html)
                + re.findall(r'<link\b[^>]*\bhref="([^"]+)"', html) if remote.match(source)]
    config = site_config()
    assert config["theme"].get("font") is False, "theme.font must be false: Material loads Google Fonts otherwise"
    for key in ("extra_javascript", "extra_css"):
        for entry in config.get(key, []):
            path = entry if isinstance(entry, str) else entry["path"]
            if remote.match(path):
                problems.append(f"mkdocs.yml {key}: {path}")
    assert not problems, "\n".join(problems)
