#!/usr/bin/env bash
# `make fuzz`: build the fuzz targets of fuzz/ with libFuzzer on the stable toolchain and run
# each for FUZZ_SECONDS (default 60) on its corpus: the seeds kept in fuzz/seeds/TARGET (from
# the tests and the request corpus), and what runs add in fuzz/corpus/TARGET (not kept).
# A crash or a failed property leaves its input in fuzz/artifacts/TARGET/ and fails the run;
# the table at the end gives each target's executions, coverage and corpus.
#   tools/fuzz.sh [PYTHON] [TARGET...]      (FUZZ_SECONDS=N, FUZZ_JOBS=N)
# Coverage is libFuzzer's instrumentation through stable rustc flags (cargo-fuzz sets the
# same ones; only its sanitizers need nightly); `--cfg fuzzing` gives swordfish's `fuzzing`
# module, the parsers' way in. The targets link libpython (swordfish's pyo3), found by PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
shift || true
exe=$(tools/find-python "$python")
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(http_head chunked proxy_protocol ws_reader ws_inflate static_files h2_server h2_upgrade)

export PYO3_PYTHON=$exe
libdir=$("$exe" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RUSTFLAGS="--cfg fuzzing -C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=4 \
-C llvm-args=-sanitizer-coverage-inline-8bit-counters -C llvm-args=-sanitizer-coverage-pc-table \
-C llvm-args=-sanitizer-coverage-trace-compares -C debug-assertions -C overflow-checks"
export CARGO_TARGET_DIR=$PWD/target/fuzz
# An explicit --target keeps RUSTFLAGS off the build scripts, which have no libFuzzer.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --locked --quiet --target "$host" --manifest-path fuzz/Cargo.toml "${targets[@]/#/--bin=}"
bin=$CARGO_TARGET_DIR/$host/release

status=0
summary=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t artifacts=fuzz/artifacts/$t/
    mkdir -p "$corpus" "$artifacts" "fuzz/seeds/$t"
    log=$CARGO_TARGET_DIR/$t.log
    echo "fuzz: $t for ${seconds}s"
    if ! "$bin/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
            -rss_limit_mb=2048 -artifact_prefix="$artifacts" "$corpus" "fuzz/seeds/$t" >"$log" 2>&1; then
        status=1
        echo "fuzz: $t FAILED; the input is in $artifacts" >&2
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -20 >&2 || true
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
    summary+=("$(printf '| %s | %s | %s |' "$t" "${runs:-?}" "${cov:-?}")")
done
echo
echo "| target | executions | coverage (libFuzzer: edges, features, corpus) |"
echo "|---|---:|---|"
printf '%s\n' "${summary[@]}"
exit $status
