#!/usr/bin/env bash
# Makes sure the machine has what the local stack runs on. Installs PostgreSQL's server binaries
# and a Java runtime from the distribution when they are missing and we are root; the Google Cloud
# CLI (with its Pub/Sub and Firestore emulators) cannot be installed from here and is reported.
# With --browser (`make test`), also the distribution's Chromium that the console's browser tests drive
# (Playwright is pointed at it; its own browser download is not used).
set -euo pipefail

missing=()
if [ "${1:-}" = "--browser" ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
fi
have_initdb() { command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }
have_initdb || missing+=(postgresql)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian starts a default cluster on 5432 on install; the local stack runs its own.
    (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' |
      while read -r v c; do pg_ctlcluster "$v" "$c" stop || true; done) || true
  else
    echo "missing: ${missing[*]} - install them (see docs/local.md)" >&2
    exit 1
  fi
fi

if ! command -v gcloud >/dev/null 2>&1; then
  echo "missing: the Google Cloud CLI (gcloud) with the pubsub-emulator and cloud-firestore-emulator components (see docs/local.md)" >&2
  exit 1
fi
sdk="$(dirname "$(dirname "$(readlink -f "$(command -v gcloud)")")")"
for part in platform/pubsub-emulator platform/cloud-firestore-emulator; do
  if [ ! -d "$sdk/$part" ]; then
    echo "missing: $sdk/$part - run: gcloud components install pubsub-emulator cloud-firestore-emulator" >&2
    exit 1
  fi
done
