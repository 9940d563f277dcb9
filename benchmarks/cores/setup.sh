#!/usr/bin/env bash
# The multi-core suite's tools: wrk and the native helpers of the HTTP suite (../http/setup.sh)
# and the report's virtual-user client (../wsgi_report/setup.sh). swordfish comes from
# ../../python when it is built there, else from the benchmark venv, where a wheel from
# `make wheels` can be installed on a machine without Rust:
#   .venv-3.12/bin/python -m pip install ../dist/swordfish-*-cp312-*.whl
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/../http/setup.sh"
"$here/../wsgi_report/setup.sh"
