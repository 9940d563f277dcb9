#!/usr/bin/env bash
# Check that each wheel given is manylinux2014 (glibc 2.17) by `auditwheel show`, which
# tools/build-wheels.sh runs on every wheel it builds (auditwheel from PATH).
# Usage: tools/check-wheels.sh WHEEL...
#
# auditwheel's whole report is read before it is searched: piped into `grep -q`, which
# exits at its first match, auditwheel died writing the rest (BrokenPipeError) and, under
# pipefail, a good wheel failed the check in about one run in five.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 WHEEL..." >&2; exit 2; }
for whl in "$@"; do
    if ! report=$(auditwheel show "$whl" 2>&1); then
        printf '%s\n' "$report" >&2
        echo "check-wheels: auditwheel could not read $whl" >&2
        exit 1
    fi
    if [[ $report != *manylinux_2_17* ]]; then
        printf '%s\n' "$report" >&2
        echo "check-wheels: $whl is not manylinux2014" >&2
        exit 1
    fi
done
