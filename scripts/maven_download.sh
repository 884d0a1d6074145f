# Sourced by the scripts that fetch an artifact from Maven Central (object_store.sh, mariadb_release.sh).
# maven_download URL FILE: download URL to FILE, checked against Maven Central's SHA-1 of it (FILE.part until then).
maven_download() {
  local url=$1 file=$2 want got
  mkdir -p "$(dirname "$file")"
  curl -fsSL --retry 3 -o "$file.part" "$url"
  want="$(curl -fsSL --retry 3 "$url.sha1" | cut -c1-40)"
  got="$(sha1sum "$file.part" | cut -c1-40)"
  [ "$want" = "$got" ] || { rm -f "$file.part"; echo "checksum mismatch for $url" >&2; return 1; }
  mv "$file.part" "$file"
}
