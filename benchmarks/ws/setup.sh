#!/usr/bin/env bash
# Build the WebSocket benchmark's native tools (native/: the ws-load client and the
# ws-native reference server) in native/target/ with cargo. A standalone package, never
# the swordfish crate; cheap when nothing changed. run.py calls it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v cargo >/dev/null; then
    echo "ws/setup.sh: cargo is needed to build ws-load and ws-native" >&2
    exit 1
fi
CARGO_TARGET_DIR="$here/native/target" cargo build --release --quiet --locked \
    --manifest-path "$here/native/Cargo.toml" >&2
