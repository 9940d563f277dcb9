#!/usr/bin/env bash
# `make wheel-smoke` (run by CI): build the wheel for one interpreter, install it into a
# fresh virtualenv whose PATH has no cargo or rustc, and use it as a user would: the loop,
# then `swordfish serve` answering a request.
# Usage: tools/wheel-smoke.sh [PYTHON]   (default python3.13)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3.13}
exe=$(tools/find-python "$python")
WHEEL_ARCHS=x86_64 tools/build-wheels.sh "$python" >/dev/null
tag=$("$exe" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
whl=$(ls dist/swordfish-*-"$tag"-*manylinux*x86_64*.whl | head -1)

dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
"$exe" -m venv "$dir/venv"
# PATH: the venv, then the system's own directories; no ~/.cargo/bin.
clean_path="$dir/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if PATH=$clean_path command -v cargo >/dev/null || PATH=$clean_path command -v rustc >/dev/null; then
    echo "wheel-smoke: cargo or rustc is on the clean PATH" >&2
    exit 1
fi
env -i HOME="$dir" PATH="$clean_path" "$dir/venv/bin/pip" install --quiet --no-index "$whl"

cd "$dir"
env -i HOME="$dir" PATH="$clean_path" python -c '
import asyncio, swordfish
async def main():
    await asyncio.sleep(0.01)
    return asyncio.get_running_loop()
loop = swordfish.run(main())
assert type(loop).__module__.startswith("swordfish"), type(loop)
print("wheel-smoke: loop ok")
'
cat > app.py <<'PY'
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello from the wheel"})
PY
env -i HOME="$dir" PATH="$clean_path" swordfish serve app:app --port 0 >server.log 2>&1 &
server=$!
for _ in $(seq 100); do
    grep -q "serving on" server.log && break
    sleep 0.1
done
port=$(sed -n 's/.*serving on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' server.log | head -1)
[ -n "$port" ] || { cat server.log >&2; exit 1; }
body=$(env -i PATH="$clean_path" python -c "
import urllib.request
print(urllib.request.urlopen('http://127.0.0.1:$port/').read().decode())")
[ "$body" = "hello from the wheel" ] || { echo "wheel-smoke: got $body" >&2; cat server.log >&2; exit 1; }
echo "wheel-smoke: swordfish serve ok ($whl)"
