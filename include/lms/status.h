// Status helpers for lms. Debian's Abseil 20220623 ships no status macros and
// no absl/log, so the project defines its own here.
//
//   absl::StatusOr<int> parse(std::string_view s);
//   absl::Status use(std::string_view s) {
//     LMS_ASSIGN_OR_RETURN(int v, parse(s));
//     LMS_RETURN_IF_ERROR(check(v));
//     return absl::OkStatus();
//   }
//
// LMS_CHECK is for broken internal invariants only (never for what a caller can
// cause): it prints the condition and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LMS_CONCAT_INNER_(a, b) a##b
#define LMS_CONCAT_(a, b) LMS_CONCAT_INNER_(a, b)

#define LMS_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status lms_status_ = (expr);       \
    if (!lms_status_.ok()) return lms_status_; \
  } while (false)

#define LMS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#define LMS_ASSIGN_OR_RETURN(lhs, expr) \
  LMS_ASSIGN_OR_RETURN_IMPL_(LMS_CONCAT_(lms_statusor_, __LINE__), lhs, expr)

#define LMS_CHECK(cond)                                                                 \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: LMS_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (false)
