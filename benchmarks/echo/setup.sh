#!/usr/bin/env bash
# Prepare the echo benchmark (idempotent, cheap when nothing changed):
#   1. build the native reference server native/target/release/echo-native and
#      the native load client native/target/release/echo-client
#      (cargo, its own target dir; the package is not part of swordfish's crate)
#   2. make a self-signed TLS certificate for localhost in certs/ (openssl CLI;
#      the key is generated here, never committed: certs/ is gitignored)
# A step that cannot run prints why; the runner then marks what needs it n/a.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
status=0

if command -v cargo >/dev/null; then
    if ! CARGO_TARGET_DIR="$here/native/target" cargo build --release --quiet \
            --manifest-path "$here/native/Cargo.toml" >&2; then
        echo "echo/setup.sh: building the native echo server and client failed" >&2
        status=1
    fi
else
    echo "echo/setup.sh: no cargo: the native echo server is not built" >&2
    status=1
fi

certs=$here/certs
if [ ! -s "$certs/cert.pem" ] || [ ! -s "$certs/key.pem" ]; then
    if command -v openssl >/dev/null; then
        mkdir -p "$certs"
        if ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
                -nodes -days 3650 -subj "/CN=localhost" \
                -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
                -keyout "$certs/key.pem" -out "$certs/cert.pem" 2>/dev/null; then
            echo "echo/setup.sh: openssl could not make the TLS certificate" >&2
            rm -f "$certs/key.pem" "$certs/cert.pem"
            status=1
        fi
    else
        echo "echo/setup.sh: no openssl CLI: the TLS echo is not measured" >&2
        status=1
    fi
fi
exit $status
