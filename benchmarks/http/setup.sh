#!/usr/bin/env bash
# Tools of the HTTP benchmark: wrk (Debian package), oha (crates.io, into .tools/) and the
# native reference server, fake database and virtual-user client (native/). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OHA_VERSION=1.16.0

if ! command -v wrk >/dev/null; then
    echo "setup.sh: installing wrk (Debian package)" >&2
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y -qq wrk >&2 || { apt-get update -qq >&2 && apt-get install -y -qq wrk >&2; }
    else
        sudo apt-get install -y -qq wrk >&2
    fi
fi
if [ ! -x "$here/.tools/bin/oha" ] || ! "$here/.tools/bin/oha" --version | grep -q "$OHA_VERSION"; then
    echo "setup.sh: installing oha $OHA_VERSION (cargo install, a few minutes)" >&2
    cargo install --quiet --locked oha --version "$OHA_VERSION" --root "$here/.tools" >&2
fi
(cd "$here/native" && cargo build --release --quiet)
