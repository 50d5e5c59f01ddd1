#!/bin/sh
# Run every test: lint, unit, host-kernel and, in a VM, the user_events kernel tier.
# The VM tier uses REZOLUS_UE_TEST_KERNEL (default: ../shared/vmkernel/bzImage if present).
# Extra arguments go to pytest, e.g. scripts/test.sh -k user_events
set -eu
cd "$(dirname "$0")/.."
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
exec .venv/bin/python -m pytest "$@"
