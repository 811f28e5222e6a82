#!/usr/bin/env bash
# The programs `make bench` runs beyond the local stack's prerequisites (local/prerequisites.sh, which
# brings PostgreSQL's server binaries and so pgbench): wrk, the HTTP load generator of bench/ingress.py.
# Installs what is missing with apt-get (as root, or through sudo without a password) or Homebrew;
# otherwise names what to install and exits 1.
set -euo pipefail

tools=(wrk)

missing=()
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "missing: ${missing[*]} - install them: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
elif command -v brew >/dev/null 2>&1; then
  echo "installing: ${missing[*]}"
  brew install "${missing[@]}"
else
  echo "missing: ${missing[*]} - install them with your package manager" >&2
  exit 1
fi

for tool in "${missing[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "missing: $tool (its install did not put it on PATH)" >&2; exit 1; }
done
