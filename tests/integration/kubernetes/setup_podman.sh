#!/usr/bin/env bash
# Installs what the container test needs on a fresh Debian 12 machine (root): podman with runc, and debootstrap
# for the base image (registries of images are unreachable). Idempotent: installs only what is missing.
set -euo pipefail
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup_podman.sh: needs root on Debian (apt-get); nothing installed" >&2
  exit 0
fi
need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v catatonit >/dev/null || need+=(catatonit)  # the pause process of `podman kube play` pods
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" containernetworking-plugins iptables uidmap >/dev/null
fi
