#include "lms/status.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace lms {

// The payload is "<stage>\n<name>": a stage has no newline, and a name of a
// graph has none either (Graph refuses control characters in names).
absl::Status with_failure_site(absl::Status status, const FailureSite& site) {
  if (status.ok()) return status;
  status.SetPayload(kFailureSiteUrl, absl::Cord(absl::StrCat(site.stage, "\n", site.name)));
  return status;
}

absl::Status with_message(const absl::Status& status, std::string_view message) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::string_view(message.data(), message.size()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

std::optional<FailureSite> failure_site(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kFailureSiteUrl);
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  const size_t cut = text.find('\n');
  if (cut == std::string::npos) return std::nullopt;
  return FailureSite{text.substr(0, cut), text.substr(cut + 1)};
}

}  // namespace lms
