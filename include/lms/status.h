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
#include <optional>
#include <string>
#include <string_view>

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

namespace lms {

// Where a plan, a session or a step failed, carried by the absl::Status as a
// payload (absl::Status::SetPayload under kFailureSiteUrl), so that a caller
// tells an out-of-memory at a node from one at the arena without parsing
// the message, whose wording may change.
//
//   absl::Status s = session->run(feeds, &step);
//   if (std::optional<lms::FailureSite> site = lms::failure_site(s)) {
//     // site->stage == lms::kStageNode, site->name == "conv7"
//   }
struct FailureSite {
  std::string stage;  // one of the kStage* names below
  std::string name;   // the node's or tensor's name; empty for kStageArena
};
inline constexpr char kFailureSiteUrl[] = "type.googleapis.com/lms.FailureSite";
inline constexpr char kStageNode[] = "node";              // issuing a node of the step
inline constexpr char kStagePersistent[] = "persistent";  // allocating a persistent tensor
inline constexpr char kStageArena[] = "arena";            // allocating the step's arena

// `status` with `site` attached (an OK status is returned as it is).
absl::Status with_failure_site(absl::Status status, const FailureSite& site);
// `status` with its message replaced, its code and payloads kept: the way
// to add context to an error without losing its site.
absl::Status with_message(const absl::Status& status, std::string_view message);
// The site attached to `status`; nullopt when none is.
std::optional<FailureSite> failure_site(const absl::Status& status);

}  // namespace lms
