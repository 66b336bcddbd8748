#!/usr/bin/env python3
"""Writes PyTorch memory-snapshot pickles for vramlab's tests (tests/data/snapshots/).

No GPU and no torch: the snapshots are built from Python dicts shaped exactly as
PyTorch's `torch.cuda.memory._snapshot()` returns them (torch/csrc/cuda/Module.cpp,
`THCPModule_memorySnapshot`) and pickled as `_dump_snapshot` does (`pickle.dump`),
at protocols 2, 4 and 5. The trace is produced by a small model of the caching
allocator's rules (c10/cuda/CUDACachingAllocator.cpp, default settings): rounding
to 512 bytes, the small (<= 1 MiB, 2 MiB segments) and large pools (20 MiB
segments below 10 MiB, else rounded up to 2 MiB), best fit by (size, address),
splitting (remainder >= 512 bytes small, > 1 MiB large), merging on free, and
empty_cache releasing whole free segments (large pool first, by size).

Usage:
  scripts/make_snapshot_fixtures.py                 # rewrite tests/data/snapshots/
  scripts/make_snapshot_fixtures.py --big N OUT     # an N-event protocol-4 file for benchmarks
"""

import bisect
import os
import pickle
import random
import sys

MIB = 1 << 20
SMALL_SIZE = MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB


def round_size(size):
    return max(512, (size + 511) // 512 * 512)


def segment_size(rounded):
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class Block:
    __slots__ = ("addr", "size", "requested", "allocated", "prev", "next", "seg", "frames")

    def __init__(self, addr, size, seg):
        self.addr, self.size, self.seg = addr, size, seg
        self.requested, self.allocated, self.prev, self.next, self.frames = 0, False, None, None, []


class Model:
    """The caching allocator on one stream, recording PyTorch's trace entries."""

    def __init__(self, frames_pool, start_us=1_700_000_000_000_000):
        self.next_addr = 0x7F00_0000_0000
        self.free = {"small": [], "large": []}  # sorted (size, addr, id(block)) keys
        self.blocks = {}  # key -> Block for free blocks
        self.live = {}  # addr -> Block
        self.segments = []  # first blocks, in creation order
        self.trace = []
        self.recording = True
        self.time_us = start_us
        self.frames_pool = frames_pool
        self.rng = random.Random(7)

    def _frames(self):
        if not self.frames_pool:
            return []
        # A new list per entry whose frame dicts are shared, as py_symbolize makes them.
        top = self.rng.randrange(len(self.frames_pool))
        return [self.frames_pool[top], self.frames_pool[(top + 1) % len(self.frames_pool)]]

    def _record(self, action, addr, size, frames=None):
        self.time_us += 3
        if not self.recording:
            return
        entry = {"action": action, "addr" if action != "oom" else "device_free": addr, "size": size,
                 "stream": 0, "time_us": self.time_us}
        entry["frames"] = frames if frames is not None else []
        self.trace.append(entry)

    def _pool(self, size):
        return "small" if size <= SMALL_SIZE else "large"

    def _insert_free(self, b):
        key = (b.size, b.addr)
        bisect.insort(self.free[self._pool_of(b)], key)
        self.blocks[key] = b

    def _remove_free(self, b):
        key = (b.size, b.addr)
        lst = self.free[self._pool_of(b)]
        i = bisect.bisect_left(lst, key)
        assert lst[i] == key
        del lst[i]
        del self.blocks[key]

    def _pool_of(self, b):
        first = b
        while first.prev is not None:
            first = first.prev
        return first.seg

    def malloc(self, size):
        rounded = round_size(size)
        pool = self._pool(rounded)
        lst = self.free[pool]
        i = bisect.bisect_left(lst, (rounded, 0))
        frames = self._frames()
        if i < len(lst):
            b = self.blocks[lst[i]]
            self._remove_free(b)
        else:
            seg = segment_size(rounded)
            addr = self.next_addr
            self.next_addr += (seg + 0xFFFFF) // 0x100000 * 0x100000 + 0x200000
            b = Block(addr, seg, pool)
            self.segments.append(b)
            self._record("segment_alloc", addr, seg, frames)
        remaining = b.size - rounded
        if (pool == "small" and remaining >= 512) or (pool == "large" and remaining > SMALL_SIZE):
            rest = Block(b.addr + rounded, remaining, None)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = rounded
            self._insert_free(rest)
        b.allocated, b.requested, b.frames = True, size, frames
        self.live[b.addr] = b
        self._record("alloc", b.addr, size, frames)
        return b.addr

    def free_(self, addr):
        b = self.live.pop(addr)
        self._record("free_requested", addr, b.requested, b.frames)
        self._record("free_completed", addr, b.requested, b.frames)
        b.allocated, b.requested, b.frames = False, 0, []
        for nb in (b.prev, b.next):
            if nb is not None and not nb.allocated:
                self._remove_free(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    if b in self.segments:
                        self.segments[self.segments.index(b)] = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        self._insert_free(b)

    def empty_cache(self):
        for pool in ("large", "small"):
            for key in list(self.free[pool]):
                b = self.blocks[key]
                if b.prev is None and b.next is None:
                    self._remove_free(b)
                    self.segments.remove(b)
                    self._record("segment_free", b.addr, b.size)

    def segment_dicts(self, device=0):
        out = []
        for first in sorted(self.segments, key=lambda s: s.addr):
            blocks, b, total = [], first, 0
            while b is not None:
                blocks.append({"address": b.addr, "size": b.size, "requested_size": b.requested,
                               "state": "active_allocated" if b.allocated else "inactive",
                               "frames": b.frames})
                total += b.size
                b = b.next
            allocated = sum(x["size"] for x in blocks if x["state"] == "active_allocated")
            out.append({
                "device": device, "address": first.addr, "total_size": total,
                "allocated_size": allocated, "active_size": allocated,
                "requested_size": sum(x["requested_size"] for x in blocks),
                "stream": 0, "segment_type": first.seg, "segment_pool_id": (0, 0),
                "is_expandable": False, "frames": [], "blocks": blocks,
            })
        return out


def settings(conf=""):
    return {
        "PYTORCH_CUDA_ALLOC_CONF": conf,
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
    }


def frames_pool():
    names = [("train.py", 41, "forward"), ("model.py", 17, "attention"), ("model.py", 88, "mlp"),
             ("optim.py", 120, "step"), ("train.py", 77, "backward")]
    return [{"filename": "/home/user/project/" + f, "line": l, "name": n} for f, l, n in names]


def small_snapshot():
    """A recording that began after a 40 MiB weight and a 12 MiB buffer were allocated
    (neither has an alloc event; the buffer's free is in the trace), with small and
    large requests, splits, reuse, merging and an empty_cache."""
    m = Model(frames_pool())
    m.recording = False
    weight = m.malloc(40 * MIB)
    buf = m.malloc(12 * MIB - 100)
    m.recording = True
    a = m.malloc(3 * MIB)            # new 20 MiB segment, split
    b = m.malloc(5 * MIB + 7)         # fits the remainder of a's segment
    c = m.malloc(1000)                # small pool: new 2 MiB segment
    d = m.malloc(200_000)
    m.free_(buf)                      # a block allocated before recording began
    e = m.malloc(11 * MIB)            # reuses buf's 12 MiB segment, split? no: rest < 1 MiB + 1
    m.free_(a)
    m.free_(b)                        # merges with a and the remainder
    f = m.malloc(30 * MIB)            # a new 30 MiB segment
    m.free_(c)
    m.free_(f)
    m.empty_cache()                   # releases the 20 MiB and 30 MiB segments
    g = m.malloc(64 * MIB)
    m.free_(e)
    h = m.malloc(700)
    del weight, d, g, h
    return {
        "segments": m.segment_dicts(),
        "device_traces": [m.trace],
        "allocator_settings": settings(),
        "external_annotations": [],
    }


def legacy_snapshot():
    """The PyTorch 2.0 layout: `history` in blocks, no frames, no allocator_settings."""
    snap = small_snapshot()
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                b["history"] = [{"addr": b["address"], "real_size": b["requested_size"]}]
            for k in ("frames", "address", "requested_size"):
                b.pop(k, None)
        for k in ("frames", "is_expandable"):
            seg.pop(k)
    for e in snap["device_traces"][0]:
        e.pop("time_us")
        e.pop("frames")
    del snap["allocator_settings"]
    del snap["external_annotations"]
    return snap


def multi_device_snapshot():
    """Two devices; device 1 has more events. Newer keys (host_segments, host_traces,
    user_metadata, compile_context, annotations) are present."""
    m0 = Model(frames_pool())
    x = m0.malloc(4 * MIB)
    m0.free_(x)
    m1 = Model(frames_pool())
    ys = [m1.malloc(s * MIB) for s in (1, 2, 3, 12)]
    for y in ys[:2]:
        m1.free_(y)
    for e in m1.trace:
        e["user_metadata"] = ""
        e["compile_context"] = "N/A"
    segs = m0.segment_dicts(0) + m1.segment_dicts(1)
    return {
        "segments": segs,
        "device_traces": [m0.trace, m1.trace],
        "allocator_settings": settings("expandable_segments:False"),
        "external_annotations": [{"device": 1, "time_us": 5, "stage": "START", "name": "fwd"}],
        "host_segments": [],
        "host_traces": [],
    }


def big_snapshot(n_events):
    """About n_events trace entries: a training-like loop of activations and temporaries."""
    m = Model(frames_pool())
    rng = random.Random(11)
    live = []
    sizes = [512, 4096, 65536, 700_000, 2 * MIB, 6 * MIB, 16 * MIB, 48 * MIB]
    while len(m.trace) < n_events:
        if len(live) < 40 or (rng.random() < 0.5 and len(live) < 400):
            live.append(m.malloc(rng.choice(sizes) + rng.randrange(0, 4096)))
        else:
            m.free_(live.pop(rng.randrange(len(live))))
    return {
        "segments": m.segment_dicts(),
        "device_traces": [m.trace],
        "allocator_settings": settings(),
        "external_annotations": [],
    }


def write(path, obj, protocol):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--big":
        write(sys.argv[3], big_snapshot(int(sys.argv[2])), 4)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "tests", "data", "snapshots")
    os.makedirs(out, exist_ok=True)
    small = small_snapshot()
    for protocol in (2, 4, 5):
        write(os.path.join(out, f"small_p{protocol}.pickle"), small, protocol)
    write(os.path.join(out, "legacy_p2.pickle"), legacy_snapshot(), 2)
    write(os.path.join(out, "multi_device_p4.pickle"), multi_device_snapshot(), 4)
    write(os.path.join(out, "medium_p5.pickle"), big_snapshot(3000), 5)


if __name__ == "__main__":
    main()
