#!/usr/bin/env bash
# One-shot set-up for a fresh Debian/Ubuntu machine: system packages for bcc and the real servers the tests
# start (prometheus, with promtool) (when root),
# kernel header links for bcc's tc programs, tracefs, then the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

# prometheus, prometheus-alertmanager: the tests run the real servers on loopback (the packages also enable
# their own systemd units where systemd runs; the tests start their own on free ports).
# openssh-client: ssh-keygen signs and verifies approvals (docs/SECURITY.md).
# slurmctld, slurmd, slurm-client, munge: the tests start a one-node Slurm on loopback (docs/SLURM.md);
# the packages' own services are stopped and disabled below, nothing of theirs runs at boot.
DEB_PACKAGES=(python3-venv python3-bpfcc bpfcc-tools python3-pyroute2 linux-headers-amd64 iproute2 prometheus prometheus-alertmanager openssh-client chromium poppler-utils victoria-metrics slurmctld slurmd slurm-client munge)
SLURM_SERVICES=(slurmctld slurmd munge)

install_debian_packages() {
    local missing=()
    for pkg in "${DEB_PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # linux-headers-amd64 only exists on Debian amd64; do not fail the whole set-up without it.
    if ! apt-get install -y -qq "${missing[@]}" >/dev/null; then
        log "some packages failed; retrying without kernel headers"
        local rest=()
        for pkg in "${missing[@]}"; do [ "$pkg" = linux-headers-amd64 ] || rest+=("$pkg"); done
        apt-get install -y -qq "${rest[@]}" >/dev/null || log "WARNING: Debian packages not installed; eBPF features unavailable"
    fi
}

disable_slurm_services() {
    # The tests start munged, slurmctld and slurmd themselves (tests/slurm_cluster.py); the packages' units
    # would otherwise hold the default ports and a host-wide munge key.
    command -v systemctl >/dev/null 2>&1 || return 0
    local svc
    for svc in "${SLURM_SERVICES[@]}"; do
        systemctl disable --now "$svc" >/dev/null 2>&1 || true
    done
}

link_kernel_headers() {
    # bcc compiles against /lib/modules/$(uname -r)/build; the running kernel ships none, the Debian headers work.
    local mod="/lib/modules/$(uname -r)"
    local hdr common
    hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
    common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$hdr" ] || return 0
    mkdir -p "$mod"
    [ -e "$mod/build" ] || ln -s "$hdr" "$mod/build"
    [ -e "$mod/source" ] || ln -s "${common:-$hdr}" "$mod/source"
}

mount_tracefs() {
    if [ -d /sys/kernel/tracing ] && [ ! -e /sys/kernel/tracing/events ]; then
        mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || log "could not mount tracefs"
    fi
}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    install_debian_packages
    disable_slurm_services
    link_kernel_headers
    mount_tracefs
fi

if [ ! -x .venv/bin/python ]; then
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
        log "creating .venv from Debian's python (system site packages: bcc, pyroute2)"
        /usr/bin/python3 -m venv --system-site-packages .venv
    else
        log "creating .venv from $(command -v python3)"
        python3 -m venv .venv
    fi
fi
log "installing Python packages"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# the dev extra includes nvidia-nccl-cu13 (a 207 MB wheel): the real libnccl.so.2 the rank timing tests probe
.venv/bin/python -m pip install -q -e '.[dev]'
log "done"
