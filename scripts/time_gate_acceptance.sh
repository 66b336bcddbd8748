#!/usr/bin/env bash
# The time gate's acceptance figures (README, "Regression checks in CI"): five
# pairs of independent runs (a baseline of 3 runs, then 2 runs compared with it)
# of one build against itself (A/A) and of the test-slowdown build against it
# (planted: `add` does 20 % more work), then two A/B sittings of 5 pairs of each;
# on the cpu-vs-gpu quick suite, where the planted kernel runs. Prints each
# comparison's regressions and the `add` cases' verdicts and intervals.
#
#   cargo build --release -p xtask && cp target/release/xtask /tmp/base
#   cargo build --release -p xtask --features test-slowdown && cp target/release/xtask /tmp/slow
#   scripts/time_gate_acceptance.sh /tmp/base /tmp/slow /tmp/acceptance
#
# Then every comparison is judged again, on the same runs, with `--history`: a
# history of 2 sittings of 3 runs of the base build, made first (in the
# repository, so that the runs carry its commit), gives each time's noise
# between runs of one build.
set -u
B=${1:?usage: $0 BASE_BIN SLOW_BIN OUT_DIR}
S=${2:?usage: $0 BASE_BIN SLOW_BIN OUT_DIR}
OUT=${3:?usage: $0 BASE_BIN SLOW_BIN OUT_DIR}
B=$(realpath "$B"); S=$(realpath "$S")
REPO=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT" && mkdir -p "$OUT" && OUT=$(realpath "$OUT") && cd "$OUT" || exit 2
Q="--quick --suite cpu-vs-gpu --device cpu --baseline-dir baselines"
# Runs a side of the independent pairs (BASE_RUNS=5 NEW_RUNS=3: the seeded tests' design).
BR=${BASE_RUNS:-3}; NR=${NEW_RUNS:-2}
uptime > load.txt
# HISTORY_DIR: a history kept across sittings (as CI keeps one), grown here.
HD=${HISTORY_DIR:-$OUT/hist}
for i in 1 2; do
  (cd "$REPO" && "$B" bench --quick --suite cpu-vs-gpu --device cpu --repeat 3 --out "$HD") > hist$i.log 2>&1 || exit 2
done
H="--history $HD/history.sqlite"
for i in 1 2 3 4 5; do
  "$B" bench $Q --repeat "$BR" --save-baseline aa$i --out base$i > base$i.log 2>&1 || exit 2
  "$B" bench $Q --repeat "$NR" --baseline aa$i --out aa$i --json > aa$i.json 2> aa$i.err
  "$S" bench $Q --repeat "$NR" --baseline aa$i --out planted$i --json > planted$i.json 2> planted$i.err
  uptime >> load.txt
done
AB="--quick --suite cpu-vs-gpu --device cpu --pairs 5"
for i in 1 2; do
  "$B" check --ab "$B" --candidate "$B" $AB --out ab-aa$i --json > ab-aa$i.json 2> ab-aa$i.err
  "$B" check --ab "$B" --candidate "$S" $AB --out ab-planted$i --json > ab-planted$i.json 2> ab-planted$i.err
  uptime >> load.txt
done
# The same runs judged again with the history's noise.
for i in 1 2 3 4 5; do
  "$B" check --baseline baselines/aa$i.json --from aa$i/runs.json --out aa$i $H --json > hist-aa$i.json 2>> hist.err
  "$B" check --baseline baselines/aa$i.json --from planted$i/runs.json --out planted$i $H --json > hist-planted$i.json 2>> hist.err
done
for d in ab-aa1 ab-planted1 ab-aa2 ab-planted2; do
  "$B" check --baseline $d/a.json --from $d/b.json --paired --out $d $H --json > hist-$d.json 2>> hist.err
done
python3 - <<'PY'
import glob, json
for f in sorted(glob.glob('*.json')):
    c = json.load(open(f))
    t = [r for r in c['rows'] if r['kind'] == 'time']
    reg = [r['case']['case'] for r in t if r['status'] == 'regression']
    add = [(r['case']['case'], r['status'], [round(x, 3) for x in (r['ratio_interval'] or [])])
           for r in t if r['case']['case'].startswith('add/cpu')]
    mem = sum(1 for r in c['rows'] if r['kind'] == 'memory' and r['status'] != 'no_change')
    print(f"{f}: {len(t)} times, regressions {reg}; memory changed {mem}; add {add}")
PY
echo "load averages during the run:"; cat load.txt
