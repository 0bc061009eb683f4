#!/usr/bin/env bash
# Times two builds of tiledmm against each other on one GPU, for a kernel or rule change: each
# wheel is installed into a folder of its own, and `python -m tiledmm.bench` runs ROUNDS times
# with each, alternating base and new, so that the GPU's drift between runs shows as the spread
# of each side rather than as a difference between them. Every run times torch.matmul in its own
# process too: compare the ratios, not the milliseconds.
#   scripts/compare_wheels.sh BASE_WHEEL NEW_WHEEL [LOG_DIR] [-- BENCH_ARGS...]
# BENCH_ARGS default to `--suite models --dtypes bfloat16`. ROUNDS (default 2) sets the rounds.
# Writes each run's results JSON and output to LOG_DIR/<base|new><round>/ (default LOG_DIR: $OUT,
# else /tmp/tiledmm-compare; two rounds fill the eight files a device call brings back) and prints
# the last TAIL_LINES (default 12) of each run's output: the model suite's summary.
set -uo pipefail
base=$(realpath "${1:?base wheel}")
new=$(realpath "${2:?new wheel}")
shift 2
logs=${OUT:-/tmp/tiledmm-compare}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then logs=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--suite models --dtypes bfloat16)
mkdir -p "$logs"

for side in base new; do
    wheel=$([ "$side" = base ] && echo "$base" || echo "$new")
    rm -rf "/tmp/tiledmm-$side"
    python3 -m pip install -q --no-deps --no-index --no-compile --target "/tmp/tiledmm-$side" "$wheel" || exit 2
done
export PYTHONUNBUFFERED=1
for round in $(seq 1 "${ROUNDS:-2}"); do
    for side in base new; do
        run="$logs/$side$round"
        mkdir -p "$run"
        echo "== $side, round $round"
        # From /, so that the source folder tiledmm/ cannot shadow the installed wheel.
        (cd / && PYTHONPATH="/tmp/tiledmm-$side" python3 -m tiledmm.bench "${args[@]}" --commit "$side" \
            --out "$run") > "$run/bench.log" 2>&1 || { tail -n 20 "$run/bench.log"; exit 1; }
        tail -n "${TAIL_LINES:-12}" "$run/bench.log"
    done
done
echo "compare_wheels: results JSON and logs in $logs"
