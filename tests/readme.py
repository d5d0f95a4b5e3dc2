"""The README's fenced code blocks, found by section heading, so that tests run them as
written and fail when the README changes in a way that breaks them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    section: str
    lang: str
    text: str


def section_text(title: str) -> str:
    """The text of the `## ` section whose heading starts with `title` (subsections included)."""
    text = README.read_text()
    heading = re.search(rf"^## {re.escape(title)}.*$", text, re.M)
    assert heading is not None, f"README.md has no section '## {title}'"
    following = re.search(r"^## ", text[heading.end() :], re.M)
    return text[heading.end() : heading.end() + following.start() if following else len(text)]


def blocks(title: str) -> list[Block]:
    return [Block(title, lang, body) for lang, body in FENCE.findall(section_text(title))]


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
