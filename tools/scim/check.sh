#!/usr/bin/env bash
# Runs scim2-tester (https://pypi.org/project/scim2-tester/, a SCIM 2.0 compliance checker
# nobody here wrote) against a SCIM service: tools/scim/check.sh URL TOKEN_FILE CA_FILE.
# Installs the pinned checker into a virtualenv cached under $HOMESTEAD_CACHE (default
# ~/.cache/homestead). Exits 1 if any check ends in ERROR.
set -euo pipefail
url=$1 token_file=$2 ca_file=$3
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}
venv=$cache/tools/scim2-tester-$(sha256sum "$here/requirements.txt" | cut -c1-12)
mkdir -p "$cache/tools"
{
  flock 9 # callers in parallel: one installs, the others wait for it
  if [ ! -x "$venv/bin/python" ]; then
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp"
    "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    rm -rf "$venv" && mv "$venv.tmp" "$venv"
  fi
} 9>"$venv.lock"
exec "$venv/bin/python" "$here/check.py" "$url" "$token_file" "$ca_file"
