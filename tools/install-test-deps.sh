#!/usr/bin/env bash
# Install the system packages the test suite needs beyond Python ones, from Debian:
# `chromium`, for the real-browser WebSocket test (tests/test_ws_browser.py), and
# `haproxy`, the load balancer in front for the PROXY protocol tests (tests/test_haproxy.py),
# `nginx`, the reverse proxy in front (tests/test_nginx.py), and `nghttp2-client`, whose
# `nghttp` is an HTTP/2 client of tests/test_http2_clients.py; also h2spec, the HTTP/2
# conformance suite (a Go module, built into tools/.bin/ with the machine's Go).
# Idempotent and silent when everything is already there; as root it runs
# `apt-get update` only when apt does not know the package yet (a fresh machine
# has empty package lists), so a machine that has the lists does not refetch them.
set -euo pipefail

packages=(chromium haproxy nginx nghttp2-client)  # Debian package names
commands=(chromium haproxy nginx nghttp)  # what each package puts on PATH, to tell whether it is there

# h2spec's own version is pinned; it has no go.mod, so Go picks its dependencies' versions.
H2SPEC_VERSION=v2.2.1+incompatible
bin="$(cd "$(dirname "$0")" && pwd)/.bin"
if [ ! -x "$bin/h2spec" ]; then
    echo "install-test-deps: building h2spec $H2SPEC_VERSION"
    mkdir -p "$bin"
    GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION"
fi

missing=()
for i in "${!packages[@]}"; do
    if ! command -v "${commands[$i]}" >/dev/null 2>&1; then
        missing+=("${packages[$i]}")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-test-deps: missing ${missing[*]}; run this script as root (it uses apt-get)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
has_candidate() {
    # "Candidate: (none)" or no output at all: the package lists do not know it.
    apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [^(]'
}
for pkg in "${missing[@]}"; do
    if ! has_candidate "$pkg"; then
        echo "install-test-deps: apt-get update (apt does not know $pkg yet)"
        apt-get update -qq >/dev/null
        break
    fi
done
echo "install-test-deps: installing ${missing[*]}"
log=$(mktemp)
# The tests start nginx and haproxy themselves: their packages must not start the system
# services (policy-rc.d's 101: "action not allowed"), which would take port 80.
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    own_policy=1
fi
trap 'rm -f "$log"; [ -n "$own_policy" ] && rm -f "$policy"' EXIT
# apt's chatter (debconf notes included) is shown only if the install fails.
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi
for i in "${!packages[@]}"; do
    command -v "${commands[$i]}" >/dev/null 2>&1 || {
        echo "install-test-deps: ${packages[$i]} installed but ${commands[$i]} is not on PATH" >&2
        exit 1
    }
done
