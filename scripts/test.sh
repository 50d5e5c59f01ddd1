#!/bin/sh
# Run every test: lint, unit, host-kernel and, in a VM beside them, the user_events tier.
# The VM tier uses REZOLUS_UE_TEST_KERNEL (default: ../shared/vmkernel/bzImage if present).
#   scripts/test.sh                   everything (CI runs this)
#   scripts/test.sh --quick           lint and the tests that need no root and no kernel
#                                     feature: the edit-test loop, in about a minute
#   scripts/test.sh -k user_events    extra arguments go to pytest
set -eu
cd "$(dirname "$0")/.."
quick=""
if [ "${1:-}" = "--quick" ]; then
    shift
    quick="not host and not live and not uprobe and not kernel"
fi
./scripts/setup.sh --dev
# The tools setup.sh installed into .venv/bin (virtme-ng's vng and virtme-run, ruff, the
# installed CLI) must be found by name by every child, the VM's shell included: nothing
# may depend on a PATH entry this script did not set.
PATH="$(pwd)/.venv/bin:$PATH"
export PATH
if [ -z "${REZOLUS_UE_TEST_KERNEL:-}" ] && [ -f ../shared/vmkernel/bzImage ]; then
    REZOLUS_UE_TEST_KERNEL=$(realpath ../shared/vmkernel/bzImage)
fi
export REZOLUS_UE_TEST_KERNEL="${REZOLUS_UE_TEST_KERNEL:-}"
.venv/bin/ruff check .
if [ -n "$quick" ]; then
    exec .venv/bin/python -m pytest -m "$quick" "$@"
fi
exec .venv/bin/python -m pytest "$@"
