#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing:
#   openssh-server  - the loopback sshd that docker-machine provisioning runs its join script through
# and checks for what it cannot install from Debian:
#   moto_server     - the AWS emulator the eks-asg driver tests run against (moto, preinstalled)
set -euo pipefail
if ! command -v moto_server >/dev/null; then
  echo "install-test-deps: moto_server (moto[server], the AWS emulator) is not on PATH; the AWS driver tests need it" >&2
  exit 1
fi
missing=()
[[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "install-test-deps: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
${sudo} apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
  { ${sudo} apt-get update >/dev/null && ${sudo} apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
# The package's own sshd service is not wanted: tests start their own.
${sudo} rm -f /etc/systemd/system/multi-user.target.wants/ssh.service 2>/dev/null || true
