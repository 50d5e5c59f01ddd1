#!/bin/sh
# Run the whole test suite N times in a row (default 3) while stress-ng keeps every CPU
# busy: the tests must not depend on the machine's speed (their waits wait for conditions,
# with deadlines far above normal). Extra arguments go to pytest, as with test.sh.
#   scripts/stress-test.sh            three runs under `stress-ng --cpu <nproc>`
#   RUNS=1 scripts/stress-test.sh -k consume
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh --dev
runs=${RUNS:-3}
stress-ng --cpu "$(nproc)" --timeout 0 --quiet &
hog=$!
trap 'kill $hog 2>/dev/null || true' EXIT INT TERM
i=1
while [ "$i" -le "$runs" ]; do
    echo "stress-test: run $i of $runs, with stress-ng --cpu $(nproc) (pid $hog)" >&2
    start=$(date +%s)
    if ! ./scripts/test.sh "$@"; then
        echo "stress-test: run $i failed after $(( $(date +%s) - start )) s" >&2
        exit 1
    fi
    echo "stress-test: run $i passed in $(( $(date +%s) - start )) s" >&2
    i=$((i + 1))
done
