"""The docs' page "Testing your application with minibroker" (docs/pytest-plugin.md), run as
written.

The fixture block and examples/test_minibroker_fixtures.py (which the section's command runs)
run together in one pytest subprocess in a temporary project, with the plugin loaded by its
entry point; the Cluster block runs as a script beside it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.readme import blocks, shell_commands

pytest_plugins = ["pytester"]

SECTION = "Testing your application with minibroker"
PAGE = "docs/pytest-plugin.md"
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/test_minibroker_fixtures.py"


def test_the_section_runs_as_written(pytester):
    found = blocks(SECTION, PAGE)
    fixture_block, script_block = [block for block in found if block.lang == "python"]
    # The install of the test extra is skipped by the docs test: this test's environment has it.
    commands = [c for block in found if block.lang == "sh" for c in shell_commands(block)]
    assert commands == [".venv/bin/pip install -q -e '.[test]'", f".venv/bin/pytest {EXAMPLE}"]
    assert {block.lang for block in found} == {"python", "sh"}
    script = subprocess.Popen(
        [sys.executable, "-c", script_block.text],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        pytester.makepyfile(
            test_readme_block=fixture_block.text,
            test_minibroker_fixtures=(REPO / EXAMPLE).read_text(),
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
        result.assert_outcomes(passed=1 + 5)
        output, _ = script.communicate(timeout=120)
    finally:
        script.kill()
        script.wait()
    assert script.returncode == 0, output
