"""The documentation site builds strictly: every page in the navigation, every link and anchor
found, and the reference tables generated from the code (docs/hooks.py). Needs the `docs`
extra (`pip install -e '.[docs]'`), which .ci/run installs; skipped without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    apis = (site / "reference" / "apis" / "index.html").read_text()
    assert "ConsumerGroupHeartbeat (68)" in apis
    assert "generated: " not in apis  # every marker was replaced by its table
    metrics = (site / "reference" / "metrics" / "index.html").read_text()
    assert "minibroker_connections_closed_total" in metrics
    # The README's two sections are included in Getting started from the README itself.
    started = (site / "getting-started" / "index.html").read_text()
    assert "stop that one with Ctrl-C first" in started
    assert 'href="../testing/#test-tiers"' in started  # the README's docs/ link, rewritten


def test_a_readme_section_is_included_with_its_links_made_relative_to_the_site():
    sys.path.insert(0, str(REPOSITORY / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(REPOSITORY / "docs"))
    readme = (
        "# minibroker\n<!-- --8<-- [start:part] -->\n"
        "See [Testing](docs/testing.md#tiers) and [the code](broker/server.py).\n"
        "<!-- --8<-- [end:part] -->\nafter\n"
    )
    assert hooks.readme_section("part", readme) == (
        "See [Testing](testing.md#tiers) and [the code](broker/server.py).\n"
    )
    with pytest.raises(ValueError, match="no section 'other'"):
        hooks.readme_section("other", readme)
