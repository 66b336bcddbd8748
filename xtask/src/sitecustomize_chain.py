# Shared by vramlab's two `sitecustomize.py` hooks, `record_hook.py` (vramlab record) and
# `capture/hook.py` (vramlab estimate): the binary writes this text before each hook's own
# (`concat!` in `record_cmd::HOOK` and `capture::HOOK`), so both run the sitecustomize they
# hide the same way.


def _chain_sitecustomize(here, report):
    """Runs the sitecustomize that the hook in folder `here` hides (one importable further
    along the path), as Python would have; `report(e)` says so when it raises."""
    import os
    import sys

    try:
        import importlib.machinery
        import importlib.util

        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as e:
        report(e)


