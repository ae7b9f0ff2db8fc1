#!/usr/bin/env bash
# Make the docker runner usable on a fresh Debian 12 machine (run as root in CI):
#   1. install docker.io, mmdebstrap (the Debian image) and busybox-static (the
#      host-copy fallback image) if missing;
#   2. start dockerd without a bridge or iptables, logging to $DSH_DOCKERD_LOG,
#      unless a daemon already answers;
#   3. wait up to 60 s for `docker version`;
#   4. build the runtime image locally (`dsh-sandbox image build --if-missing`):
#      a minimal Debian with python3-venv, gcc, make and git from Debian's package
#      archive (about 1.5-4 minutes), else a copy of this machine's programs;
#      nothing is ever pulled from a container registry.
# Idempotent: every step is skipped when already done.
set -euo pipefail

log="${DSH_DOCKERD_LOG:-/tmp/dsh-dockerd.log}"
image="${DSH_DOCKER_IMAGE:-dsh-sandbox/runtime:latest}"

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if ((${#missing[@]})); then
  echo "docker-setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if docker version >/dev/null 2>&1; then
  echo "docker-setup: daemon already running"
else
  echo "docker-setup: starting dockerd --bridge=none --iptables=false (log: $log)"
  # setsid + nohup: the daemon outlives this script and the CI step's shell.
  setsid nohup dockerd --bridge=none --iptables=false >"$log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker version >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker version >/dev/null 2>&1; then
    echo "docker-setup: dockerd did not answer within 60 s; last log lines:" >&2
    tail -n 30 "$log" >&2 || true
    exit 1
  fi
fi
docker version --format 'docker-setup: daemon {{.Server.Version}} (API {{.Server.APIVersion}})'

# The project may be installed without its console script on PATH (e.g. --user).
if command -v dsh-sandbox >/dev/null 2>&1; then
  dsh-sandbox image build --if-missing --tag "$image"
else
  python3 -P -m dsh.cli image build --if-missing --tag "$image"
fi
