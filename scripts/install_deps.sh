#!/usr/bin/env bash
# Installs the Debian packages lms needs, only those missing. Uses sudo when
# not root. Safe to run repeatedly.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang-format
      libabsl-dev libfmt-dev libdnnl-dev libtomlplusplus-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      libpng-dev libjpeg-dev libstb-dev zlib1g-dev
      libniftiio-dev libznz-dev libnifti2-dev
      libopenmpi-dev openmpi-bin
      libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata python3-onnx
      python3-torch python3-torchvision python3-sklearn
      pybind11-dev python3-dev python3-venv python3-pip python3-numpy python3-pytest
      coinor-libcbc-dev dpkg-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
