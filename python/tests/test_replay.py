"""vramlab.replay, whatif and diff in-process: the known answers of PyTorch's
own recordings, a dict replayed as its file, the documents equal to the
command's ``--json``, the errors with the command's messages and statuses."""

import json
import os
import pickle

import pytest

import vramlab
from conftest import SNAPSHOTS, run_cli


def test_the_peak_of_a_real_recording_is_pytorchs(mlp, stats):
    r = vramlab.replay(str(mlp))
    pytorch = stats("mlp-default")
    assert r.peak_reserved_bytes == pytorch["reserved_bytes.all.peak"] == 343932928
    assert r.peak_allocated_bytes == pytorch["allocated_bytes.all.peak"]
    # Every memory_stats() key equal to PyTorch's, but those the trace cannot determine.
    assert r.underivable, "the replay names the keys it cannot determine"
    for key, value in pytorch.items():
        if key not in r.underivable:
            assert r.memory_stats[key] == value, key
    assert r.fidelity is not None and r.ooms == []
    frames = [f for g in r.holders[0]["groups"] for f in g["user_frames"]]
    assert any("record_snapshots.py" in f for f in frames), "who holds the peak, by the script's frames"
    assert "peak reserved 343932928 bytes" in repr(r)


def test_a_snapshot_dict_and_its_bytes_replay_as_its_file(mlp):
    from_file = vramlab.replay(mlp).to_dict()
    with open(mlp, "rb") as f:
        data = f.read()
    snapshot = pickle.loads(data)
    assert isinstance(snapshot, dict) and "segments" in snapshot
    from_dict = vramlab.replay(snapshot).to_dict()
    from_bytes = vramlab.replay(data).to_dict()
    assert from_dict.pop("input") == "<snapshot dict>"
    assert from_bytes.pop("input") == "<snapshot bytes>"
    assert from_file.pop("input") == str(mlp)
    # A file is also checked against the memory_stats() recorded beside it
    # (NAME.stats.json); a dict or bytes has no such neighbour.
    beside = from_file["fidelity"].pop("memory_stats")
    assert beside["keys"] == beside["equal"] and beside["differing"] == []
    assert from_dict["fidelity"].pop("memory_stats") is None
    assert from_bytes["fidelity"].pop("memory_stats") is None
    assert from_dict == from_file == from_bytes


def test_the_document_is_the_commands_json(mlp):
    args = dict(capacity="200MiB", alloc_conf="expandable_segments:True")
    doc = vramlab.replay(mlp, **args).to_dict()
    cli = run_cli("replay", mlp, "--capacity", "200MiB", "--alloc-conf", "expandable_segments:True", "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == doc
    assert doc["capacity_bytes"] == 200 << 20 and doc["alloc_conf"] == "expandable_segments:True"
    # A fraction of the simulated device, as torch.cuda.set_per_process_memory_fraction sets it.
    limited = vramlab.replay(mlp, capacity=1 << 30, fraction=0.5)
    assert limited.to_dict()["memory_limit_bytes"] == 1 << 29


def test_whatif_and_diff_are_the_commands(mlp):
    w = vramlab.whatif(mlp, capacity="24GiB")
    cli = run_cli("whatif", mlp, "--capacity", "24GiB", "--sweep", "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == w.to_dict()
    assert len(w.results) > 5 and w.results[0]["recorded"]
    assert w.recommended is not None and w.exit_status == 0
    other = SNAPSHOTS / "transformer-default.pickle"
    d = vramlab.diff(mlp, other)
    cli = run_cli("diff", mlp, other, "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == d.to_dict()
    assert d.peak_reserved_change_bytes == d.after["peak_reserved_bytes"] - d.before["peak_reserved_bytes"]
    assert d.paths
    # Dicts compared as their files are.
    with open(mlp, "rb") as f:
        a = pickle.load(f)
    with open(other, "rb") as f:
        b = pickle.load(f)
    from_dicts = vramlab.diff(a, b).to_dict()
    assert from_dicts["peak_reserved_change_bytes"] == d.peak_reserved_change_bytes
    assert from_dicts["paths"] == d.to_dict()["paths"]


@pytest.mark.parametrize(
    "src, kwargs, error, status, cli_args",
    [
        ("no/such.pickle", {}, vramlab.SnapshotError, 1, ["replay", "no/such.pickle"]),
        ("README.md", {}, vramlab.SnapshotError, 1, None),
        (None, {"capacity": "12 parsecs"}, vramlab.UsageError, 2, ["replay", None, "--capacity", "12 parsecs"]),
        (None, {"alloc_conf": "expandable:maybe"}, vramlab.UsageError, 2, ["replay", None, "--alloc-conf", "expandable:maybe"]),
        (None, {"device": 7}, vramlab.ReplayError, 1, ["replay", None, "--device", "7"]),
        (None, {"fraction": 1.5}, vramlab.ReplayError, 1, ["replay", None, "--fraction", "1.5"]),
        (b"\x80\x04junk", {}, vramlab.SnapshotError, 1, None),
    ],
)
def test_errors_carry_the_commands_message_and_status(mlp, src, kwargs, error, status, cli_args):
    src = str(mlp) if src is None else src
    with pytest.raises(error) as caught:
        vramlab.replay(src, **kwargs)
    e = caught.value
    assert isinstance(e, vramlab.Error) and e.exit_status == status
    assert str(e) == e.message
    if error is vramlab.UsageError:
        assert isinstance(e, ValueError)
    if cli_args is not None:
        cli = run_cli(*[str(mlp) if a is None else a for a in cli_args])
        assert cli.returncode == status, cli.stderr
        # The command fits its lines to 100 columns (and clap adds where help is): the same words.
        stderr = cli.stderr.replace("For more information, try '--help'.", "")
        assert stderr.split() == ("error: " + e.message).split(), (cli.stderr, e.message)


def test_a_source_of_another_type_and_an_unwritable_report(mlp, tmp_path):
    with pytest.raises(vramlab.UsageError, match="must be a snapshot file's path, its bytes, or the dict"):
        vramlab.replay(42)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(vramlab.ReportError) as caught:
        vramlab.replay(mlp).save_report(blocker / "report")
    assert isinstance(caught.value, OSError) and caught.value.exit_status == 2
    assert "cannot write the report into" in caught.value.message


def test_save_report_and_the_notebook_view_are_the_commands_page(mlp, tmp_path):
    r = vramlab.replay(mlp)
    index = r.save_report(tmp_path / "page")
    assert index == tmp_path / "page" / "index.html"
    page = index.read_text()
    assert "<title>vramlab replay of" in page and "mlp-default.pickle" in page and "data-stacked" in page
    assert (tmp_path / "page" / "charts" / "timeline.png").exists()
    view = r._repr_html_()
    assert view.startswith('<iframe class="vramlab-report" srcdoc="')
    assert "data-stacked" in view and "http://" not in view.split("srcdoc=")[0]
    w = vramlab.whatif(mlp)
    assert "what-if" in w._repr_html_().lower()
    d = vramlab.diff(mlp, mlp)
    assert "<iframe" in d._repr_html_()


def test_help_says_what_the_readme_says():
    doc = vramlab.replay.__doc__
    for words in ["torch.cuda.memory._snapshot()", "capacity", "alloc_conf", "memory_stats", "fidelity", "holders"]:
        assert words in doc, words
    for f in [vramlab.whatif, vramlab.diff, vramlab.record, vramlab.Error, vramlab.Replay]:
        assert f.__doc__ and len(f.__doc__) > 80, f
    stubs = os.path.join(os.path.dirname(vramlab.__file__), "__init__.pyi")
    with open(stubs) as f:
        text = f.read()
    for name in vramlab.__all__:
        if name != "__version__":
            assert ("def %s(" % name in text) or ("class %s" % name in text), name
