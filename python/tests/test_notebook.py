"""A notebook executed (nbclient, a Python kernel of this environment) whose
cell shows ``vramlab.replay(...)``: its HTML output is the replay page in an
iframe, offline. With ``VRAMLAB_NOTEBOOK_OUT`` set, the output is written
there for tests/tests/python.rs to check in Chromium."""

import os

import nbformat
from nbclient import NotebookClient

from conftest import SNAPSHOTS


def test_a_notebook_shows_the_replay_page_inline(tmp_path):
    snap = SNAPSHOTS / "transformer-default.pickle"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import vramlab"),
        nbformat.v4.new_code_cell("r = vramlab.replay(%r)\nr" % str(snap)),
        nbformat.v4.new_code_cell("r.peak_reserved_bytes"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = nb.cells[1].outputs[0]
    assert shown["output_type"] == "execute_result"
    html = shown["data"]["text/html"]
    assert html.startswith('<iframe class="vramlab-report" srcdoc="')
    assert "vramlab replay of" in html and "transformer-default.pickle" in html
    assert shown["data"]["text/plain"].startswith("<vramlab.Replay of ")
    peak = int(nb.cells[2].outputs[0]["data"]["text/plain"])
    assert peak > 0
    out = os.environ.get("VRAMLAB_NOTEBOOK_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "replay-output.html"), "w", encoding="utf-8") as f:
            f.write(html)
        with open(os.path.join(out, "peak.txt"), "w") as f:
            f.write(str(peak))
