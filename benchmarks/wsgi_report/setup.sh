#!/usr/bin/env bash
# Build the report's load client, http-vu, from the HTTP suite's native package
# (../http/native, its own target/) with cargo; cheap when nothing changed. run.py calls it.
# The Python peers come from ../requirements.txt (../setup.sh, `make setup`).
set -euo pipefail
native=$(cd "$(dirname "$0")/../http/native" && pwd)
if ! command -v cargo >/dev/null; then
    echo "wsgi_report/setup.sh: cargo is needed to build http-vu" >&2
    exit 1
fi
CARGO_TARGET_DIR="$native/target" cargo build --release --quiet --locked \
    --manifest-path "$native/Cargo.toml" --bin http-vu >&2
