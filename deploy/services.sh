#!/usr/bin/env bash
# `make services`: install (when missing) and start every service the tests talk to, on loopback:
#   PostgreSQL  127.0.0.1:5432  trust auth for local TCP connections, database `test`
#   Redis       127.0.0.1:6379  no persistence
#   OpenSearch  127.0.0.1:9200  the minimal distribution plus the k-NN plugin, security off
#   Keycloak    127.0.0.1:8180  dev mode (start-dev), realm `ki` imported from deploy/keycloak/realm-ki.json
# Idempotent: when everything answers, it returns in about a second.
#
# Debian's packages bring PostgreSQL and Redis; OpenSearch comes from Maven Central by its
# coordinates and is unpacked once under $KI_SERVICES_CACHE (default ~/.cache/ki-services,
# /var/cache/ki-services as root), outside the repository. The plugin published there carries no native libraries, so only the
# `lucene` k-NN engine (our default) works on this node.
#
# Environment: KI_OPENSEARCH_VERSION (2.19.1), KI_OPENSEARCH_HEAP (1g), KI_KEYCLOAK_VERSION (26.7.3),
# KI_KEYCLOAK_HEAP (512m), KI_SERVICES_CACHE, KI_SKIP_OPENSEARCH=1 (PostgreSQL and Redis only),
# KI_SKIP_KEYCLOAK=1. Exit status 3: OpenSearch could not be fetched or started (PostgreSQL and
# Redis are up); 4: Keycloak could not (the others are up); any other non-zero: PostgreSQL or Redis.
set -euo pipefail

OPENSEARCH_VERSION="${KI_OPENSEARCH_VERSION:-2.19.1}"
KNN_VERSION="${OPENSEARCH_VERSION}.0"
HEAP="${KI_OPENSEARCH_HEAP:-1g}"
# As root the node runs as a system user, which cannot enter /root: the cache then lives in /var/cache.
if [ "$(id -u)" = 0 ]; then DEFAULT_CACHE=/var/cache/ki-services; else DEFAULT_CACHE="$HOME/.cache/ki-services"; fi
CACHE="${KI_SERVICES_CACHE:-$DEFAULT_CACHE}"
OS_HOME="$CACHE/opensearch-$OPENSEARCH_VERSION"
OS_URL="http://127.0.0.1:9200"

# The minimal distribution bundles no JDK: 2.x runs on the machine's Java 17, 3.x needs Java 21+.
os_java_home() {
    if [ -n "${KI_OPENSEARCH_JAVA_HOME:-}" ]; then echo "$KI_OPENSEARCH_JAVA_HOME"; return; fi
    case "$OPENSEARCH_VERSION" in
        2.*) dirname "$(dirname "$(readlink -f "$(command -v java)")")" ;;
        *) ls -d /usr/lib/jvm/temurin-25-jdk* 2>/dev/null | head -1 ;;
    esac
}

say() { echo "services: $*"; }

port_open() { python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()" "$1" 2>/dev/null; }

apt_updated=0
apt_install() {
    if [ "$apt_updated" = 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ------------------------------------------------------------------ PostgreSQL

pg_version() { ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1; }

pg_ready() { psql -h 127.0.0.1 -U postgres -d test -tAc "select 1" >/dev/null 2>&1; }

start_postgresql() {
    if pg_ready; then return; fi
    if [ -z "$(pg_version)" ] || [ ! -x "/usr/lib/postgresql/$(pg_version)/bin/postgres" ]; then
        apt_install postgresql
    fi
    local version; version="$(pg_version)"
    if [ ! -d "/etc/postgresql/$version/main" ]; then
        pg_createcluster "$version" main >/dev/null
    fi
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    if ! grep -q "^# ki: trust" "$hba"; then
        # Test connections from this machine only; put first so they win over the defaults.
        local tmp; tmp="$(mktemp)"
        { echo "# ki: trust for local test connections (make services)"
          echo "host all all 127.0.0.1/32 trust"
          echo "host all all ::1/128 trust"
          cat "$hba"; } >"$tmp"
        cat "$tmp" >"$hba"; rm -f "$tmp"
        if port_open 5432; then pg_ctlcluster "$version" main reload; fi
    fi
    if ! port_open 5432; then
        say "starting PostgreSQL $version"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start
    fi
    for _ in $(seq 1 30); do
        if psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1" >/dev/null 2>&1; then break; fi
        sleep 1
    done
    if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1" >/dev/null 2>&1; then
        say "PostgreSQL did not come up on 127.0.0.1:5432" >&2; return 1
    fi
    if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname = 'test'")" != 1 ]; then
        psql -h 127.0.0.1 -U postgres -d postgres -qc "create database test" >/dev/null
    fi
    pg_ready
}

# ----------------------------------------------------------------------- Redis

redis_ready() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

start_redis() {
    # The binary even when a Redis answers already: the production smoke test starts a private one to restart.
    if ! command -v redis-server >/dev/null; then apt_install redis-server; fi
    if redis_ready; then return; fi
    say "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
    for _ in $(seq 1 20); do redis_ready && return; sleep 0.5; done
    say "Redis did not come up on 127.0.0.1:6379" >&2; return 1
}

# ------------------------------------------------------------------ OpenSearch

os_health() { curl -fsS "$OS_URL/_cluster/health?wait_for_status=yellow&timeout=${1:-1s}" 2>/dev/null | grep -Eq '"status":"(green|yellow)"'; }

maven_file() {  # group artifact version [packaging] -> path of the file in the local Maven repository
    local group="$1" artifact="$2" version="$3" packaging="${4:-zip}"
    local path="$HOME/.m2/repository/${group//.//}/$artifact/$version/$artifact-$version.$packaging"
    if [ ! -s "$path" ]; then
        say "fetching $group:$artifact:$version:$packaging from Maven Central" >&2
        mvn -q -B -Dstyle.color=never dependency:get -Dtransitive=false -Dartifact="$group:$artifact:$version:$packaging" >&2
    fi
    echo "$path"
}

# The minimal distribution has no lang-painless (which the k-NN plugin extends), no
# analysis-common (the `german` analyzer) and no reindex (`_delete_by_query`). Maven Central publishes both only as jars (modules of
# the full distribution; the plugin tool refuses to install a module): assemble each module
# directory from its jars of exactly the node's version, with a descriptor.
#   assemble_module NAME ARTIFACT CLASSNAME EXTENDED_PLUGINS JAR_ARTIFACT_IDS -> the module directory
assemble_module() {
    local name="$1" artifact="$2" classname="$3" extended="$4" artifacts="$5"
    local build="$CACHE/build/$name-$OPENSEARCH_VERSION"
    if [ -e "$build/module/.complete" ]; then echo "$build/module"; return; fi
    say "assembling the $name module $OPENSEARCH_VERSION from its Maven Central jars" >&2
    rm -rf "$build"; mkdir -p "$build/module"
    cat >"$build/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ki.services</groupId><artifactId>$name-module</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.opensearch.plugin</groupId><artifactId>$artifact</artifactId>
      <version>$OPENSEARCH_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
    (cd "$build" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DoutputDirectory="$build/module" \
        -DincludeArtifactIds="$artifacts") >&2 || return 1
    cat >"$build/module/plugin-descriptor.properties" <<PROPS
description=$name (assembled by deploy/services.sh from Maven Central)
version=$OPENSEARCH_VERSION
name=$name
classname=$classname
java.version=11
opensearch.version=$OPENSEARCH_VERSION
extended.plugins=$extended
has.native.controller=false
PROPS
    touch "$build/module/.complete"
    echo "$build/module"
}

install_module() {  # NAME ARTIFACT CLASSNAME EXTENDED_PLUGINS JAR_ARTIFACT_IDS [POLICY]
    local dir
    dir="$(assemble_module "$1" "$2" "$3" "$4" "$5")" || return 1
    mkdir -p "$OS_HOME/modules/$1"
    cp "$dir"/*.jar "$dir/plugin-descriptor.properties" "$OS_HOME/modules/$1/" || return 1
    if [ -n "${6:-}" ]; then printf '%s\n' "$6" >"$OS_HOME/modules/$1/plugin-security.policy"; fi
}

install_opensearch() {
    if [ -e "$OS_HOME/.ki-installed" ]; then return; fi
    command -v mvn >/dev/null || { say "mvn is missing (needed to fetch OpenSearch)" >&2; return 1; }
    command -v unzip >/dev/null || apt_install unzip
    command -v curl >/dev/null || apt_install curl
    local dist plugin
    # (errexit does not hold inside a function called from `||`: every step checks itself.)
    dist="$(maven_file org.opensearch.distribution.integ-test-zip opensearch "$OPENSEARCH_VERSION")" || return 1
    plugin="$(maven_file org.opensearch.plugin opensearch-knn "$KNN_VERSION")" || return 1
    rm -rf "$OS_HOME" "$OS_HOME.unpack"
    mkdir -p "$OS_HOME.unpack"
    unzip -q "$dist" -d "$OS_HOME.unpack" || return 1
    mv "$OS_HOME.unpack/opensearch-$OPENSEARCH_VERSION" "$OS_HOME" || return 1
    rmdir "$OS_HOME.unpack"
    install_module lang-painless lang-painless org.opensearch.painless.PainlessPlugin "" \
        lang-painless,opensearch-scripting-painless-spi,antlr4-runtime,asm,asm-analysis,asm-commons,asm-tree,asm-util \
        'grant { permission java.lang.RuntimePermission "createClassLoader"; permission java.lang.RuntimePermission "getClassLoader"; };' \
        || return 1
    install_module analysis-common analysis-common org.opensearch.analysis.common.CommonAnalysisPlugin lang-painless \
        analysis-common || return 1
    install_module reindex reindex-client org.opensearch.index.reindex.ReindexPlugin "" \
        reindex-client,opensearch-rest-client,opensearch-ssl-config,commons-codec,commons-logging,httpasyncclient,httpclient,httpcore,httpcore-nio \
        || return 1
    say "installing the k-NN plugin $KNN_VERSION"
    OPENSEARCH_JAVA_HOME="$(os_java_home)" "$OS_HOME/bin/opensearch-plugin" install --batch "file://$plugin" >/dev/null || return 1
    cat >>"$OS_HOME/config/opensearch.yml" <<'YAML'
# ki test node (deploy/services.sh): one node on loopback, no security plugin in this distribution.
cluster.name: ki-test
node.name: ki-test-1
network.host: 127.0.0.1
http.port: 9200
transport.port: 9300
discovery.type: single-node
# A developer's disk may be nearly full; the tests write little.
cluster.routing.allocation.disk.threshold_enabled: false
action.auto_create_index: false
YAML
    touch "$OS_HOME/.ki-installed"
}

start_opensearch() {
    if os_health; then say "OpenSearch is up on $OS_URL"; return; fi
    install_opensearch || { say "could not install OpenSearch $OPENSEARCH_VERSION" >&2; return 1; }
    if ! port_open 9200; then
        rm -f "$OS_HOME/opensearch.pid"
        say "starting OpenSearch $OPENSEARCH_VERSION (heap $HEAP)"
        mkdir -p "$CACHE/logs"
        # The root user may not run OpenSearch; a system user owns the unpacked node.
        if [ "$(id -u)" = 0 ]; then
            id ki-opensearch >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin ki-opensearch
            chown -R ki-opensearch "$OS_HOME" "$CACHE/logs"
            runuser -u ki-opensearch -- env OPENSEARCH_JAVA_OPTS="-Xms$HEAP -Xmx$HEAP" \
                OPENSEARCH_JAVA_HOME="$(os_java_home)" "$OS_HOME/bin/opensearch" -d -p "$OS_HOME/opensearch.pid" \
                >"$CACHE/logs/start.log" 2>&1 || true
        else
            OPENSEARCH_JAVA_OPTS="-Xms$HEAP -Xmx$HEAP" OPENSEARCH_JAVA_HOME="$(os_java_home)" "$OS_HOME/bin/opensearch" -d -p "$OS_HOME/opensearch.pid" \
                >"$CACHE/logs/start.log" 2>&1
        fi
    fi
    for _ in $(seq 1 90); do
        if os_health 2s; then say "OpenSearch is up on $OS_URL"; return; fi
        if [ -s "$OS_HOME/opensearch.pid" ] && ! kill -0 "$(cat "$OS_HOME/opensearch.pid")" 2>/dev/null; then break; fi
        sleep 1
    done
    say "OpenSearch did not become healthy; see $OS_HOME/logs/ki-test.log" >&2
    tail -20 "$CACHE/logs/start.log" "$OS_HOME/logs/ki-test.log" >&2 2>/dev/null || true
    return 1
}

# -------------------------------------------------------------------- Keycloak

KEYCLOAK_VERSION="${KI_KEYCLOAK_VERSION:-26.7.3}"
KC_HEAP="${KI_KEYCLOAK_HEAP:-512m}"
KC_HOME="$CACHE/keycloak-$KEYCLOAK_VERSION"
KC_URL="http://127.0.0.1:8180"
KC_REALM_FILE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/keycloak/realm-ki.json"
# Start-up measured on 2 cores shared with other work (load 10): 147 s with a fresh dev database,
# most of it creating the schema; bounded so CI is.
KC_START_SECONDS="${KI_KEYCLOAK_START_SECONDS:-300}"

# Ready when the imported realm publishes its discovery document (the server alone is not enough).
kc_ready() { curl -fsS -m 2 "$KC_URL/realms/ki/.well-known/openid-configuration" 2>/dev/null | grep -q '"issuer"'; }

install_keycloak() {
    if [ -e "$KC_HOME/.ki-installed" ]; then return; fi
    local dist
    dist="$(maven_file org.keycloak keycloak-quarkus-dist "$KEYCLOAK_VERSION" tar.gz)" || return 1
    rm -rf "$KC_HOME" "$KC_HOME.unpack"; mkdir -p "$KC_HOME.unpack"
    tar -xzf "$dist" -C "$KC_HOME.unpack" || return 1
    mv "$KC_HOME.unpack/keycloak-$KEYCLOAK_VERSION" "$KC_HOME" || return 1
    rmdir "$KC_HOME.unpack"
    touch "$KC_HOME/.ki-installed"
}

start_keycloak() {
    if kc_ready; then return; fi
    local java_home; java_home="$(ls -d /usr/lib/jvm/temurin-25-jdk* 2>/dev/null | head -1)"
    [ -n "$java_home" ] || { say "Keycloak needs Java 21+: no /usr/lib/jvm/temurin-25-jdk*" >&2; return 1; }
    install_keycloak || { say "could not fetch or unpack Keycloak $KEYCLOAK_VERSION" >&2; return 1; }
    if [ -s "$KC_HOME/keycloak.pid" ] && kill -0 "$(cat "$KC_HOME/keycloak.pid")" 2>/dev/null; then
        say "Keycloak is starting already (pid $(cat "$KC_HOME/keycloak.pid"))"
    else
        # The dev database is thrown away when the committed realm file changed (an import skips a
        # realm that exists), so the realm is always the file's; kept otherwise, which saves the schema.
        local realm_sum; realm_sum="$(sha256sum "$KC_REALM_FILE" | cut -d' ' -f1)"
        if [ "$(cat "$KC_HOME/data/realm.sha256" 2>/dev/null)" != "$realm_sum" ]; then
            rm -rf "$KC_HOME/data/h2" "$KC_HOME/data/import"
        fi
        mkdir -p "$KC_HOME/data/import" "$CACHE/logs"
        cp "$KC_REALM_FILE" "$KC_HOME/data/import/"
        echo "$realm_sum" >"$KC_HOME/data/realm.sha256"
        say "starting Keycloak $KEYCLOAK_VERSION (heap $KC_HEAP) on $KC_URL"
        JAVA_HOME="$java_home" JAVA_OPTS_KC_HEAP="-Xms128m -Xmx$KC_HEAP" \
            setsid nohup "$KC_HOME/bin/kc.sh" start-dev --http-host=127.0.0.1 --http-port=8180 \
            --import-realm --health-enabled=false --metrics-enabled=false \
            >"$CACHE/logs/keycloak.log" 2>&1 </dev/null &
        echo $! >"$KC_HOME/keycloak.pid"
    fi
    for _ in $(seq 1 "$KC_START_SECONDS"); do
        if kc_ready; then say "Keycloak is up on $KC_URL (realm ki)"; return; fi
        if ! kill -0 "$(cat "$KC_HOME/keycloak.pid")" 2>/dev/null; then break; fi
        sleep 1
    done
    say "Keycloak did not publish realm ki within $KC_START_SECONDS s; see $CACHE/logs/keycloak.log" >&2
    tail -20 "$CACHE/logs/keycloak.log" >&2 2>/dev/null || true
    return 1
}

start_postgresql
start_redis
say "PostgreSQL and Redis are up"
if [ "${KI_SKIP_OPENSEARCH:-0}" != 1 ]; then
    start_opensearch || exit 3
fi
if [ "${KI_SKIP_KEYCLOAK:-0}" != 1 ]; then
    start_keycloak || exit 4
fi
