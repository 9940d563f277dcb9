#!/usr/bin/env bash
# Create benchmarks/.venv-<major.minor> for PYTHON_EXE and install the pinned
# peers from requirements.txt. Idempotent: does nothing while the stamp file
# is newer than requirements.txt. Prints the venv's python path on stdout.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 PYTHON_EXE" >&2
    exit 2
fi
py=$1
here=$(cd "$(dirname "$0")" && pwd)
tag=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=$here/.venv-$tag
stamp=$venv/.bench-deps
req=$here/requirements.txt

if [ -f "$stamp" ] && [ "$stamp" -nt "$req" ] && [ -x "$venv/bin/python" ]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "setup.sh: creating $venv with $py" >&2
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
touch "$stamp"
echo "$venv/bin/python"
