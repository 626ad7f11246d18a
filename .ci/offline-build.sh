#!/usr/bin/env bash
# Building from source without network: every crate of Cargo.lock vendored into one folder (`cargo vendor`), and
# the build proven to work from that folder alone, with an empty cargo home that knows no registry.
#
#   .ci/offline-build.sh            full proof: vendor into target/offline/vendor, then `cargo check --offline
#                                   --locked` of the library and the binary from it (reusing target/)
#   .ci/offline-build.sh check      CI mode (well under a minute, no network): vendor into target/offline/vendor
#                                   from the local registry cache (`cargo vendor --offline`), then resolve every
#                                   dependency of Cargo.lock, for every platform, from that folder alone with an
#                                   empty cargo home (`cargo metadata --offline --locked`); nothing is compiled
#   .ci/offline-build.sh vendor DIR connected side: vendor into DIR (carry DIR and the source tree across)
#   .ci/offline-build.sh build DIR  far side: `cargo build --offline --locked --release` from DIR with an empty
#                                   cargo home (extra cargo arguments in $CARGO_ARGS, e.g. "--features cuda")
#   .ci/offline-build.sh full DIR   both on one machine: vendor into DIR, then the offline release build
#
# The far side needs the same Rust toolchain (rustc/cargo 1.95 or newer) and, for --features cuda, the CUDA
# toolkit (see docs/air-gap.md); nothing else is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-ci}

vendor() { # DIR [EXTRA CARGO VENDOR ARGS]
  local dir=$1
  shift
  mkdir -p "$(dirname "$dir")"
  # The source-replacement snippet cargo prints is kept beside the crates for the far side.
  cargo vendor --locked --versioned-dirs "$@" "$dir" > "$dir.cargo-config.toml.tmp"
  mv "$dir.cargo-config.toml.tmp" "$dir/cargo-config.toml"
  echo "vendored $(find "$dir" -mindepth 1 -maxdepth 1 -type d | wc -l) crates into $dir"
}

empty_cargo_home() { # VENDOR_DIR -> prints the new CARGO_HOME
  local vendor_dir home
  vendor_dir=$(cd "$1" && pwd)
  home=$(mktemp -d "${TMPDIR:-/tmp}/offline-cargo-home.XXXXXX")
  cat > "$home/config.toml" <<EOF
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "$vendor_dir"

[net]
offline = true
EOF
  echo "$home"
}

case "$mode" in
  check)
    start=$(date +%s)
    if ! vendor target/offline/vendor --offline; then
      echo "offline check: some crates of Cargo.lock are not in the local registry cache (run \`cargo fetch --locked\` once with network)" >&2
      exit 1
    fi
    home=$(empty_cargo_home target/offline/vendor)
    trap 'rm -rf "$home"' EXIT
    CARGO_HOME=$home cargo metadata --offline --locked --format-version 1 > /dev/null
    locked=$(grep -c '^source = "registry+' Cargo.lock)
    vendored=$(find target/offline/vendor -mindepth 1 -maxdepth 1 -type d | wc -l)
    if [ "$locked" != "$vendored" ]; then
      echo "offline check: Cargo.lock has $locked registry crates, the vendor folder $vendored" >&2
      exit 1
    fi
    echo "offline check: all $vendored crates of Cargo.lock vendored and resolved offline in $(( $(date +%s) - start )) s"
    ;;
  ci)
    start=$(date +%s)
    vendor target/offline/vendor
    home=$(empty_cargo_home target/offline/vendor)
    trap 'rm -rf "$home"' EXIT
    CARGO_HOME=$home cargo check --offline --locked --lib --bins
    echo "offline build: cargo check from the vendored crates passed in $(( $(date +%s) - start )) s"
    ;;
  vendor)
    vendor "${2:?usage: $0 vendor DIR}"
    ;;
  build|full)
    dir=${2:?usage: $0 $mode DIR}
    [ "$mode" = full ] && vendor "$dir"
    [ -f "$dir/cargo-config.toml" ] || { echo "$dir holds no vendored crates (run: $0 vendor $dir)" >&2; exit 1; }
    home=$(empty_cargo_home "$dir")
    trap 'rm -rf "$home"' EXIT
    # shellcheck disable=SC2086
    CARGO_HOME=$home cargo build --offline --locked --release ${CARGO_ARGS:-}
    echo "offline build: target/release/mobile-r1-eval built from $dir alone"
    ;;
  *)
    echo "usage: $0 [ci | check | vendor DIR | build DIR | full DIR]" >&2
    exit 2
    ;;
esac
