#!/usr/bin/env bash
# `make wheels`: the wheels users install without Rust, and the sdist, in dist/.
#   - CPython 3.10-3.13 (found with tools/find-python), x86_64, and aarch64 when the
#     Rust standard library for it can be installed here (rustup);
#   - manylinux2014 (glibc 2.17), linked with zig (`maturin --zig`, ziglang from PyPI),
#     not against this machine's newer glibc: a plain build here is manylinux_2_34, which
#     RHEL 8 and Ubuntu 20.04 refuse;
#   - release profile: stripped, no debug information (Cargo.toml);
#   - each wheel checked with `auditwheel show`, its size reported.
# Usage: tools/build-wheels.sh [PYTHON...]   (default: python3.10 ... python3.13)
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(tools/find-python python3.13 || tools/find-python python3)
venv=.venv-wheels
if [ ! -f "$venv/.deps" ] || [ requirements-wheels.txt -nt "$venv/.deps" ]; then
    "$host" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r requirements-wheels.txt
    touch "$venv/.deps"
fi
export PATH="$PWD/$venv/bin:$PATH"

pythons=("$@")
[ ${#pythons[@]} -eq 0 ] && pythons=(python3.10 python3.11 python3.12 python3.13)
interpreters=()
for p in "${pythons[@]}"; do
    exe=$(tools/find-python "$p") || { echo "build-wheels: no $p" >&2; exit 1; }
    interpreters+=(-i "$exe")
done

# WHEEL_ARCHS: which architectures (default both; the smoke test builds x86_64 alone).
targets=(x86_64-unknown-linux-gnu)
if [[ " ${WHEEL_ARCHS:-x86_64 aarch64} " == *" aarch64 "* ]]; then
    if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
            || rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; then
        targets+=(aarch64-unknown-linux-gnu)
    else
        echo "build-wheels: no Rust standard library for aarch64 here (rustup target add failed): x86_64 only"
    fi
fi

rm -rf dist
for target in "${targets[@]}"; do
    echo "build-wheels: $target"
    CARGO_TARGET_DIR=target/wheels maturin build --release --zig --compatibility manylinux2014 \
        --target "$target" "${interpreters[@]}" --out dist --quiet
done
maturin sdist --out dist >/dev/null

tools/check-wheels.sh dist/*.whl
echo "build-wheels: in dist/ (auditwheel: manylinux_2_17 / manylinux2014)"
ls -l dist | awk 'NR > 1 {printf "  %8.1f KiB  %s\n", $5 / 1024, $9}'
