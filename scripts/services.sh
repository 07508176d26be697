#!/usr/bin/env bash
# Bring up the services fencekit's tests and demo need, starting only what is
# missing, and print `export` lines for them on stdout (progress goes to
# stderr). Idempotent: run it as often as you like.
#
#   eval "$(scripts/services.sh)"
#
# PostgreSQL: the machine's cluster on 127.0.0.1:5432 (started if stopped).
# MinIO: a pinned server built with `go install`, cached outside the tree in
# $FENCEKIT_CACHE (default ~/.cache/fencekit), data under .services/ (git-ignored).
# Mailpit (SMTP 127.0.0.1:1025, HTTP API 127.0.0.1:8025): pinned, cached and
# started like MinIO.
# Redis (127.0.0.1:6379), MariaDB (127.0.0.1:3306, root without password,
# database test) and NATS with JetStream (127.0.0.1:4222): the machine's, from
# Debian's packages (installed if missing), started if stopped.
set -euo pipefail

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_PIN=${MINIO_VERSION##*-}
CACHE=${FENCEKIT_CACHE:-$HOME/.cache/fencekit}
MINIO_BIN_DIR=$CACHE/bin/minio-$MINIO_PIN
MINIO_BIN=$MINIO_BIN_DIR/minio
MINIO_ADDR=${FENCEKIT_MINIO_ADDR:-127.0.0.1:9900}
MINIO_CONSOLE=${FENCEKIT_MINIO_CONSOLE:-127.0.0.1:9901}
MINIO_USER=${FENCEKIT_MINIO_USER:-fencekit}
MINIO_PASS=${FENCEKIT_MINIO_PASSWORD:-fencekit-secret}
PG_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}

top=$(cd "$(dirname "$0")/.." && pwd)
state=$top/.services
mkdir -p "$state"
log() { printf '[services] %s\n' "$*" >&2; }

# One run at a time per machine (tests, helpers and worktrees call this
# script concurrently): the services are the machine's, and two first runs
# would each build MinIO and race to start it on the same port. Every
# server started below gets 9>&-, so that none keeps the lock after exit.
mkdir -p "$CACHE"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/services.lock"
  flock 9
fi

# --- PostgreSQL -------------------------------------------------------------
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 -t 2 >/dev/null 2>&1; }
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    ver=$(ls /etc/postgresql | sort -V | tail -n 1)
    log "starting PostgreSQL $ver"
    9>&- pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 || true
  fi
  for _ in $(seq 1 60); do pg_up && break; sleep 0.5; done
  pg_up || { log "PostgreSQL is not reachable on 127.0.0.1:5432"; exit 1; }
fi
if ! psql "$PG_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; then
  # The URL's database may be missing on a fresh cluster: create it.
  db=$(printf '%s' "$PG_URL" | sed -E 's#^[^/]*//[^/]*/([^?]*).*#\1#')
  admin=$(printf '%s' "$PG_URL" | sed -E "s#^([^/]*//[^/]*/)[^?]*#\1postgres#")
  log "creating database $db"
  psql "$admin" -Atqc "CREATE DATABASE \"$db\"" >&2 || true
  psql "$PG_URL" -Atqc 'SELECT 1' >/dev/null || { log "cannot use $PG_URL"; exit 1; }
fi
log "PostgreSQL ready"

# --- MinIO ------------------------------------------------------------------
minio_live() { curl -fsS -m 2 "http://$MINIO_ADDR/minio/health/live" >/dev/null 2>&1; }
# Write quorum: a MinIO whose data directory was removed still answers
# "live" but refuses every write; it is stopped and started again here.
minio_writable() { curl -fsS -m 2 "http://$MINIO_ADDR/minio/health/cluster" >/dev/null 2>&1; }
if minio_live && ! minio_writable; then
  port=${MINIO_ADDR##*:}
  pid=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
  log "MinIO on $MINIO_ADDR answers but cannot write (no write quorum); stopping it (pid ${pid:-unknown})"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  for _ in $(seq 1 40); do minio_live || break; sleep 0.25; done
  minio_live && { log "MinIO on $MINIO_ADDR cannot write and could not be stopped"; exit 1; }
fi
if ! minio_live; then
  if [ ! -x "$MINIO_BIN" ]; then
    log "installing MinIO $MINIO_VERSION into $MINIO_BIN_DIR (first time takes a few minutes)"
    mkdir -p "$MINIO_BIN_DIR"
    (cd "$state" && GOBIN=$MINIO_BIN_DIR GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION") >&2
  fi
  mkdir -p "$state/minio-data"
  log "starting MinIO on $MINIO_ADDR"
  MINIO_ROOT_USER=$MINIO_USER MINIO_ROOT_PASSWORD=$MINIO_PASS MINIO_BROWSER=off \
    MINIO_UPDATE=off MINIO_CI_CD=1 \
    9>&- nohup setsid "$MINIO_BIN" server --quiet --address "$MINIO_ADDR" --console-address "$MINIO_CONSOLE" \
    "$state/minio-data" >"$state/minio.log" 2>&1 </dev/null &
  echo $! >"$state/minio.pid"
  for _ in $(seq 1 120); do minio_live && break; sleep 0.25; done
  for _ in $(seq 1 40); do minio_writable && break; sleep 0.25; done
  minio_writable || { log "MinIO did not come up writable; see $state/minio.log"; tail -20 "$state/minio.log" >&2; exit 1; }
fi
log "MinIO ready on $MINIO_ADDR"

# --- Redis, MariaDB, NATS (the stores guards/redisguard, mysqlguard, natsguard
# are tested against) ---------------------------------------------------------
REDIS_ADDR=${TEST_REDIS_ADDR:-127.0.0.1:6379}
MYSQL_DSN=${TEST_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/test}
NATS_URL=${TEST_NATS_URL:-nats://127.0.0.1:4222}
apt_installed=
need_pkg() { # need_pkg BINARY PACKAGE: install PACKAGE when BINARY is missing
  command -v "$1" >/dev/null 2>&1 || [ -x "$1" ] && return 0
  if [ -z "$apt_installed" ]; then
    log "apt-get update"; DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2; apt_installed=1
  fi
  log "installing $2"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
tcp_up() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
wait_for() { # wait_for NAME CHECK...
  local name=$1; shift
  for _ in $(seq 1 120); do "$@" && return 0; sleep 0.25; done
  log "$name did not come up"; return 1
}

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
need_pkg redis-cli redis-server
if ! redis_up; then
  log "starting Redis on 127.0.0.1:6379"
  mkdir -p /var/lib/redis /var/log/redis
  9>&- redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >&2
  wait_for Redis redis_up || exit 1
fi
log "Redis ready on 127.0.0.1:6379"

mariadb_up() { mariadb-admin --protocol=tcp -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1 || mariadb-admin ping >/dev/null 2>&1; }
need_pkg /usr/sbin/mariadbd mariadb-server
if ! mariadb_up; then
  log "starting MariaDB on 127.0.0.1:3306"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  9>&- start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >&2
  wait_for MariaDB mariadb_up || exit 1
fi
if ! mariadb --protocol=tcp -h 127.0.0.1 -P 3306 -uroot -e 'SELECT 1' test >/dev/null 2>&1; then
  # A fresh Debian install: root logs in through the socket only, and there is
  # no database test. Let root in over loopback TCP without a password.
  log "MariaDB: database test, root over 127.0.0.1"
  mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS test;
    CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" >&2
fi
log "MariaDB ready on 127.0.0.1:3306"

need_pkg /usr/sbin/nats-server nats-server
if ! tcp_up 4222; then
  log "starting NATS (JetStream) on 127.0.0.1:4222"
  mkdir -p /var/lib/nats-server
  9>&- start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log >&2
  wait_for NATS tcp_up 4222 || exit 1
fi
log "NATS ready on 127.0.0.1:4222"

# --- Mailpit (the SMTP server of package effects' tests) ---------------------
# A pinned release built with `go install`, cached like MinIO; SMTP and its
# HTTP API (messages read back by the tests) on loopback.
MAILPIT_VERSION=v1.33.1
MAILPIT_BIN=$CACHE/bin/mailpit-$MAILPIT_VERSION/mailpit
MAILPIT_SMTP=${FENCEKIT_MAILPIT_SMTP:-127.0.0.1:1025}
MAILPIT_HTTP=${FENCEKIT_MAILPIT_HTTP:-127.0.0.1:8025}
mailpit_live() { curl -fsS -m 2 "http://$MAILPIT_HTTP/api/v1/info" >/dev/null 2>&1; }
if ! mailpit_live; then
  if [ ! -x "$MAILPIT_BIN" ]; then
    log "installing Mailpit $MAILPIT_VERSION into $(dirname "$MAILPIT_BIN")"
    mkdir -p "$(dirname "$MAILPIT_BIN")"
    (cd "$state" && GOBIN=$(dirname "$MAILPIT_BIN") GOFLAGS=-mod=mod go install "github.com/axllent/mailpit@$MAILPIT_VERSION") >&2
  fi
  log "starting Mailpit on $MAILPIT_SMTP (SMTP) and $MAILPIT_HTTP (API)"
  9>&- nohup setsid "$MAILPIT_BIN" --smtp "$MAILPIT_SMTP" --listen "$MAILPIT_HTTP" --smtp-auth-accept-any --smtp-auth-allow-insecure \
    >"$state/mailpit.log" 2>&1 </dev/null &
  echo $! >"$state/mailpit.pid"
  wait_for Mailpit mailpit_live || exit 1
fi
log "Mailpit ready on $MAILPIT_SMTP"

cat <<EOT
export TEST_DATABASE_URL='$PG_URL'
export TEST_MINIO_ENDPOINT='$MINIO_ADDR'
export TEST_MINIO_ACCESS_KEY='$MINIO_USER'
export TEST_MINIO_SECRET_KEY='$MINIO_PASS'
export TEST_REDIS_ADDR='$REDIS_ADDR'
export TEST_MYSQL_DSN='$MYSQL_DSN'
export TEST_NATS_URL='$NATS_URL'
export TEST_SMTP_ADDR='$MAILPIT_SMTP'
export TEST_MAILPIT_API='http://$MAILPIT_HTTP'
EOT
