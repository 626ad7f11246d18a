#!/usr/bin/env bash
# Put Intel MKL's single dynamic library (libmkl_rt, with the sequential threading layer and the CPU kernels it
# opens beside it) into .mkl/, from PyPI's `mkl` wheel, for the tests of the CBLAS path with a library that has a
# bf16 GEMM (cblas_gemm_bf16bf16f32); users name it with --cpu-gemm .mkl/libmkl_rt.so.3. x86-64 Linux only.
# Never fails: without it, those tests say they skipped and why.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=.mkl
version=2026.2.1
if [ -f "$dir/libmkl_rt.so.3" ]; then
    echo "mkl: already in $dir"
    exit 0
fi
if [ "$(uname -sm)" != "Linux x86_64" ] || ! command -v python3 >/dev/null; then
    echo "mkl: needs x86-64 Linux and python3; the MKL tests will skip"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! timeout 600 python3 -m pip download -q --no-deps "mkl==$version" -d "$tmp"; then
    echo "mkl: the wheel could not be downloaded; the MKL tests will skip"
    exit 0
fi
# The libraries libmkl_rt opens for LP64 CBLAS calls on one thread: the core, the sequential layer, the kernels of
# each x86-64 level.
libs="rt core sequential intel_lp64 def mc3 avx2 avx512 avx10"
members=$(for l in $libs; do printf 'mkl-%s.data/data/lib/libmkl_%s.so.3 ' "$version" "$l"; done)
if python3 - "$tmp"/mkl-*.whl "$tmp/x" $members <<'PY'
import sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for n in names:
        z.extract(n, out)
PY
then
    mkdir -p "$dir" && mv "$tmp"/x/mkl-*.data/data/lib/* "$dir/"
    echo "mkl: $version in $dir ($(du -sh "$dir" | cut -f1))"
else
    echo "mkl: the wheel could not be unpacked; the MKL tests will skip"
fi
exit 0
