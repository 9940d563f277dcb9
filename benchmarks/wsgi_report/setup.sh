#!/usr/bin/env bash
# Build the report's load client, http-vu, from the HTTP suite's native package
# (../http/native, its own target/) with cargo (../cargo_build.sh); cheap when nothing
# changed. run.py calls it.
# The Python peers come from ../requirements.txt (../setup.sh, `make setup`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../cargo_build.sh" wsgi_report/setup.sh http-vu "$here/../http/native" --bin http-vu
