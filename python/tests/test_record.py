"""``vramlab.record()`` in this process against the stand-in torch: it starts
``_record_memory_history``, dumps at the end and at each OOM (which still
raises), stops recording, and replays every snapshot into the report
``vramlab record`` writes."""

import os

import pytest

import vramlab


def test_a_block_is_recorded_dumped_and_replayed(fake_torch, tmp_path):
    torch, log = fake_torch
    with vramlab.record(tmp_path / "out", max_entries=1000) as rec:
        assert log() == ["record enabled=all stacks=python max_entries=1000", "observer"]
    assert len(rec.snapshots) == 1
    final = os.path.basename(rec.snapshots[0])
    assert final.endswith("-rec%s.pickle" % final.rsplit("-rec", 1)[1].split(".")[0])
    assert "-pid%d-" % os.getpid() in final
    assert log()[2:] == ["dump %s.part" % final, "record enabled=None stacks=all max_entries=None"]
    assert rec.report == str(tmp_path / "out" / "report" / "index.html")
    index = open(rec.report).read()
    assert final in index and "with vramlab.record()" in index
    assert "peak reserved 328.00 MiB" in rec.summary
    assert [r.peak_reserved_bytes for r in rec.replays] == [343932928]
    # memory_stats() written beside the snapshot at the same moment, and every key checked.
    assert os.path.exists(rec.snapshots[0][: -len(".pickle")] + ".stats.json")
    checked = rec.replays[0].to_dict()["fidelity"]["memory_stats"]
    assert checked["keys"] == checked["equal"] == 121 and checked["differing"] == []


def test_an_oom_is_dumped_and_still_raises(fake_torch, tmp_path):
    torch, log = fake_torch
    with pytest.raises(torch.cuda.OutOfMemoryError):
        with vramlab.record(tmp_path) as rec:
            torch.cuda.oom()
    names = [os.path.basename(p) for p in rec.snapshots]
    assert len(names) == 2 and names[0].endswith("-oom1.pickle") and not names[1].endswith("-oom1.pickle")
    index = open(rec.report).read()
    assert "raised OutOfMemoryError" in index and "exit status 1" in index
    for name in names:
        assert name in index
    assert os.path.exists(tmp_path / "report" / names[0].replace(".pickle", "") / "index.html")
    # After the block the observer PyTorch keeps does nothing.
    dumps = [line for line in log() if line.startswith("dump")]
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.cuda.oom()
    assert [line for line in log() if line.startswith("dump")] == dumps


def test_without_torch_it_says_so(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError):
        with vramlab.record(tmp_path):
            pass
