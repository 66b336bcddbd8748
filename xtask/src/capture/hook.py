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
    import textwrap
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
    fake_dispatch_dirs = tuple(
        os.path.join(torch_dir, *p.split("/"))
        for p in ("_subclasses/", "_ops.py", "utils/_python_dispatch.py", "_decomp/", "_refs/", "_prims",
                  "_meta_registrations.py", "_library/", "_higher_order_ops/", "utils/_stats.py",
                  "_dynamo/eval_frame.py", "_compile.py")
    )

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
        "stream_used": set(),
        "pending": [],
    }
    lock = threading.RLock()

    # -- frames ---------------------------------------------------------------
    def frames():
        if not stacks:
            return []
        out = []
        f = sys._getframe(2)
        # Fake mode's own dispatch frames, innermost, are dropped: on a GPU that
        # dispatch is C++ and no snapshot shows it. A request with nothing left
        # (the autograd engine's backward thread) has no Python frames, as on a GPU.
        inner = True
        while f is not None:
            co = f.f_code
            fn = co.co_filename
            if fn != hook_file and not (inner and fn.startswith(fake_dispatch_dirs)):
                inner = False
                out.append({"filename": fn, "line": f.f_lineno, "name": co.co_name})
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
            # The caching allocator first completes the frees whose stream uses have
            # ended (process_events), then serves the request.
            for addr, psize, pstream, pfr in state["pending"]:
                state["trace"].append({
                    "action": "free_completed", "addr": addr, "size": psize, "stream": pstream,
                    "time_us": now_us(), "frames": pfr,
                })
            state["pending"].clear()
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
        if rec is None:
            return
        if key in state["stream_used"]:
            # Used on another stream (record_stream): the block is free once that
            # stream's work is done, which PyTorch sees at a later malloc.
            state["stream_used"].discard(key)
            fr = frames()
            with lock:
                state["trace"].append({
                    "action": "free_requested", "addr": rec[0], "size": rec[1], "stream": rec[2],
                    "time_us": now_us(), "frames": fr,
                })
                state["pending"].append((rec[0], rec[1], rec[2], fr))
            return
        free(rec[0], rec[1], rec[2], frames())

    debug_ops = os.environ.get("VRAMLAB_CAPTURE_DEBUG_OPS") == "1"

    def track(t, func=None):
        if not isinstance(t, ft.FakeTensor) or t.device.type != "cuda":
            return
        st = t.untyped_storage()
        key = st._cdata
        if key in state["live"]:
            return
        size = st.nbytes()
        if size == 0:
            # The caching allocator hands out no block for zero bytes and records nothing.
            return
        stream = current_stream()
        fr = frames()
        if debug_ops and func is not None:
            fr = [{"filename": "<aten>", "line": 0, "name": str(func)}] + fr
        addr = alloc(size, stream, fr)
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
        key = (tid, current_stream())
        if func in blas_ops and key not in state["blas_threads"]:
            state["blas_threads"].add(key)
            modelled(
                "cuBLAS workspace, 32 MiB per thread",
                "cuBLAS takes its workspace from the caching allocator at the first GEMM of each thread and stream "
                "(the autograd backward thread has its own); it is never freed",
                32 << 20, False,
            )
        if func in lt_ops and key not in state["lt_threads"]:
            state["lt_threads"].add(key)
            modelled(
                "cuBLASLt workspace, 1 MiB at the first addmm",
                "addmm runs through cuBLASLt, whose workspace is taken at its first call and kept",
                1 << 20, False,
            )

    # In-place accumulation. A fake tensor counts as a tensor subclass, for which
    # PyTorch's C++ takes out-of-place branches a CUDA tensor does not: autograd's
    # InputBuffer adds gradients in place when it holds the last reference to one
    # (can_accumulate_inplace), and linear on a non-contiguous 3-D input adds its
    # bias in place. There the add's output takes over its input's allocation. A
    # tensor only C++ holds has 3 Python references at the top of dispatch (the
    # dispatcher's args tuple, getrefcount's argument, its preserved owner);
    # one a Python name holds has more.
    temporary_refs = 3

    def inplace_candidate(func, args, kwargs):
        if len(args) != 2 or (kwargs and kwargs.get("alpha", 1) != 1):
            return None
        refs = (sys.getrefcount(args[0]), sys.getrefcount(args[1]))
        a, b = args
        if not all(isinstance(t, ft.FakeTensor) and t.device.type == "cuda" for t in (a, b)):
            return None
        on_engine = threading.current_thread() is not threading.main_thread()
        if refs[0] == temporary_refs and (on_engine or (b.dim() == 1 and a.dim() >= 3)):
            return a
        if on_engine and refs[1] == temporary_refs:
            return b
        return None

    def transfer(src, dst):
        """The add's output `dst` reuses `src`'s allocation, as in place."""
        if not isinstance(dst, torch.Tensor) or dst.shape != src.shape or dst.dtype != src.dtype:
            return False
        if not src.is_contiguous():
            return False
        skey = src.untyped_storage()._cdata
        rec = state["live"].get(skey)
        st = dst.untyped_storage()
        if rec is None or st.nbytes() != rec[1]:
            return False
        del state["live"][skey]
        state["live"][st._cdata] = rec
        weakref.finalize(st, storage_died, st._cdata)
        r = state["rules"].setdefault(
            "in-place accumulation",
            {"name": "in-place accumulation", "count": 0, "bytes": 0,
             "why": "autograd accumulates gradients, and linear adds a 3-D input's bias, in place on CUDA "
                    "tensors (out of place on fake ones): the add's output takes its input's allocation"},
        )
        r["count"] += 1
        return True

    # cuDNN attention's workspaces (cuDNN 9.19 on sm_90, as recorded by the H100
    # workloads): 256 B in the forward; in the backward a float accumulator for dQ
    # and the softmax statistics, 4 x B x H x S_q x (D + 1) bytes, + 256.
    conv_ops = {aten.convolution.default, aten.convolution_backward.default}

    def attention_rules(func, args):
        if func in conv_ops:
            # Said, not guessed: cuDNN's convolution workspaces (and, under
            # cudnn.benchmark, its trial workspaces) depend on the plans the installed
            # cuDNN picks on the GPU, which no shape rule gives.
            name = "cuDNN convolution workspaces: NOT MODELLED"
            r = state["rules"].setdefault(name, {
                "name": name, "count": 0, "bytes": 0,
                "why": "each cuDNN convolution call takes a workspace (under cudnn.benchmark, trial "
                       "workspaces of up to hundreds of MB at a shape's first call) whose size depends on "
                       "the plans cuDNN picks on the GPU; the capture counts the calls and adds no bytes, "
                       "so its peaks are a lower bound where convolutions run",
                # PyTorch 2.11, aten/src/ATen/native/cudnn/Conv_v8.cpp: generate_and_filter_plans
                # keeps the plans whose workspace is at most get_available_workspace() (cacheInfo's
                # largest block, which starts from cudaMemGetInfo's free bytes) and halves the
                # largest until allocate() succeeds; run_conv_plan and try_configs allocate a
                # plan's workspace and move on to another plan on OutOfMemoryError.
                "bound": "PyTorch's generate_and_filter_plans (cuDNN's Conv_v8.cpp) sizes a benchmark "
                         "trial workspace up to CUDACachingAllocator::cacheInfo's largest block, which "
                         "starts from the GPU's free memory, and halves it until it is allocated; each "
                         "call allocates its plan's workspace and takes another plan when that runs "
                         "out of memory. So the workspaces can take whatever the allocator may still "
                         "reserve, and only that limit bounds the peaks from above.",
            })
            r["count"] += 1
        elif func is aten._scaled_dot_product_cudnn_attention.default:
            modelled("cuDNN attention forward workspace",
                     "cuDNN's SDPA forward plan workspace, 256 B (cuDNN 9.19, sm_90)", 256, True)
        elif func is aten._scaled_dot_product_cudnn_attention_backward.default:
            b, h, s, d = args[1].shape
            modelled("cuDNN attention backward workspace",
                     "cuDNN's SDPA backward workspace: float dQ accumulator and softmax statistics, "
                     "4 x B x H x S x (D + 1) + 256 bytes (cuDNN 9.19, sm_90)",
                     4 * b * h * s * (d + 1) + 256, True)

    # Multi-output kernels allocate in their own order, not the tuple's.
    output_order = {
        # the mask, then the output
        aten.native_dropout.default: (1, 0),
        # philox seed and offset first (8 B each), then out and logsumexp
        aten._scaled_dot_product_cudnn_attention.default: (6, 7, 0, 1, 2, 3, 4, 5, 8),
        # efficient attention's philox seed and offset live on the host under CUDA
        aten._scaled_dot_product_efficient_attention.default: (0, 1),
    }

    def kernel_order(func, out, args=()):
        order = output_order.get(func)
        if order is None or not isinstance(out, (tuple, list)):
            return pytree.tree_leaves(out)
        skip = set()
        # cuDNN attention allocates no logsumexp unless asked (the fake kernel always does).
        if func is aten._scaled_dot_product_cudnn_attention.default and len(args) > 4 and not args[4]:
            skip.add(1)
        return [out[i] for i in order if i < len(out) and i not in skip] + list(out[len(order):])

    # Reductions: PyTorch's setReduceConfig (aten/src/ATen/native/cuda/Reduce.cuh)
    # splits a long reduction over several blocks per output, which stage partial
    # results in global memory (and count arrivals in semaphores) taken from the
    # caching allocator for the kernel's duration.
    reductions = {
        aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
    }

    def last_pow2(n):
        n = int(n)
        for shift in (1, 2, 4, 8, 16):
            n |= n >> shift
        return max(1, n - (n >> 1))

    def div_up(a, b):
        return (a + b - 1) // b

    def iterator_dims(inp, out_t, reduced):
        """TensorIterator's dims for a reduction of `inp` over `reduced` into `out_t`:
        reordered (reduced first, then by stride) and coalesced. Entries are
        [size, output stride, input stride] in bytes."""
        isz = inp.element_size()
        osz = out_t.element_size()
        kept = [d for d in range(inp.dim()) if d not in reduced]
        ostride = {}
        acc = osz
        for d in reversed(kept):
            ostride[d] = acc
            acc *= inp.shape[d]
        dims = [
            [inp.shape[d], 0 if d in reduced else ostride[d], inp.stride()[d] * isz]
            for d in reversed(range(inp.dim()))
            if inp.shape[d] != 1
        ]

        def should_swap(a, b):
            for k in (1, 2):
                s0, s1 = a[k], b[k]
                if k == 1 and (s0 == 0) != (s1 == 0):
                    return 1 if s1 == 0 else -1
                if s0 == 0 or s1 == 0:
                    continue
                if s0 < s1:
                    return -1
                if s0 > s1:
                    return 1
                if a[0] > b[0]:
                    return 1
            return 0

        for i in range(1, len(dims)):
            j = i
            for i0 in range(i - 1, -1, -1):
                c = should_swap(dims[i0], dims[j])
                if c > 0:
                    dims[i0], dims[j] = dims[j], dims[i0]
                    j = i0
                elif c < 0:
                    break
        merged = []
        for d in dims:
            if merged and all(merged[-1][0] * merged[-1][k] == d[k] for k in (1, 2)):
                merged[-1][0] *= d[0]
            else:
                merged.append(list(d))
        return merged

    def staging_bytes(inp, out_t, reduced, arg_size):
        """(staging buffer, semaphores) bytes of setReduceConfig's global reduction, or None."""
        num_outputs = max(out_t.numel(), 1)
        numel = inp.numel()
        if numel == 0:
            return None
        inputs_per_output = numel // num_outputs
        dims = iterator_dims(inp, out_t, reduced)
        num_reduce = sum(1 for d in dims if d[1] == 0)
        esize = inp.element_size()
        vt0 = 4
        output_vec = 1
        if dims:
            on_fastest = num_reduce == len(dims) or dims[0][2] < dims[num_reduce][2]
            if on_fastest:
                dim0, dim1, fastest = inputs_per_output, num_outputs, dims[0][2]
            else:
                dim0, dim1, fastest = num_outputs, inputs_per_output, dims[num_reduce][2]
        else:
            on_fastest, dim0, dim1, fastest = True, 1, 1, esize
        if fastest == esize:
            if on_fastest and dim0 > 128 and num_reduce == 1 and vt0 >= 4:
                dim0 //= 4
            elif not on_fastest:
                vec = 4
                for n in [dims[num_reduce][0]] + [d[2] // esize for i, d in enumerate(dims) if i != num_reduce]:
                    while n % vec:
                        vec //= 2
                output_vec = vec
                dim0 //= output_vec
        max_threads = 512 // output_vec
        d0 = last_pow2(dim0) if dim0 < max_threads else max_threads
        d1 = last_pow2(dim1) if dim1 < max_threads else max_threads
        bw = min(d0, 32)
        bh = min(d1, max_threads // bw)
        bw = min(d0, max_threads // bh)
        num_threads = bw * bh
        step_in, step_out = 1, 1
        block_x_reduce = False
        if not dims or on_fastest:
            block_x_reduce = True
            step_in *= bw
        else:
            step_out *= bw
        in_mult1 = 0
        if div_up(inputs_per_output, step_in) >= bh * 16 or div_up(inputs_per_output, step_in) >= 256:
            in_mult1 = step_in
            step_in *= bh
        else:
            step_out *= bh
        target = sm_count * (2048 // num_threads)
        grid_x = div_up(num_outputs // output_vec, step_out)
        vpt = div_up(inputs_per_output, step_in)
        if not (in_mult1 and vpt >= 256 and grid_x <= target):
            return None
        ctas = max(min(div_up(target, grid_x), div_up(vpt, 16)), div_up(vpt, 256))
        if ctas <= 1:
            return None
        size = arg_size * num_outputs * ctas
        if not block_x_reduce:
            size *= bw * output_vec
        return size, 4 * grid_x

    def reduction_rules(func, args, kwargs, out):
        if func not in reductions or not isinstance(out, torch.Tensor):
            return
        inp = args[0]
        if not isinstance(inp, torch.Tensor) or inp.dim() == 0:
            return
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            reduced = set(range(inp.dim()))
        else:
            dims = [dims] if isinstance(dims, int) else dims
            reduced = {d % inp.dim() for d in dims}
        arg_size = 8 if inp.dtype in (torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
                                      torch.uint8, torch.bool) else 4
        got = staging_bytes(inp, out, reduced, arg_size)
        if got is None:
            return
        buf, sem = got
        stream = current_stream()
        fr = [{"filename": "<vramlab model>", "line": 0, "name": "reduction staging (setReduceConfig)"}]
        a_buf = alloc(buf, stream, fr)
        fr_s = [{"filename": "<vramlab model>", "line": 0, "name": "reduction semaphores (setReduceConfig)"}]
        a_sem = alloc(sem, stream, fr_s)
        free(a_sem, sem, stream, fr_s)
        free(a_buf, buf, stream, fr)
        for name, size, why in (
            ("reduction staging (setReduceConfig)", buf,
             "a reduction split over several blocks per output stages partial results in global memory "
             "for the kernel's duration: arg bytes x outputs x blocks per output (x block width x vector)"),
            ("reduction semaphores (setReduceConfig)", sem,
             "the split reduction's arrival counters: 4 bytes per block column"),
        ):
            r = state["rules"].setdefault(name, {"name": name, "count": 0, "bytes": 0, "why": why})
            r["count"] += 1
            r["bytes"] += size

    # -- refusals -------------------------------------------------------------
    def refuse(kind, op, message):
        fn, line = user_frame()
        doc = {"kind": kind, "op": op, "file": fn, "line": line, "message": message}
        tmp = os.path.join(out_dir, f".refused-{os.getpid()}.json.part")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, os.path.join(out_dir, "refused.json"))
        # Lines of at most 100 columns, as every line vramlab prints.
        text = textwrap.fill(
            f"vramlab estimate: refused ({kind}): {message}", width=100, subsequent_indent="  "
        )
        where = textwrap.fill(f"at {fn}:{line} ({op})", width=100, initial_indent="  ", subsequent_indent="    ")
        sys.stderr.write(text + "\n" + where + "\n")
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

    nesting = threading.local()

    class CaptureMode(ft.FakeTensorMode):
        @property
        def avoid_device_init(self):
            return True

        def dispatch(self, func, types, args=(), kwargs=None):
            if func is aten.record_stream.default:
                # No kernel: the storage's free waits for the other stream's work.
                t = args[0]
                if isinstance(t, ft.FakeTensor) and t.device.type == "cuda":
                    state["stream_used"].add(t.untyped_storage()._cdata)
                return None
            into = inplace_candidate(func, args, kwargs) if func is aten.add.Tensor else None
            kwargs = kwargs or {}
            if getattr(nesting, "depth", 0):
                # Inside another op's fake implementation (a decomposition, a meta
                # function): its temporaries are no kernel's; the op's outputs count.
                return super().dispatch(func, types, args, kwargs)
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
            nesting.depth = 1
            try:
                out = super().dispatch(func, types, args, kwargs)
            except (ft.DataDependentOutputException, ft.DynamicOutputShapeException) as e:
                if on_cuda:
                    refuse("data-dependent", str(func.overloadpacket.__name__), f"{type(e).__name__}: {e}")
                raise
            except Exception as e:
                namespace = getattr(func, "namespace", "aten")
                if on_cuda and namespace not in ("aten", "prims"):
                    refuse(
                        "custom-op", f"{namespace}::{func.overloadpacket.__name__}",
                        "a custom operator (an extension's kernel) without a fake implementation: "
                        "the capture cannot know what it allocates (register_fake gives it one)",
                    )
                if on_cuda and isinstance(e, ft.UnsupportedOperatorException):
                    refuse("unsupported-op", str(func), f"no fake (meta) implementation in torch: {e}")
                raise
            finally:
                nesting.depth = 0
            if on_cuda:
                if into is None or not transfer(into, out):
                    for t in kernel_order(func, out, args):
                        track(t, func)
                attention_rules(func, args)
                blas_rules(func)
                reduction_rules(func, args, kwargs, out)
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
    # torch.cuda.empty_cache() releases the cached, unused segments: reserved memory
    # falls. An entry of its own in the stream (PyTorch writes segment_free entries
    # there, which a capture without segments cannot), so that a replay can act on it.
    def empty_cache():
        with lock:
            state["trace"].append({
                "action": "empty_cache", "addr": 0, "size": 0, "stream": current_stream(),
                "time_us": now_us(), "frames": frames(),
            })
        r = state["rules"].setdefault("torch.cuda.empty_cache()", {
            "name": "torch.cuda.empty_cache()", "count": 0, "bytes": 0,
            "why": "the program released the cache here; the capture marks it with an `empty_cache` "
                   "entry (PyTorch's trace has segment_free entries instead)",
        })
        r["count"] += 1

    torch.cuda.empty_cache = empty_cache
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


def _chain_failed(e):
    sys.stderr.write("vramlab estimate: the program's own sitecustomize failed: %r\n" % (e,))


# `_chain_sitecustomize` is `sitecustomize_chain.py`'s, written before this file.
_chain_sitecustomize(os.path.dirname(os.path.abspath(__file__)), _chain_failed)
if os.environ.get("VRAMLAB_CAPTURE_OUT"):
    _install()
