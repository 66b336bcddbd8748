"""The package as pip installs it: its version, the wheel's contents, the
``vramlab`` command's output and exit statuses."""

import os
import re
import sys
import zipfile

import pytest

import vramlab
from conftest import REPO, run_cli


def cargo_version():
    text = (REPO / "Cargo.toml").read_text()
    return re.search(r'\[workspace\.package\][^\[]*?version = "([^"]+)"', text).group(1)


def test_the_version_is_the_workspaces():
    assert vramlab.__version__ == cargo_version()
    cli = run_cli("--version")
    assert cli.returncode == 0 and cli.stdout.strip() == "vramlab " + cargo_version()


def test_the_wheel_holds_the_package_the_command_and_nothing_else():
    wheel = os.environ.get("VRAMLAB_WHEEL")
    if not wheel:
        pytest.skip("VRAMLAB_WHEEL not set: run through cargo test (tests/tests/python.rs)")
    name = os.path.basename(wheel)
    assert name.startswith("vramlab-%s-cp39-abi3-" % cargo_version()), name
    with zipfile.ZipFile(wheel) as z:
        names = sorted(z.namelist())
        dist = "vramlab-%s.dist-info/" % cargo_version()
        entry_points = z.read(dist + "entry_points.txt").decode()
        metadata = z.read(dist + "METADATA").decode()
    package = [n for n in names if n.startswith("vramlab/")]
    module = [n for n in package if re.fullmatch(r"vramlab/_native\.abi3\.so", n)]
    assert module, names
    expected = {
        "vramlab/__init__.py",
        "vramlab/__init__.pyi",
        "vramlab/py.typed",
        "vramlab/_api.py",
        "vramlab/_cli.py",
        "vramlab/_errors.py",
        "vramlab/_record.py",
        module[0],
    }
    assert set(package) == expected, names
    assert all(n.startswith(("vramlab/", dist)) for n in names), names
    assert re.search(r"^vramlab ?= ?vramlab\._cli:main$", entry_points, re.M), entry_points
    assert "Version: %s" % cargo_version() in metadata and "Requires-Python: >=3.9" in metadata


def test_the_command_is_the_cli_with_its_exit_statuses(mlp, tmp_path):
    ok = run_cli("replay", mlp)
    assert ok.returncode == 0 and ok.stdout.startswith("vramlab replay of "), ok.stderr
    assert run_cli("replay", "no/such.pickle").returncode == 1
    usage = run_cli("replay", mlp, "--no-such-flag")
    assert usage.returncode == 2 and "unexpected argument '--no-such-flag'" in usage.stderr
    assert run_cli("nonsense").returncode == 2
    help = run_cli("--help")
    assert help.returncode == 0 and "Usage: vramlab" in help.stdout
    # `record` runs a program and returns its status as its own.
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    rec = run_cli("record", "--out", tmp_path / "out", "--", sys.executable, script)
    assert rec.returncode == 3, rec.stderr
    assert "exited with status 3" in rec.stderr
