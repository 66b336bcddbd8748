# vramlab estimate's capture hook, written as `sitecustomize.py` on the child's
# PYTHONPATH by `xtask/src/capture/mod.rs`. It cannot import vramlab.
#
# With VRAMLAB_CAPTURE_OUT set, it imports torch, enters a FakeTensorMode for the
# whole program (CUDA tensors hold no data; the fake CUDA runtime preloaded by the
# capture answers torch's device queries) and writes, at exit, every request the
# CUDA caching allocator would have received: one per new CUDA storage, of its
# nbytes, freed when the storage dies, plus the requests a GPU makes that no
# tensor shows (cuBLAS workspaces, reduction staging, cuDNN workspaces), each
# marked with a `<vramlab model>` frame naming its rule. Ops that cannot run
# without data are refused: refused.json in the out folder, no capture, exit 2.
import os
import sys


def _install():
    import atexit
    import json
    import pickle
    import threading
    import time
    import weakref

    t0 = float(os.environ.get("VRAMLAB_CAPTURE_T0") or time.time())
    out_dir = os.environ["VRAMLAB_CAPTURE_OUT"]
    stacks = os.environ.get("VRAMLAB_CAPTURE_STACKS") == "1"
    gpu_spec = os.environ.get("VRAMLAB_FAKECUDA_GPU", "")
    gpu_extra = json.loads(os.environ.get("VRAMLAB_CAPTURE_GPU_JSON") or "{}")

    try:
        import torch
    except ImportError:
        # A note for vramlab: this Python cannot import torch.
        try:
            with open(os.path.join(out_dir, ".vramlab-no-torch-%d" % os.getpid()), "w") as f:
                f.write(sys.executable or "python")
        except OSError:
            pass
        return
    from torch._subclasses import fake_tensor as ft
    from torch.utils import _pytree as pytree

    aten = torch.ops.aten
    hook_file = os.path.abspath(__file__)
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))

    parts = gpu_spec.split(";")
    gpu = {
        "name": parts[0] if parts and parts[0] else "NVIDIA H100 80GB HBM3",
        "total_memory": int(parts[1]) if len(parts) > 1 else 85017755648,
        "sm_count": int(parts[2]) if len(parts) > 2 else 132,
        "major": int(parts[3]) if len(parts) > 3 else 9,
        "minor": int(parts[4]) if len(parts) > 4 else 0,
    }
    gpu.update(gpu_extra)
    sm_count = gpu["sm_count"]

    state = {
        "trace": [],
        "next_addr": 0,
        "live": {},  # storage key -> (addr, size, stream)
        "first_request": None,
        "crashed": False,
        "rules": {},
        "blas_threads": set(),
        "lt_threads": set(),
        "cudnn_shapes": set(),
    }
    lock = threading.RLock()

    # -- frames ---------------------------------------------------------------
    def frames():
        if not stacks:
            return []
        out = []
        f = sys._getframe(2)
        while f is not None:
            co = f.f_code
            if co.co_filename != hook_file:
                out.append({"filename": co.co_filename, "line": f.f_lineno, "name": co.co_name})
            f = f.f_back
        return out

    def user_frame():
        """The innermost frame of the user's code: not torch, not this hook."""
        f = sys._getframe(1)
        first = None
        while f is not None:
            fn = f.f_code.co_filename
            if fn != hook_file and not fn.startswith("<"):
                if first is None:
                    first = f
                if not fn.startswith(torch_dir):
                    return fn, f.f_lineno
            f = f.f_back
        if first is not None:
            return first.f_code.co_filename, first.f_lineno
        return "<unknown>", 0

    # -- the request stream ---------------------------------------------------
    def now_us():
        return time.time_ns() // 1000

    def current_stream():
        try:
            return torch.cuda.current_stream().cuda_stream
        except Exception:
            return 0

    def new_addr(size):
        addr = state["next_addr"]
        state["next_addr"] += ((max(size, 1) + 511) // 512) * 512 + 512
        return addr

    def alloc(size, stream, fr):
        with lock:
            if state["first_request"] is None:
                state["first_request"] = time.time()
            addr = new_addr(size)
            state["trace"].append(
                {"action": "alloc", "addr": addr, "size": size, "stream": stream, "time_us": now_us(), "frames": fr}
            )
            return addr

    def free(addr, size, stream, fr):
        with lock:
            t = now_us()
            for action in ("free_requested", "free_completed"):
                state["trace"].append(
                    {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": fr}
                )

    def storage_died(key):
        rec = state["live"].pop(key, None)
        if rec is not None:
            free(rec[0], rec[1], rec[2], frames())

    def track(t):
        if not isinstance(t, ft.FakeTensor) or t.device.type != "cuda":
            return
        st = t.untyped_storage()
        key = st._cdata
        if key in state["live"]:
            return
        size = st.nbytes()
        stream = current_stream()
        addr = alloc(size, stream, frames())
        state["live"][key] = (addr, size, stream)
        weakref.finalize(st, storage_died, key)

    def modelled(rule, why, size, transient, stream=None):
        """A request no tensor shows, made by the rule `rule`."""
        stream = current_stream() if stream is None else stream
        fr = [{"filename": "<vramlab model>", "line": 0, "name": rule}]
        addr = alloc(size, stream, fr)
        r = state["rules"].setdefault(rule, {"name": rule, "count": 0, "bytes": 0, "why": why})
        r["count"] += 1
        r["bytes"] += size
        if transient:
            free(addr, size, stream, fr)

    # -- rules: what the GPU allocates that tensors do not show ---------------
    blas_ops = {
        aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
        aten.addmv.default, aten.mv.default, aten._addmm_activation.default,
    }
    lt_ops = {aten.addmm.default, aten._addmm_activation.default}

    def blas_rules(func):
        tid = threading.get_ident()
        if func in blas_ops and tid not in state["blas_threads"]:
            state["blas_threads"].add(tid)
            modelled(
                "cuBLAS workspace, 32 MiB per thread",
                "cuBLAS takes its workspace from the caching allocator at a thread's first GEMM "
                "(the autograd backward thread has its own); it is never freed",
                32 << 20, False,
            )
        if func in lt_ops and tid not in state["lt_threads"]:
            state["lt_threads"].add(tid)
            modelled(
                "cuBLASLt workspace, 1 MiB at the first addmm",
                "addmm runs through cuBLASLt, whose workspace is taken at its first call and kept",
                1 << 20, False,
            )

    # -- refusals -------------------------------------------------------------
    def refuse(kind, op, message):
        fn, line = user_frame()
        doc = {"kind": kind, "op": op, "file": fn, "line": line, "message": message}
        tmp = os.path.join(out_dir, f".refused-{os.getpid()}.json.part")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, os.path.join(out_dir, "refused.json"))
        sys.stderr.write(f"vramlab estimate: refused: {message} ({op} at {fn}:{line})\n")
        sys.stderr.flush()
        os._exit(2)

    data_dependent = {
        aten._local_scalar_dense.default: (
            "data-dependent",
            "a CUDA tensor's value is read on the host (.item(), int(), float(), bool(), "
            "a Python condition on a CUDA tensor); with no data on the GPU it cannot be known",
        ),
        aten.nonzero.default: (
            "data-dependent-shape",
            "nonzero's output shape depends on the data, which the capture does not have",
        ),
    }

    # -- the fake mode --------------------------------------------------------
    ft.init_gpu_context = lambda device: None

    def is_real_cpu(a):
        return isinstance(a, torch.Tensor) and not isinstance(a, ft.FakeTensor) and a.device.type == "cpu"

    class CaptureMode(ft.FakeTensorMode):
        @property
        def avoid_device_init(self):
            return True

        def dispatch(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            flat = pytree.arg_tree_leaves(*args, **kwargs)
            tensors = [a for a in flat if isinstance(a, torch.Tensor)]
            on_cuda = any(isinstance(a, ft.FakeTensor) and a.device.type == "cuda" for a in tensors)
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == "cuda":
                on_cuda = True
            refusal = data_dependent.get(func)
            if refusal is not None and on_cuda:
                refuse(refusal[0], str(func.overloadpacket.__name__), refusal[1])
            if not on_cuda and self.runs_real(func, tensors, kwargs):
                with ft.unset_fake_temporarily():
                    return func(*args, **kwargs)
            try:
                out = super().dispatch(func, types, args, kwargs)
            except (ft.DataDependentOutputException, ft.DynamicOutputShapeException) as e:
                if on_cuda:
                    refuse("data-dependent", str(func.overloadpacket.__name__), f"{type(e).__name__}: {e}")
                raise
            if on_cuda:
                for t in pytree.tree_leaves(out):
                    track(t)
                blas_rules(func)
            return out

        @staticmethod
        def runs_real(func, tensors, kwargs):
            """Ops on real CPU tensors only run for real (a batch size drawn on the host,
            data loading); constructors without inputs only with an explicit generator
            (parameters stay fake, so that Module.cuda() keeps tied weights tied)."""
            if tensors:
                return all(is_real_cpu(a) for a in tensors)
            return kwargs.get("generator") is not None

    # Fake tensors take the optimizers' foreach path, as CUDA tensors do.
    import torch.optim.optimizer as _opt
    import torch.utils._foreach_utils as _fe

    for types_list in (_opt._foreach_supported_types, _fe._foreach_supported_types):
        if ft.FakeTensor not in types_list:
            types_list.append(ft.FakeTensor)

    # Refusals outside the dispatcher: CUDA graphs and torch.compile's Inductor.
    def refused_api(kind, op, message):
        def f(*a, **k):
            refuse(kind, op, message)

        return f

    torch.cuda.CUDAGraph.capture_begin = refused_api(
        "cuda-graph", "torch.cuda.graph",
        "CUDA graph capture records real kernels and a private memory pool; the capture cannot run it",
    )
    torch.compile = refused_api(
        "torch.compile", "torch.compile",
        "torch.compile's Inductor generates and runs real kernels; the capture runs eager code only",
    )

    mode = CaptureMode(allow_non_fake_inputs=True)

    # Module.cuda() swaps each fake parameter with its CUDA copy (keeping tied weights
    # tied), which swap_tensors refuses while the fake mode's memo holds a weak
    # reference to either: those memo entries are dropped first.
    swap_tensors = torch.utils.swap_tensors

    def swap_fake_tensors(t1, t2):
        memo = mode.fake_tensor_converter.tensor_memo
        for k, v in list(memo.items()):
            if v is t1 or v is t2:
                del memo[k]
        return swap_tensors(t1, t2)

    torch.utils.swap_tensors = swap_fake_tensors
    mode.__enter__()

    prev_hook = sys.excepthook

    def excepthook(tp, value, tb):
        state["crashed"] = True
        prev_hook(tp, value, tb)

    sys.excepthook = excepthook

    def write():
        if state["crashed"] or not state["trace"]:
            return
        end = time.time()
        estimate = {
            "version": 1,
            "torch": str(torch.__version__),
            "gpu": gpu,
            "rules": sorted(state["rules"].values(), key=lambda r: r["name"]),
            "capture_s": end - t0,
            "startup_s": (state["first_request"] or end) - t0,
            "argv": list(sys.argv),
        }
        doc = {"segments": [], "device_traces": [state["trace"]], "vramlab_estimate": estimate}
        path = os.path.join(out_dir, f"capture-{os.getpid()}.pickle")
        with open(path + ".part", "wb") as f:
            pickle.dump(doc, f, protocol=4)
        os.replace(path + ".part", path)

    atexit.register(write)


if os.environ.get("VRAMLAB_CAPTURE_OUT"):
    _install()
