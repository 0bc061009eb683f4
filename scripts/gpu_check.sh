#!/usr/bin/env bash
# tiledmm's GPU checks, run on a machine with a GPU from a checkout plus a prebuilt wheel:
#   scripts/gpu_check.sh [WHEEL] [LOG_DIR] [PTX_WHEEL]
# Installs the wheel into a private folder, runs the test suite (GPU tests included; 500 property
# cases per property test unless TILEDMM_PROPERTY_EXAMPLES says otherwise), runs compute-sanitizer
# memcheck, racecheck, initcheck and synccheck over every kernel variant at small odd shapes, and
# prints a summary. With PTX_WHEEL (default: dist-ptx/tiledmm-*.whl where it exists; build it with
# TORCH_CUDA_ARCH_LIST="8.0+PTX" pip wheel --no-deps -w dist-ptx .), also the PTX route: that
# wheel's compute_80 PTX compiled by the driver at first use, as on a GPU without native code in the
# wheel, over every dtype and precision (scripts/ptx_route.py; LOG_DIR/ptx_route.json records the
# first-call time). PYTEST_TARGETS (default: tests), SANITIZE_TOOLS (default: all four) and
# SANITIZE_PATHS (default: every path; e.g. "core" or "float32:tf32", as scripts/sanitize_cases.py
# takes them) narrow the test and sanitizer runs.
# Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
wheel=${1:-$(ls dist/tiledmm-*.whl 2>/dev/null | head -n 1)}
logs=${2:-${OUT:-/tmp/tiledmm-gpu-check}}
ptx_wheel=${3:-$(ls dist-ptx/tiledmm-*.whl 2>/dev/null | head -n 1)}
[ -f "$wheel" ] || { echo "gpu_check: no wheel given or found in dist/" >&2; exit 2; }
mkdir -p "$logs"

site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --no-compile --target "$site" "$wheel" || exit 2
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
# From / so that the source folder tiledmm/ (no compiled module) cannot shadow the wheel.
(cd / && python3 -c 'import torch, tiledmm; print("tiledmm", tiledmm.__version__, "from", tiledmm.__file__, "| torch", torch.__version__, "|", torch.cuda.get_device_name())') | tee "$logs/environment.txt" || exit 2

TILEDMM_PROPERTY_EXAMPLES=${TILEDMM_PROPERTY_EXAMPLES:-500} pytest ${PYTEST_TARGETS:-tests} -q -rs -p no:cacheprovider -s 2>&1 | tee "$logs/pytest.log" | grep -vE '^\s*$' | tail -n 40
tests_rc=${PIPESTATUS[0]}

ptx_rc=0
if [ -n "$ptx_wheel" ]; then
    ptx_site=$(mktemp -d)
    python3 -m pip install -q --no-deps --no-index --no-compile --target "$ptx_site" "$ptx_wheel" || exit 2
    # An empty kernel cache, so that the driver compiles every kernel this run uses.
    CUDA_CACHE_PATH=$(mktemp -d) PYTHONPATH=$ptx_site python3 scripts/ptx_route.py > "$logs/ptx_route.json" \
        2> "$logs/ptx_route.log"
    ptx_rc=$?
    echo "PTX route: exit $ptx_rc | $(tail -n 1 "$logs/ptx_route.log")"
fi

sanitizer_rc=0
: > "$logs/sanitizer-summary.txt"
for tool in ${SANITIZE_TOOLS-memcheck racecheck initcheck synccheck}; do
    # initcheck counts a partial cp.async (src-size < 16) as a 16-byte read, so it reports the
    # windowed 16-bit loads at a matrix's end wherever the rest of that 16-byte block was never
    # written (scripts/cp_async_partial_initcheck.cu shows it on a 4-byte copy): the 32- and
    # 64-bit paths only.
    paths=${SANITIZE_PATHS:-}
    [ "$tool" = initcheck ] && [ -z "$paths" ] && paths="float32 float64"
    compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        python3 scripts/sanitize_cases.py $paths > "$logs/sanitizer-$tool.log" 2>&1  # word-split: path names
    rc=$?
    [ "$rc" -eq 0 ] || sanitizer_rc=1
    echo "compute-sanitizer $tool: exit $rc | $(grep -E 'sanitize_cases:|SUMMARY' "$logs/sanitizer-$tool.log" | tr '\n' ' ')" \
        | tee -a "$logs/sanitizer-summary.txt"
done


echo "== gpu_check summary: pytest exit $tests_rc ($(grep -E '[0-9]+ (passed|failed)' "$logs/pytest.log" | tail -n 1)); sanitizers exit $sanitizer_rc; PTX route exit $ptx_rc"
[ "$tests_rc" -eq 0 ] && [ "$sanitizer_rc" -eq 0 ] && [ "$ptx_rc" -eq 0 ]
