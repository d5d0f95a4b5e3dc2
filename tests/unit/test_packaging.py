"""What the `minibroker` distribution installs: one import name, `minibroker`, and Spark's
discovery module `pyspark_minibroker` beside it; nothing of the source tree's tools.

A wheel is built from a copy of the working tree (as `pip install .` would build it, without
build isolation, with the setuptools of this environment) and its file list is checked. The
copy keeps the build's leftovers (build/, *.egg-info) out of the repository, and a stale
build/ directory out of the wheel.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
# Not part of the distribution, and large or generated: left out of the copy.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def _package_dirs() -> dict[str, Path]:
    """Every directory with an __init__.py under each folder package-dir maps, by the
    package name it is installed as (broker/apis -> minibroker.apis)."""
    found = {}
    for name, folder in SETUPTOOLS["package-dir"].items():
        if not name:
            continue  # the top level: one module (Spark's discovery module), no package
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            if "__pycache__" in relative.parts:
                continue
            found[".".join((name, *relative.parts))] = init.parent
    return found


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory) -> Path:
    """A wheel built from the working tree."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(work / "out"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = (work / "out").glob("minibroker-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(wheel_file) -> list[str]:
    """The names of the files in the wheel."""
    with zipfile.ZipFile(wheel_file) as archive:
        return archive.namelist()


def test_the_wheel_registers_the_pytest_plugin(wheel_file):
    """pytest loads the fixtures wherever the wheel is installed: its pytest11 entry point."""
    with zipfile.ZipFile(wheel_file) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(name).decode()
    section = text.split("[pytest11]", 1)[1].split("\n[", 1)[0]
    assert section.split() == ["minibroker", "=", "minibroker.testing.plugin"]


def test_the_wheel_installs_one_import_name_and_spark_s_discovery_module(wheel):
    top_level = {name.split("/")[0] for name in wheel}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}
    assert len(dist_info) == 1
    assert top_level - dist_info == {"minibroker", "pyspark_minibroker.py"}


def test_the_wheel_holds_every_package_and_none_of_the_tree_s_tools(wheel):
    folders = {name.rsplit("/", 1)[0] for name in wheel if "/" in name}
    for package in ("protocol", "storage", "spark", "tools", "security/authorizer"):
        assert f"minibroker/{package}" in folders, package
    for tool in ("bench", "faults", "tests"):
        assert not any(tool in name.split("/")[:-1] for name in wheel), tool
    assert "minibroker/tools/wire.py" in wheel
    assert "minibroker/py.typed" in wheel  # PEP 561: applications' type checkers read ours


def test_every_module_of_the_mapped_folders_is_in_the_wheel(wheel):
    """A package missing from [tool.setuptools] packages installs without its modules: the
    editable install hides that, the wheel does not."""
    expected = set()
    for package, folder in _package_dirs().items():
        prefix = package.replace(".", "/")
        expected |= {f"{prefix}/{module.name}" for module in folder.glob("*.py")}
    assert expected - set(wheel) == set()


def test_every_package_folder_is_listed_in_pyproject():
    """Every directory with an __init__.py under broker/ (and the other mapped folders) is
    named in [tool.setuptools] packages, and nothing listed is missing on disk."""
    found = _package_dirs()
    assert any(name.startswith("minibroker.") for name in found)
    assert set(found) == set(SETUPTOOLS["packages"])
