#!/usr/bin/env bash
# The RSGI suite's tools: wrk and the native hyper reference of the HTTP suite (../http/setup.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/../http/setup.sh"
