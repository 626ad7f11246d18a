#!/usr/bin/env bash
# The CPU measurements of docs/performance.md in one command, on whatever x86 machine runs it: the CPU's
# model and vector flags, the kernels' alternated timing tests (GEMM paths, the row kernel, the attention paths,
# the fused ops at each vector level), then compare.py `small` at max_pixels 1,003,520 on real screenshots twice,
# one run straight after the other: as the machine is set up (a CBLAS library if one is installed and chosen at
# load) and with MOBILE_R1_EVAL_BLAS=off (the built-in kernels).
#
#   bash benches/compare/cpu-suite.sh [OUT_DIR]     # default benches/results/<date>-<host>
#
# Needs the real screenshots (../shared/data/standins/…) and the comparison venv (.venv-compare, created here
# from PyPI when missing). About an hour on 2 cores; nothing else should run meanwhile. CPU_SUITE_QUICK=1 runs a
# short version (the `tiny` preset, two synthetic steps, one round, no timing tests) to check the script itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benches/results/$(date +%F)-$(hostname)}
screens=../shared/data/standins/standin_cn_mai-ui_139mail_trajectory
venv=.venv-compare
mkdir -p "$out"

if [[ ${CPU_SUITE_QUICK:-0} == 1 ]]; then
    preset=tiny
    compare_args=(--preset tiny --steps 2 --batch 1 --rounds 1 --max-pixels 50176 --max-new-tokens 4)
else
    if [[ ! -d $screens ]]; then
        echo "cpu-suite: $screens is missing: the comparison needs the real screenshots" >&2
        exit 2
    fi
    preset=small
    compare_args=(--preset small --steps 3 --batch 1 --rounds 2 --max-pixels 1003520 --screenshots "$screens")
fi

if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch==2.15.0 torchvision transformers==5.24.0 pillow safetensors numpy jinja2
fi

{
    grep -m1 'model name' /proc/cpuinfo
    grep -m1 'cpu family' /proc/cpuinfo
    grep -m1 '^model' /proc/cpuinfo
    echo "vector flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|amx)' | sort -u | tr '\n' ' ')"
    echo "logical CPUs: $(nproc)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
} | tee "$out/cpu.txt"

cargo build --release --locked
if [[ ${CPU_SUITE_QUICK:-0} != 1 ]]; then
    # Each timing test alternates its paths in one process; `--test-threads 1` keeps them from overlapping.
    cargo test --release --locked --lib -- --ignored --nocapture --test-threads 1 timing 2>&1 |
        tee "$out/timing.txt"
fi

commit=$(git rev-parse --short HEAD)
for setup in default builtin; do
    name="$out/compare-$preset-cpu-suite-$setup-$commit"
    if [[ $setup == builtin ]]; then
        blas=off
    else
        blas=${MOBILE_R1_EVAL_BLAS:-auto}
    fi
    MOBILE_R1_EVAL_BLAS=$blas "$venv/bin/python" benches/compare/compare.py "${compare_args[@]}" \
        --json-out "$name.json" 2>&1 | tee "$name.txt"
done
echo "cpu-suite: results in $out"
