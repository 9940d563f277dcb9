#!/usr/bin/env bash
# Tools of the HTTP/2 benchmark: h2load (Debian's nghttp2-client) and native hyper's HTTP/2
# reference (http/native, `http-native --http2`). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v h2load >/dev/null; then
    echo "setup.sh: installing h2load (Debian package nghttp2-client)" >&2
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y -qq nghttp2-client >&2 || { apt-get update -qq >&2 && apt-get install -y -qq nghttp2-client >&2; }
    else
        sudo apt-get install -y -qq nghttp2-client >&2
    fi
fi
(cd "$here/../http/native" && cargo build --release --quiet)
