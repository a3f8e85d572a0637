#!/bin/sh
# Installs what building and testing exld needs on Debian (run as root).
set -eu
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
	build-essential meson ninja-build pkg-config \
	libmsgpack-dev libevent-dev libsystemd-dev libpcre2-dev libutf8proc-dev libcmocka-dev \
	libsimde-dev \
	python3 python3-jsonschema python3-jinja2 systemd tmux zstd
# The HTTP front's tests use the npm clients people use (openai, ollama),
# pinned by tests/node/package-lock.json; node comes with the machine, or
# from Debian when it does not.
if ! command -v npm >/dev/null 2>&1; then
	$SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi
npm ci --prefix "$(dirname "$0")/node" --no-audit --no-fund
# The chat template renderer's references (tests/integration/test_jinja_ref.js):
# @huggingface/jinja, pinned by tests/jinja-ref/package-lock.json, and
# Jinja2 (python3-jinja2) where the first lacks a feature.
npm ci --prefix "$(dirname "$0")/jinja-ref" --no-audit --no-fund
