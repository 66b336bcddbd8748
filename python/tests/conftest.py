"""What the tests share: the repository's fixtures, the installed ``vramlab``
command, and a stand-in ``torch`` for ``vramlab.record`` (as
xtask/tests/record_cli.rs writes one: no GPU, no real torch)."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "torch-snapshots"


@pytest.fixture
def mlp():
    return SNAPSHOTS / "mlp-default.pickle"


@pytest.fixture
def stats():
    import json

    def load(name):
        with open(SNAPSHOTS / (name + ".stats.json")) as f:
            return json.load(f)["memory_stats"]

    return load


def vramlab_command():
    """The ``vramlab`` console command pip installed beside this Python."""
    path = pathlib.Path(sys.executable).parent / "vramlab"
    assert path.exists(), "no vramlab command beside %s: install the package (pip install .)" % sys.executable
    return str(path)


def run_cli(*args):
    return subprocess.run([vramlab_command(), *map(str, args)], capture_output=True, text=True, cwd=REPO)


# The stand-in torch: `_record_memory_history` and `_dump_snapshot` log their
# calls to FAKE_TORCH_LOG; a dump copies FAKE_TORCH_SNAPSHOT (a real
# recording) and `torch.cuda.memory_stats()` gives the statistics recorded with
# it; `torch.cuda.oom()` calls the OOM observers, then raises.
_FAKE_TORCH = {
    "torch/__init__.py": "from . import _C, cuda\n",
    "torch/_C.py": """
        _observers = []
        def _cuda_attach_out_of_memory_observer(fn):
            _observers.append(fn)
            from .cuda.memory import _log
            _log('observer')
    """,
    "torch/cuda/__init__.py": """
        from . import memory
        class OutOfMemoryError(RuntimeError):
            pass
        def oom():
            import torch._C
            for fn in torch._C._observers:
                fn(0, 1 << 30, 0, 0)
            raise OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB')
        def current_device():
            return 0
        def get_device_name(device=None):
            return 'stand-in'
        def memory_stats(device=None):
            # The statistics PyTorch recorded with FAKE_TORCH_SNAPSHOT.
            import json, os
            with open(os.environ['FAKE_TORCH_SNAPSHOT'][: -len('.pickle')] + '.stats.json') as f:
                return json.load(f)['memory_stats']
    """,
    "torch/cuda/memory.py": """
        import os, shutil
        def _log(line):
            with open(os.environ['FAKE_TORCH_LOG'], 'a') as f:
                f.write(line + '\\n')
        def _record_memory_history(enabled='all', context='all', stacks='all', max_entries=None, device=None):
            _log('record enabled=%s stacks=%s max_entries=%s' % (enabled, stacks, max_entries))
        def _dump_snapshot(filename='dump_snapshot.pickle'):
            shutil.copyfile(os.environ['FAKE_TORCH_SNAPSHOT'], filename)
            _log('dump ' + os.path.basename(filename))
    """,
}


@pytest.fixture
def fake_torch(tmp_path, monkeypatch, mlp):
    """Imports the stand-in torch in this process; its log's lines, read on call."""
    root = tmp_path / "fake-torch"
    for name, text in _FAKE_TORCH.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    log = tmp_path / "torch.log"
    monkeypatch.setenv("FAKE_TORCH_LOG", str(log))
    monkeypatch.setenv("FAKE_TORCH_SNAPSHOT", str(mlp))
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    import torch

    yield torch, lambda: log.read_text().splitlines() if log.exists() else []
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        del sys.modules[name]
    shutil.rmtree(root, ignore_errors=True)
