#!/bin/sh
# Install what rezolus-ue needs on Debian or Ubuntu, as root, into ./.venv.
#   scripts/setup.sh         run-time needs (the agent)
#   scripts/setup.sh --dev   also the test tools: QEMU + virtme-ng (VM tier), perf, man
# Idempotent and quick when everything is already there.
set -eu
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1

say() { echo "setup: $*" >&2; }

# perf is linux-perf on Debian, linux-tools-* on Ubuntu.
perf_pkg=linux-perf
if command -v apt-get >/dev/null 2>&1 && [ -r /etc/os-release ] && grep -qi ubuntu /etc/os-release; then
    perf_pkg="linux-tools-common linux-tools-generic"
fi

# libbpf1 loads the BPF samplers; clang, llvm, bpftool and libbpf-dev build their
# CO-RE objects once (bpf/), on any machine with BTF.
pkgs="ca-certificates libbpf1 $perf_pkg clang llvm libbpf-dev bpftool"
python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs="$pkgs python3-venv python3-pip"
if [ "$dev" = 1 ]; then
    # udev: without it virtme-ng cannot find its virtio-serial ports (output is lost).
    # prometheus: the exporter's test scrapes it with a real server.
    # bpftrace: bench/overhead.py compares our run-queue sampler with a bpftrace script,
    # and the tests run the uprobe transport's bpftrace recipe (docs/kernels.md).
    # trace-cmd: the tests show every consumer the README names working.
    # stress-ng: the tests must pass on a machine kept busy (scripts/stress-test.sh).
    # strace: the tests count an idle application's write syscalls (tests/kernel/test_otel_apps).
    # chromium: `rezolus-ue view`'s pages are tested in a headless browser (tests/test_view*).
    pkgs="$pkgs qemu-system-x86 udev man-db groff-base tmux prometheus bpftrace trace-cmd"
    pkgs="$pkgs stress-ng strace chromium"
fi

missing=""
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        say "missing packages:$missing; rerun as root (sudo $0 $*)"
        exit 1
    fi
    say "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Ubuntu ships bpftool inside linux-tools-*: take what this release has.
    avail=""
    for p in $missing; do
        if apt-cache show "$p" >/dev/null 2>&1; then avail="$avail $p"; else say "no package $p here; skipped"; fi
    done
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $avail >/dev/null
    # The Debian prometheus package starts a server; tests run their own.
    if command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
    fi
fi

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    say "rezolus-ue needs Python >= 3.11; $(python3 --version) found"
    exit 1
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
extra=""
[ "$dev" = 1 ] && extra="[dev,otel]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".$extra" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "Running pip as the 'root' user" >&2 || true
.venv/bin/python -c 'import rezolus_ue, tracefs_tools' || { say "install failed"; exit 1; }
# CO-RE objects for the BPF samplers (built once; without them those samplers say why).
if [ -r /sys/kernel/btf/vmlinux ]; then
    .venv/bin/python -m rezolus_ue.bpf.build >&2 || say "BPF objects not built: BPF samplers unavailable"
fi
# The uprobe transport's stub (kernels without user_events): root's, outside the checkout,
# so nobody but root can change code the kernel probes and the agent runs.
if [ "$(id -u)" = 0 ]; then
    .venv/bin/python -m rezolus_ue.linux.uprobe_stub --install >/dev/null \
        || say "uprobe stub not installed: the uprobe transport is unavailable"
fi
# The README's commands are `sudo rezolus-ue ...`: sudo's secure_path has /usr/local/bin,
# not this checkout's .venv/bin. Link the CLI there (never over someone else's file).
link=/usr/local/bin/rezolus-ue
cli="$(pwd)/.venv/bin/rezolus-ue"
if [ "$(id -u)" = 0 ] && [ -d /usr/local/bin ]; then
    if [ -L "$link" ] || [ ! -e "$link" ]; then
        ln -sfn "$cli" "$link"
        say "ready: rezolus-ue (linked from $link to .venv/bin/rezolus-ue)"
        exit 0
    fi
    say "$link exists and is not our link: left alone; use $cli"
fi
say "ready: .venv/bin/rezolus-ue"
