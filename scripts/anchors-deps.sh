#!/usr/bin/env bash
# anchors-deps.sh: the PostgreSQL 15 server the DBOS anchor benchmark (bench/anchors) runs against.
#
#   scripts/anchors-deps.sh start    install the server if missing, create the cluster once, start it,
#                                    create the database, print the DSN (the last line of output)
#   scripts/anchors-deps.sh dsn      print the DSN of the cluster (it need not be running)
#   scripts/anchors-deps.sh status   exit 0 when the cluster is running
#   scripts/anchors-deps.sh stop     stop the cluster (its data directory is kept)
#   scripts/anchors-deps.sh destroy  stop the cluster and remove its data directory
#   scripts/anchors-deps.sh bench [FLAGS]
#                                    start, then run the harness against this cluster:
#                                    (cd bench/anchors && go run ./dbos -pg DSN FLAGS), e.g.
#                                    bench -backend both -out ../../bench-results/anchors.json
#
# Every command is idempotent. The cluster is made by initdb with its upstream defaults
# (shared_buffers 128MB, fsync on, synchronous_commit on, wal_level replica, max_connections 100),
# as a user who installs PostgreSQL and starts it would have it; the only settings given are where
# it listens (127.0.0.1 and a socket in its own directory, port ANCHORS_PG_PORT) and trust
# authentication on loopback, so no password is needed. Run as root, the server runs as the
# postgres user the Debian package creates, since PostgreSQL refuses to run as root.
#
# Environment: ANCHORS_PGDATA (default /var/tmp/flow-anchors-pg), ANCHORS_PG_PORT (default 55432,
# or the next free one when that is taken by something else), ANCHORS_PG_DB (default dbos_bench).
set -euo pipefail

PGDATA="${ANCHORS_PGDATA:-/var/tmp/flow-anchors-pg}"
DB="${ANCHORS_PG_DB:-dbos_bench}"
PGBIN="/usr/lib/postgresql/15/bin"
PORTFILE="$PGDATA/anchors.port"
LOG="$PGDATA/server.log"

log() { echo "anchors-deps: $*" >&2; }

# as_pg runs a command as the user that owns the cluster.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

install_server() {
	if [ -x "$PGBIN/postgres" ] && [ -x "$PGBIN/initdb" ]; then
		return
	fi
	if [ "$(id -u)" != 0 ]; then
		log "PostgreSQL 15 server is not installed and this is not root: apt-get install postgresql-15"
		exit 1
	fi
	log "installing postgresql-15"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
}

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

choose_port() {
	local p="${ANCHORS_PG_PORT:-55432}"
	while port_in_use "$p"; do
		p=$((p + 1))
	done
	echo "$p"
}

port() {
	if [ -f "$PORTFILE" ]; then
		cat "$PORTFILE"
	else
		echo "${ANCHORS_PG_PORT:-55432}"
	fi
}

dsn() {
	echo "postgres://postgres@127.0.0.1:$(port)/$DB?sslmode=disable"
}

running() {
	[ -f "$PGDATA/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

init_cluster() {
	if [ -f "$PGDATA/PG_VERSION" ]; then
		return
	fi
	log "creating cluster in $PGDATA"
	mkdir -p "$PGDATA"
	if [ "$(id -u)" = 0 ]; then
		chown postgres:postgres "$PGDATA"
	fi
	chmod 700 "$PGDATA"
	as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
	choose_port | as_pg tee "$PORTFILE" >/dev/null
}

start() {
	install_server
	init_cluster
	if ! running; then
		local p
		p="$(port)"
		if port_in_use "$p"; then
			p="$(choose_port)"
			echo "$p" | as_pg tee "$PORTFILE" >/dev/null
		fi
		log "starting PostgreSQL on 127.0.0.1:$p"
		as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$LOG" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $p -k $PGDATA" start >/dev/null
	fi
	local psql=(as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$(port)" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1)
	if [ -z "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]; then
		"${psql[@]}" -c "CREATE DATABASE $DB" >/dev/null
	fi
	dsn
}

stop() {
	if running; then
		as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
		log "stopped"
	fi
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
dsn) dsn ;;
status) running ;;
destroy)
	stop
	rm -rf "$PGDATA"
	;;
bench)
	shift
	pgdsn="$(start)"
	cd "$(dirname "$0")/../bench/anchors"
	exec go run ./dbos -pg "$pgdsn" "$@"
	;;
*)
	echo "usage: $0 start|stop|status|dsn|destroy|bench [harness flags]" >&2
	exit 2
	;;
esac
