#!/usr/bin/env bash
# Install the Debian packages herd builds with, only those that are missing.
# Hackage is not used: every library comes from Debian's libghc-*-dev packages.
# With --libraries, only what building and the in-process tests need (make
# check): no browser, sshd or SLURM.
set -euo pipefail
libraries=(
  ghc cabal-install
  libghc-store-dev libghc-store-core-dev libghc-network-dev libghc-async-dev
  libghc-optparse-applicative-dev libghc-parallel-dev
  # the par benchmark measures herd against monad-par on one machine
  libghc-monad-par-dev
  libghc-cryptonite-dev libghc-memory-dev libghc-clock-dev libghc-primitive-dev libghc-vector-dev
  libghc-warp-dev libghc-wai-dev libghc-http-types-dev
  # TLS on TCP links (configTls): the tls package and what herd uses of its
  # certificates
  libghc-tls-dev libghc-x509-dev libghc-asn1-types-dev libghc-hourglass-dev libghc-data-default-class-dev
  # and its records, sealed and opened with OpenSSL's AES-GCM
  libssl-dev
  libghc-hspec-dev libghc-quickcheck2-dev
  # the dashboard's test talks to a browser over the DevTools protocol (a
  # websocket); the suite builds with them whether or not it runs that test
  libghc-websockets-dev libghc-zlib-dev
)
components=(
  # the dashboard's test drives a real headless browser
  chromium
  # the integration tests start real components: sshd, SLURM with munge,
  # and network namespaces
  openssh-server openssh-client slurm-wlm munge iproute2 procps
)
packages=("${libraries[@]}")
if [ "${1:-}" != "--libraries" ]; then packages+=("${components[@]}"); fi
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing missing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"; then
  # A half-configured dpkg state makes apt fail with missing .deb files.
  $sudo dpkg --configure -a
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
