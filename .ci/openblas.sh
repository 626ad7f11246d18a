#!/usr/bin/env bash
# Install OpenBLAS (the optional run-time CBLAS of the CPU's f32 GEMMs, src/ops/gemm/blas/) where Debian's apt is at
# hand, so that CI tests both GEMM paths. Never fails: without it, the BLAS tests say they skipped.
set -uo pipefail
if ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; then
    echo "openblas: already installed"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "openblas: not installed and no root apt-get; the OpenBLAS tests will skip"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
install() { timeout 300 apt-get install -y -q --no-install-recommends libopenblas0-pthread >/dev/null; }
if install || { timeout 300 apt-get update -q >/dev/null && install; }; then
    echo "openblas: installed"
else
    echo "openblas: could not be installed; the OpenBLAS tests will skip"
fi
exit 0
