#!/usr/bin/env bash
# A CDC environment on loopback, no Docker: PostgreSQL with logical replication, a one-node Kafka broker (KRaft) and
# Kafka Connect with Debezium's PostgreSQL connector, plus the jars of Spark's Kafka source for the project's pyspark.
#
#   scripts/cdc-env.sh install        install what is missing (the jars, PostgreSQL), start nothing
#   scripts/cdc-env.sh start  [DIR]   install what is missing, start what is not running, print `export` lines
#   scripts/cdc-env.sh status [DIR]   what runs (exit 1 when something does not)
#   scripts/cdc-env.sh stop   [DIR]   stop what `start` started
#
#   eval "$(bash scripts/cdc-env.sh start)"
#
# State lives under DIR (default .cdc-env/ in the repository): the database cluster, Kafka's log, the processes' logs
# (DIR/logs) and the ports chosen at the first start (DIR/ports.env, kept afterwards). Jars come from Maven Central
# through Maven (scripts/cdc/pom.xml, checked against scripts/cdc/jars.sha256; downloads cached in ~/.m2) into
# .cdc-env/jars/ of the repository, whatever DIR;
# PostgreSQL is Debian's `postgresql` package (installed with apt-get when missing). Progress goes to stderr, the
# export lines alone to stdout: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE KAFKA_BOOTSTRAP_SERVERS KAFKA_CONNECT_URL
# SPARK_KAFKA_JARS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CMD=${1:-}
DIR=${2:-$ROOT/.cdc-env}
case "$CMD" in install | start | stop | status) ;; *)
    echo "usage: $0 install | start|stop|status [DIR]" >&2
    exit 2
    ;;
esac
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
JARS=$ROOT/.cdc-env/jars
LOGS=$DIR/logs
RUN=$DIR/run
PGDATA=$DIR/pg/data
PGUSER_NAME=cdc
PGDB_NAME=cdc
PGPASSWORD_FILE=$DIR/pg/password

say() { echo "cdc-env: $*" >&2; }
die() {
    say "$*"
    exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"; }

# -- ports: free ones picked at the first start, kept in DIR/ports.env ---------------------------------------------
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ports() {
    if [ ! -f "$DIR/ports.env" ]; then
        {
            echo "PG_PORT=$(free_port)"
            echo "KAFKA_PORT=$(free_port)"
            echo "CONTROLLER_PORT=$(free_port)"
            echo "CONNECT_PORT=$(free_port)"
        } >"$DIR/ports.env.tmp"
        mv "$DIR/ports.env.tmp" "$DIR/ports.env"
    fi
    # shellcheck disable=SC1091
    . "$DIR/ports.env"
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() { # seconds, description, command...
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
    say "$what is up"
}
pid_alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# -- jars ------------------------------------------------------------------------------------------------------
jars() {
    local stamp
    stamp=$(cat "$ROOT/scripts/cdc/pom.xml" "$ROOT/scripts/cdc/jars.sha256" | sha256sum | cut -d' ' -f1)
    if [ -f "$JARS/.stamp" ] && [ "$(cat "$JARS/.stamp")" = "$stamp" ]; then
        return
    fi
    need java "Kafka, Kafka Connect and Debezium run on Java 17 (apt-get install openjdk-17-jdk-headless)"
    need mvn "the jars of Kafka, Debezium and Spark's Kafka source come from Maven Central through Maven (apt-get install maven)"
    say "copying Kafka, Debezium and Spark's Kafka source from Maven Central into $JARS"
    rm -rf "$JARS"
    mkdir -p "$JARS"
    mvn -q -B -f "$ROOT/scripts/cdc/pom.xml" dependency:copy-dependencies@kafka dependency:copy@plugins \
        dependency:copy@spark-kafka -Dcdc.jars="$JARS" >&2
    (cd "$JARS" && sha256sum --quiet -c "$ROOT/scripts/cdc/jars.sha256") >&2 ||
        die "a jar in $JARS does not match scripts/cdc/jars.sha256"
    mkdir -p "$JARS/plugins"
    tar -xzf "$JARS"/plugins/debezium-connector-postgres-*-plugin.tar.gz -C "$JARS/plugins"
    echo "$stamp" >"$JARS/.stamp"
}

# -- PostgreSQL ------------------------------------------------------------------------------------------------
pg_bin() {
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        say "installing Debian's postgresql"
        if [ "$(id -u)" = 0 ]; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2 ||
                { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2; }
        else
            need sudo "PostgreSQL is missing: install Debian's postgresql (apt-get install postgresql)"
            sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
        fi
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
        [ -x "$bin/initdb" ] || die "postgresql did not install (no /usr/lib/postgresql/*/bin/initdb)"
    fi
    echo "$bin"
}
# PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user Debian's package made
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
pg_running() { [ -f "$PGDATA/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }
start_pg() {
    PGBIN=$(pg_bin)
    if [ ! -f "$PGDATA/PG_VERSION" ]; then
        say "creating a PostgreSQL cluster in $PGDATA"
        rm -rf "$DIR/pg"
        mkdir -p "$DIR/pg/run"
        python3 -c 'import secrets; print(secrets.token_hex(16))' >"$PGPASSWORD_FILE"
        chmod 600 "$PGPASSWORD_FILE"
        if [ "$(id -u)" = 0 ]; then
            chown -R postgres "$DIR/pg"
            # postgres must reach DIR/pg through DIR's parents
            local d=$DIR
            while [ "$d" != / ]; do
                runuser -u postgres -- test -x "$d" || die "the postgres user cannot enter $d (chmod o+x it)"
                d=$(dirname "$d")
            done
        fi
        (umask 077 && cp "$PGPASSWORD_FILE" "$DIR/pg/pwfile")
        [ "$(id -u)" != 0 ] || chown postgres "$DIR/pg/pwfile"
        as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
            --pwfile="$DIR/pg/pwfile" -E UTF8 --locale=C.UTF-8 >"$LOGS/initdb.log" 2>&1 ||
            die "initdb failed: $LOGS/initdb.log"
        rm -f "$DIR/pg/pwfile"
        cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$DIR/pg/run'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
fsync = off
EOF
        # host connections: a password; replication connections too (Debezium streams over one)
        echo "host replication all 127.0.0.1/32 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    fi
    if ! pg_running; then
        touch "$LOGS/postgresql.log"
        [ "$(id -u)" != 0 ] || chown postgres "$LOGS/postgresql.log"  # written by the server
        as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$LOGS/postgresql.log" -w -t 60 start >/dev/null ||
            die "PostgreSQL did not start: $LOGS/postgresql.log"
        say "PostgreSQL is up on 127.0.0.1:$PG_PORT"
    fi
    # the role, its database and the publication, each made when missing (a start cut short made some of them)
    local password
    password=$(cat "$PGPASSWORD_FILE")
    pg_sql() { as_pg "$PGBIN/psql" -h "$DIR/pg/run" -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
    if [ -z "$(pg_sql -d postgres -c "SELECT 1 FROM pg_roles WHERE rolname = '$PGUSER_NAME'")" ]; then
        pg_sql -d postgres >/dev/null <<EOF
CREATE ROLE $PGUSER_NAME LOGIN REPLICATION PASSWORD '$password';
EOF
    fi
    if [ -z "$(pg_sql -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$PGDB_NAME'")" ]; then
        pg_sql -d postgres -c "CREATE DATABASE $PGDB_NAME OWNER $PGUSER_NAME" >/dev/null
    fi
    # Debezium's default publication, of every table (creating one FOR ALL TABLES takes a superuser): a connector
    # with the default publication.name uses it, and tables created later are in it
    if [ -z "$(pg_sql -d "$PGDB_NAME" -c "SELECT 1 FROM pg_publication WHERE pubname = 'dbz_publication'")" ]; then
        pg_sql -d "$PGDB_NAME" -c "CREATE PUBLICATION dbz_publication FOR ALL TABLES" >/dev/null
    fi
}
stop_pg() {
    [ -f "$PGDATA/PG_VERSION" ] || return 0
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -n "$PGBIN" ] && pg_running; then
        as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null && say "PostgreSQL stopped"
    fi
}

# -- Kafka broker and Kafka Connect (JVMs on the jars of DIR/jars) ---------------------------------------------
log4j_config() { # file name; logs of the JVM go to DIR/logs/NAME.log
    cat >"$DIR/config/log4j2-$1.properties" <<EOF
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = $LOGS/$1.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.kafkaorg.name = org.apache.kafka
logger.kafkaorg.level = WARN
logger.connect.name = org.apache.kafka.connect
logger.connect.level = INFO
logger.debezium.name = io.debezium
logger.debezium.level = INFO
EOF
}
java_start() { # name, main class, args...
    local name=$1
    shift
    log4j_config "$name"
    # setsid: a process of its own, not killed with the shell that ran `start`
    setsid nohup java -Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$DIR/config/log4j2-$name.properties" -cp "$JARS/kafka/*" "$@" \
        >"$LOGS/$name.out" 2>&1 </dev/null &
    echo $! >"$RUN/$name.pid"
}
start_kafka() {
    if pid_alive kafka; then
        return
    fi
    cat >"$DIR/config/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DIR/kafka-data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
EOF
    if [ ! -f "$DIR/kafka-data/meta.properties" ]; then
        local cluster_id
        cluster_id=$(java -cp "$JARS/kafka/*" -Dlog4j2.configurationFile="$DIR/config/log4j2-kafka.properties" \
            kafka.tools.StorageTool random-uuid 2>>"$LOGS/kafka-storage.log")
        java -cp "$JARS/kafka/*" -Dlog4j2.configurationFile="$DIR/config/log4j2-kafka.properties" \
            kafka.tools.StorageTool format -t "$cluster_id" -c "$DIR/config/server.properties" \
            >>"$LOGS/kafka-storage.log" 2>&1 || die "formatting Kafka's log failed: $LOGS/kafka-storage.log"
    fi
    java_start kafka kafka.Kafka "$DIR/config/server.properties"
    wait_for 90 "Kafka on 127.0.0.1:$KAFKA_PORT" listening "$KAFKA_PORT" ||
        die "Kafka did not start: $LOGS/kafka.log, $LOGS/kafka.out"
}
connect_up() { curl -sf "http://127.0.0.1:$CONNECT_PORT/connector-plugins" 2>/dev/null | grep -q PostgresConnector; }
start_connect() {
    if pid_alive connect; then
        return
    fi
    # offsets committed every 5 s (default 60 s): a crash of Connect redelivers at most the last seconds' events,
    # and a connector whose first offset is not committed yet (it would snapshot again) is exposed only briefly
    cat >"$DIR/config/connect.properties" <<EOF
offset.flush.interval.ms=5000
bootstrap.servers=127.0.0.1:$KAFKA_PORT
group.id=cdc-env-connect
listeners=http://127.0.0.1:$CONNECT_PORT
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
config.storage.topic=connect-configs
offset.storage.topic=connect-offsets
status.storage.topic=connect-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
plugin.path=$JARS/plugins
EOF
    java_start connect org.apache.kafka.connect.cli.ConnectDistributed "$DIR/config/connect.properties"
    wait_for 120 "Kafka Connect on http://127.0.0.1:$CONNECT_PORT with Debezium's PostgreSQL connector" connect_up ||
        die "Kafka Connect did not start: $LOGS/connect.log, $LOGS/connect.out"
}
stop_java() { # name
    pid_alive "$1" || { rm -f "$RUN/$1.pid"; return 0; }
    local pid
    pid=$(cat "$RUN/$1.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$RUN/$1.pid"
    say "$1 stopped"
}

exports() {
    local spark_jars
    spark_jars=$(ls "$JARS"/spark-kafka/*.jar | paste -sd, -)
    cat <<EOF
export PGHOST=127.0.0.1
export PGPORT=$PG_PORT
export PGUSER=$PGUSER_NAME
export PGPASSWORD=$(cat "$PGPASSWORD_FILE")
export PGDATABASE=$PGDB_NAME
export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT
export KAFKA_CONNECT_URL=http://127.0.0.1:$CONNECT_PORT
export SPARK_KAFKA_JARS=$spark_jars
EOF
}

if [ "$CMD" = install ]; then
    jars
    pg_bin >/dev/null
    exit 0
fi
mkdir -p "$LOGS" "$RUN" "$DIR/config"
ports
case "$CMD" in
start)
    need python3 "the script picks free ports with python3"
    need curl "the script asks Kafka Connect's REST API with curl (apt-get install curl)"
    jars
    start_pg
    start_kafka
    start_connect
    exports
    ;;
stop)
    stop_java connect
    stop_java kafka
    stop_pg
    ;;
status)
    rc=0
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -n "$PGBIN" ] && [ -f "$PGDATA/PG_VERSION" ] && pg_running; then
        echo "postgresql: up on 127.0.0.1:$PG_PORT"
    else
        echo "postgresql: down"
        rc=1
    fi
    if pid_alive kafka && listening "$KAFKA_PORT"; then echo "kafka: up on 127.0.0.1:$KAFKA_PORT"; else
        echo "kafka: down"
        rc=1
    fi
    if pid_alive connect && connect_up; then echo "kafka-connect: up on http://127.0.0.1:$CONNECT_PORT"; else
        echo "kafka-connect: down"
        rc=1
    fi
    exit $rc
    ;;
esac
