#!/bin/sh
# Installs what building and testing exld needs on Debian (run as root).
set -eu
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
	build-essential meson ninja-build pkg-config \
	libmsgpack-dev libevent-dev libsystemd-dev libpcre2-dev libcmocka-dev \
	python3 python3-jsonschema python3-jinja2 systemd tmux nodejs
# The chat template renderer's references (tests/integration/test_jinja_ref.js):
# @huggingface/jinja, pinned by tests/jinja-ref/package-lock.json, and
# Jinja2 (python3-jinja2) where the first lacks a feature.  Debian's nodejs
# comes without npm; NodeSource's has it built in and conflicts with it.
command -v npm >/dev/null 2>&1 || $SUDO apt-get install -y -q --no-install-recommends npm
npm ci --prefix "$(dirname "$0")/jinja-ref" --no-audit --no-fund
