#!/usr/bin/env bash
# Build a benchmark suite's native package with cargo, in the package's own target/ (a
# standalone package, never the swordfish crate); cheap when nothing changed. The suites'
# setup.sh call it:
#   cargo_build.sh WHO WHAT PACKAGE_DIR [cargo build options...]
# WHO (the caller) and WHAT (what it builds) name them in the message when cargo is missing.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 WHO WHAT PACKAGE_DIR [cargo build options...]" >&2
    exit 2
fi
who=$1 what=$2
package=$(cd "$3" && pwd)
shift 3
if ! command -v cargo >/dev/null; then
    echo "$who: cargo is needed to build $what" >&2
    exit 1
fi
CARGO_TARGET_DIR="$package/target" cargo build --release --quiet --locked \
    --manifest-path "$package/Cargo.toml" "$@" >&2
