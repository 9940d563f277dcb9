#!/usr/bin/env bash
# Build the WebSocket benchmark's native tools (native/: the ws-load client and the
# ws-native reference server) in native/target/ with cargo (../cargo_build.sh). A
# standalone package, never the swordfish crate; cheap when nothing changed. run.py calls it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../cargo_build.sh" ws/setup.sh "ws-load and ws-native" "$here/native"
