"""The fenced code blocks of the README and of the documentation site (docs/), found by page
and heading, so that tests run them as written and fail when a page changes in a way that
breaks them.

A page is named by its path from the repository root (`README.md`, `docs/security.md`); a
section by the text its heading starts with, at any level, and it runs to the next heading of
the same or a higher level (its subsections included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
DOCS = REPOSITORY / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)


@dataclass(frozen=True)
class Block:
    section: str
    lang: str
    text: str
    page: str = "README.md"


def pages() -> list[str]:
    """Every page: the README, then the site's Markdown files, in path order."""
    return ["README.md"] + sorted(str(p.relative_to(REPOSITORY)) for p in DOCS.rglob("*.md"))


def _without_fences(text: str) -> str:
    """The text with each fenced block blanked (same length), so that a `#` comment line in a
    block is not taken for a heading."""
    return FENCE.sub(lambda m: " " * len(m[0]), text)


def section_text(title: str, page: str = "README.md") -> str:
    """The text of the section of `page` whose heading starts with `title`."""
    text = (REPOSITORY / page).read_text()
    plain = _without_fences(text)
    heading = next(
        (m for m in HEADING.finditer(plain) if m[2].startswith(title)),
        None,
    )
    assert heading is not None, f"{page} has no heading '{title}'"
    level = len(heading[1])
    end = next(
        (m.start() for m in HEADING.finditer(plain, heading.end()) if len(m[1]) <= level),
        len(text),
    )
    return text[heading.end() : end]


def blocks(title: str, page: str = "README.md") -> list[Block]:
    return [
        Block(title, lang, body, page) for lang, body in FENCE.findall(section_text(title, page))
    ]


def page_blocks(page: str) -> list[Block]:
    """Every fenced block of `page`, each with the heading it sits under (the nearest one
    before it, "" before the first)."""
    text = (REPOSITORY / page).read_text()
    headings = list(HEADING.finditer(_without_fences(text)))
    found = []
    for fence in FENCE.finditer(text):
        above = [h[2] for h in headings if h.start() < fence.start()]
        found.append(Block(above[-1] if above else "", fence[1], fence[2], page))
    return found


def shell_commands(block: Block) -> list[str]:
    """The block's commands: backslash-continued lines joined, comments dropped, and each
    `a && b` chain split into its parts, in order."""
    logical, pending = [], ""
    for line in block.text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        logical.append((pending + line.strip()) if pending else line)
        pending = ""
    commands = []
    for line in logical:
        line = re.sub(r"(^|\s+)#.*$", "", line).strip()
        commands += [part.strip() for part in line.split(" && ") if part.strip()]
    return [re.sub(r"\s+", " ", command) for command in commands]
