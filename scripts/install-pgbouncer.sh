#!/usr/bin/env bash
# Install PgBouncer (Debian's `pgbouncer` package) when it is missing. The
# tests of integration/pgbouncer and the deployment benchmark start private
# PgBouncer processes on free loopback ports with their own configuration
# (fencetest.PgBouncer); the package's own service is never used and, if the
# package started it, it is stopped and disabled again. Idempotent; progress
# on stderr. Prints nothing on stdout.
set -euo pipefail
log() { printf '[install-pgbouncer] %s\n' "$*" >&2; }

have() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
if have; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { log "pgbouncer is missing and this user cannot run apt-get (no sudo)"; exit 1; }
  sudo="sudo"
fi
# RUNLEVEL=1 keeps invoke-rc.d from starting the package's service.
install() { $sudo env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends pgbouncer >&2; }
log "installing Debian package pgbouncer"
if ! install; then
  log "apt-get install failed; updating the package lists and retrying"
  $sudo apt-get update -q >&2
  install
fi
# Should the service have been started anyway, stop it: the tests run their own.
if [ -x /etc/init.d/pgbouncer ]; then
  $sudo /etc/init.d/pgbouncer stop >/dev/null 2>&1 || true
fi
have || { log "pgbouncer still not found after installing"; exit 1; }
bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
log "installed: $("$bin" --version 2>&1 | head -n 1)"
