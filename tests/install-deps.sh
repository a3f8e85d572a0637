#!/bin/sh
# Installs what building and testing exld needs on Debian (run as root).
set -eu
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
	build-essential meson ninja-build pkg-config \
	libmsgpack-dev libevent-dev libsystemd-dev libpcre2-dev libcmocka-dev \
	python3 python3-jsonschema systemd tmux
