#!/usr/bin/env bash
# The Python package as a user gets it: builds the wheel from this checkout
# (pip wheel ., scikit-build-core), installs it into a fresh virtual
# environment and runs the pytest suite there, from outside the source tree.
#   run_tests.sh <work dir> [<liblms.so of this checkout's build>] [pytest args...]
# With a liblms.so the wheel links it instead of building the library again
# (CMake's LMS_PREBUILT_LIBRARY). The environment sees Debian's packages
# (numpy, torch, onnx) through --system-site-packages.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$1
lib=${2:-}
shift $(($# < 2 ? $# : 2))
python=/usr/bin/python3
rm -rf "$work/venv" "$work/wheels"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
defines=(--config-settings=cmake.define.LMS_WERROR=ON "--config-settings=build-dir=$work/build")
[ -n "$lib" ] && defines+=("--config-settings=cmake.define.LMS_PREBUILT_LIBRARY=$lib")
echo "== pip wheel $src"
"$work/venv/bin/python" -m pip wheel -q --no-deps -w "$work/wheels" "${defines[@]}" "$src"
"$work/venv/bin/python" -m pip install -q --no-deps "$work"/wheels/lms-*.whl
cd "$work"
export LMS_SOURCE_DIR=$src
exec "$work/venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$src/python/tests" "$@"
