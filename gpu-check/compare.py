#!/usr/bin/env python3
"""Side-by-side table of vramlab's GPU figures and PyTorch's.

Usage: compare.py VRAMLAB_JSON TORCH_JSON [--json OUT]

Both files hold one JSON object as written by gpu_figures and
torch_reference.py (same keys). A key's unit is in its name: `_tflops` and
`_gbps` are rates (higher is better), `_ns` are times (lower is better). The
"vramlab speed" column is vramlab's speed relative to PyTorch's: above 1.00
vramlab is faster, below slower, whatever the unit. A file that is missing or
unreadable counts as empty, so the table still shows the other side; when
neither can be read the exit status is 2.

`alloc_sequence_stats` (the same allocations and frees on both sides) is
compared key by key: every statistic both sides name should be identical;
the differences and the keys only one side has are listed.
Standard library only.
"""

import json
import math
import sys

RATE_SUFFIXES = ("_tflops", "_gbps")
TIME_SUFFIXES = ("_ns",)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}, None
    except (OSError, ValueError) as e:
        return {}, f"{path}: {e}"


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def speed_ratio(key, ours, theirs):
    """vramlab's speed over PyTorch's (> 1: vramlab faster), or None."""
    if not (is_number(ours) and is_number(theirs)) or ours <= 0 or theirs <= 0:
        return None
    if key.endswith(RATE_SUFFIXES):
        return ours / theirs
    if key.endswith(TIME_SUFFIXES):
        return theirs / ours
    return None


STATS_KEY = "alloc_sequence_stats"
STATS_PHASES = ("live", "after_empty_cache")


def compare_stats(ours, theirs):
    """The allocation sequence's statistics, key by key, or None when a side lacks them."""
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        return None
    result = {"same_sequence": ours.get("ops") == theirs.get("ops"), "phases": {}}
    for phase in STATS_PHASES:
        a, b = ours.get(phase) or {}, theirs.get(phase) or {}
        common = sorted(set(a) & set(b))
        result["phases"][phase] = {
            "identical": sum(1 for k in common if a[k] == b[k]),
            "compared": len(common),
            "differ": [{"key": k, "vramlab": a[k], "torch": b[k]} for k in common if a[k] != b[k]],
            "only_vramlab": sorted(set(a) - set(b)),
            "only_torch": sorted(set(b) - set(a)),
        }
    return result


def print_stats(result):
    print("allocator statistics after the same allocation sequence (torch.cuda.memory_stats keys):")
    if not result["same_sequence"]:
        print("  WARNING: the two sides ran different sequences (ALLOC_SEQUENCE differs)")
    for phase, r in result["phases"].items():
        verdict = "identical" if not r["differ"] else f"{len(r['differ'])} differ"
        print(f"  {phase}: {r['identical']} of {r['compared']} statistics identical ({verdict})")
        for d in r["differ"]:
            print(f"    {d['key']}: vramlab {d['vramlab']} | torch {d['torch']}")
        if r["only_vramlab"]:
            print(f"    only vramlab has: {', '.join(r['only_vramlab'])}")
        if r["only_torch"]:
            print(f"    only torch has: {', '.join(r['only_torch'])}")
    print()


def fmt(v):
    if v is None:
        return "-"
    if is_number(v):
        if abs(v) >= 1e5:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def main(argv):
    args = [a for a in argv[1:]]
    out_json = None
    if "--json" in args:
        i = args.index("--json")
        if i + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        out_json = args[i + 1]
        del args[i : i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ours, err_ours = load(args[0])
    theirs, err_theirs = load(args[1])
    if err_ours and err_theirs:
        print(f"compare.py: neither side could be read:\n  {err_ours}\n  {err_theirs}", file=sys.stderr)
        return 2
    for err in (err_ours, err_theirs):
        if err:
            print(f"note: {err}")

    keys = list(ours.keys()) + [k for k in theirs.keys() if k not in ours]
    figures = [
        k
        for k in keys
        if k.endswith(RATE_SUFFIXES + TIME_SUFFIXES) and (is_number(ours.get(k)) or is_number(theirs.get(k)))
    ]
    info = [k for k in keys if k not in figures and k != STATS_KEY]
    stats = compare_stats(ours.get(STATS_KEY), theirs.get(STATS_KEY))

    for k in info:
        a, b = ours.get(k), theirs.get(k)
        if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
            a, b = json.dumps(a) if a is not None else None, json.dumps(b) if b is not None else None
        print(f"{k}: vramlab {fmt(a)} | torch {fmt(b)}")
    if info:
        print()
    if stats is not None:
        print_stats(stats)

    width = max([len("figure")] + [len(k) for k in figures])
    header = f"{'figure':<{width}}  {'vramlab':>12}  {'torch':>12}  {'vramlab speed':>13}"
    print(header)
    print("-" * len(header))
    rows = []
    for k in figures:
        a, b = ours.get(k), theirs.get(k)
        r = speed_ratio(k, a, b)
        rows.append({"figure": k, "vramlab": a, "torch": b, "vramlab_speed_ratio": r})
        ratio = f"{r:.2f}x" if r is not None else "-"
        print(f"{k:<{width}}  {fmt(a):>12}  {fmt(b):>12}  {ratio:>13}")
    print()
    print("vramlab speed: vramlab's speed over PyTorch's (above 1.00x vramlab is faster);")
    print("_tflops, _gbps: higher is better (GB = 1e9 bytes); _ns: lower is better.")

    if out_json:
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "alloc_sequence_stats": stats, "vramlab": ours, "torch": theirs}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
