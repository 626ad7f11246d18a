#!/usr/bin/env bash
# Install the official `openai` Python client from PyPI into .venv-openai, for the test that has it talk to
# `serve` (tests/it/openai_client.rs). Never fails: without it, that test says it skipped and why.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=.venv-openai
if "$venv/bin/python" -c "import openai" 2>/dev/null; then
    echo "openai client: already installed ($("$venv/bin/python" -c 'import openai; print(openai.__version__)'))"
    exit 0
fi
if ! command -v python3 >/dev/null; then
    echo "openai client: no python3; the Python client test will skip"
    exit 0
fi
if { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } \
    && timeout 600 "$venv/bin/python" -m pip install -q "openai>=1.40,<4"; then
    echo "openai client: installed ($("$venv/bin/python" -c 'import openai; print(openai.__version__)'))"
else
    echo "openai client: could not be installed; the Python client test will skip"
fi
exit 0
