#!/usr/bin/env bash
# Install Autobahn|Testsuite (wstest) on Python 2.7 into tools/autobahn/.py27/lib, the pins of
# requirements-py27.txt, with the tools of bootstrap-py27.txt in tools/autobahn/.py27/tools.
#
#   tools/autobahn/install-py27.sh [PYTHON3]      (PY27=/path/to/python2.7 to choose the 2.7)
#
# PYTHON3 (default python3) only needs pip: it fetches the bootstrap wheels, so nothing of
# Python 2.7's own installation is used or changed beyond the interpreter. A stamp records
# what was installed; run again with the same interpreter and pins it does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
py3=${1:-python3}
py27=${PY27:-$("$here/../find-python" python2.7)}
dest=$here/.py27
stamp=$dest/.installed

if ! "$py27" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
    echo "install-py27: $py27 is not a working Python 2.7 (set PY27)" >&2
    exit 1
fi

want=$( { echo "$py27"; cat "$here/bootstrap-py27.txt" "$here/requirements-py27.txt"; } \
        | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

echo "install-py27: installing wstest for $py27 into $dest"
# Start clean: the stamp is written last, so anything here without it is a broken install.
rm -rf "$dest"
mkdir -p "$dest/wheels"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_PYTHON_VERSION_WARNING=1

# Python 2.7's bundled pip may be missing or too old, so take the bootstrap wheels from a
# Python 3 pip, then install them with pip run straight out of its own wheel.
"$py3" -m pip download --quiet --no-deps --only-binary :all: --python-version 2.7 \
    -r "$here/bootstrap-py27.txt" -d "$dest/wheels"
pip_wheel=$(ls "$dest"/wheels/pip-*.whl)
"$py27" "$pip_wheel/pip" install --quiet --no-index --find-links "$dest/wheels" \
    --target "$dest/tools" -r "$here/bootstrap-py27.txt"

# No build isolation: it would fetch unpinned build tools (Cython for wsaccel, which its
# sdist does not need); the sdists build with the pinned setuptools and wheel instead.
PYTHONPATH=$dest/tools "$py27" -m pip install --quiet --no-build-isolation \
    --target "$dest/lib" -r "$here/requirements-py27.txt"

PYTHONPATH=$dest/lib "$py27" "$here/wstest27.py" --autobahnversion >/dev/null
echo "$want" > "$stamp"
echo "install-py27: done"
