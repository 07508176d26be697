#!/usr/bin/env bash
# Install what the Patroni harness (integration/ha) needs when it is missing:
# Debian's patroni, etcd-server (etcd 3.4) and haproxy packages, next to the
# PostgreSQL 15 server the other tests use. Idempotent; progress on stderr.
#
# The packages' own services are not started: the harness runs private etcd
# and Patroni processes on loopback ports with data under a temporary
# directory, and stops them itself. While installing, a temporary
# policy-rc.d (only if none exists) keeps the maintainer scripts from
# starting etcd or haproxy on their default ports.
set -euo pipefail
log() { printf '[install-ha] %s\n' "$*" >&2; }

have() {
  command -v patroni >/dev/null 2>&1 && command -v patronictl >/dev/null 2>&1 &&
    { command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; } &&
    command -v haproxy >/dev/null 2>&1
}
if have; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { log "patroni/etcd/haproxy missing and this user cannot run apt-get (no sudo)"; exit 1; }
  sudo="sudo"
fi
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, scripts/install-ha.sh: no service starts while installing\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
pkgs=(patroni etcd-server etcd-client haproxy)
log "installing Debian packages ${pkgs[*]}"
install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2; }
if ! install; then
  log "apt-get install failed; updating the package lists and retrying"
  $sudo apt-get update -q >&2
  install
fi
# Debian starts nothing without systemd here, but make sure no packaged
# instance is left running on the default ports.
for svc in etcd haproxy; do
  if command -v service >/dev/null 2>&1; then $sudo service "$svc" stop >/dev/null 2>&1 || true; fi
done
have || { log "patroni, etcd or haproxy still missing after installing"; exit 1; }
log "installed: patroni $(patroni --version 2>&1 | awk '{print $2}'), etcd $(etcd --version 2>&1 | awk '/etcd Version/{print $3}'), $(haproxy -v 2>&1 | head -n 1)"
