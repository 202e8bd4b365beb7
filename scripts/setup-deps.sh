#!/usr/bin/env bash
# Install what detd needs to build and test, on Debian 12. Idempotent:
# packages already present are left alone. Run as root (or with sudo).
set -euo pipefail

debs=(
  build-essential cmake pkg-config git
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libuv1-dev libsqlite3-dev libjansson-dev sqlite3 libmicrohttpd-dev openssl libssl-dev
  libsystemd-dev systemd
  etcd-server etcd-client
  clang-format clang libclang-rt-dev
  python3 python3-pip python3-venv python3-pytest python3-yaml
)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup-deps: Debian packages present"
fi

# Python test tools (the Triton matrix brings its own venvs).
python3 -m pip --version >/dev/null 2>&1 || { echo "setup-deps: pip missing" >&2; exit 1; }
# Debian's python3 gets pytest from python3-pytest above; another python3 on
# PATH (pyenv, a venv) gets it from PyPI.
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
