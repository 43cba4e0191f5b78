// The test programs' precompiled header (tests/CMakeLists.txt, lms_test_pch):
// GoogleTest, the standard headers most tests use and lms's public API, parsed
// once per build instead of once per test program. Public headers only, so a
// PUBLIC_ONLY test sees nothing more through it than its own includes give.
// Every test still includes what it uses; this header only makes it cheaper.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
