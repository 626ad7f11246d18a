#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the browser test of the HTML report (tests/it/report_browser.rs).
# Never fails: without it, that test says it skipped and why.
set -uo pipefail
if command -v chromium >/dev/null; then
    echo "chromium: already installed ($(chromium --version 2>/dev/null))"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "chromium: not installed and no root apt-get; the browser test of the report will skip"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
install() { timeout 600 apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends chromium >/dev/null; }
if install || { timeout 300 apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null && install; }; then
    echo "chromium: installed ($(chromium --version 2>/dev/null))"
else
    echo "chromium: could not be installed; the browser test of the report will skip"
fi
exit 0
