#include "brain_task.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lms::unet3d {
namespace {

// Class of lobe digit `lobe` (2..9) and hemisphere digit `side` (0..2).
int class_of(int lobe, int side) {
  auto sided = [&](int left) { return side == 2 ? left + 1 : left; };
  switch (lobe) {
    case 2:
      return sided(1);  // frontal
    case 6:
      return sided(3);  // parietal
    case 8:
      return sided(5);  // temporal
    case 5:
      return sided(7);  // occipital
    case 3:
    case 4:
      return sided(9);  // insula and limbic
    case 7:
      return 11;  // subcortical
    default:
      return 12;  // 9: cerebellum and vermis
  }
}

bool parse_positive(absl::string_view s, int64_t* out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && *out > 0;
}

}  // namespace

const std::array<std::string_view, kBrainClasses>& brain_class_names() {
  static const std::array<std::string_view, kBrainClasses> names = {
      "background",      "frontal L",   "frontal R",   "parietal L",  "parietal R",
      "temporal L",      "temporal R",  "occipital L", "occipital R", "limbic+insula L",
      "limbic+insula R", "subcortical", "cerebellum"};
  return names;
}

absl::StatusOr<std::vector<int>> aal_classes(std::string_view text, const std::string& path) {
  std::vector<int> to_class;
  int line_no = 0;
  const absl::string_view all(text.data(), text.size());
  for (absl::string_view line : absl::StrSplit(all, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", what,
                                                     " (want \"index name code\", e.g. \"1 ",
                                                     "Precentral_L 2001\")"));
    };
    if (f.size() != 3) return bad(absl::StrCat(f.size(), " fields"));
    int64_t index = 0, code = 0;
    if (!parse_positive(f[0], &index) || index > 100000)
      return bad("index is not an integer in 1..100000");
    if (!parse_positive(f[2], &code)) return bad("code is not a positive integer");
    const int lobe = static_cast<int>(code / 1000), side = static_cast<int>(code % 10);
    if (lobe < 2 || lobe > 9)
      return bad(absl::StrCat("code ", code, " has lobe digit ", lobe, ", not 2..9"));
    if (side > 2)
      return bad(absl::StrCat("code ", code, " has hemisphere digit ", side, ", not 0..2"));
    if (to_class.size() <= static_cast<size_t>(index)) to_class.resize(index + 1, -1);
    if (to_class[index] != -1) return bad(absl::StrCat("index ", index, " listed twice"));
    to_class[index] = class_of(lobe, side);
  }
  if (to_class.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": no regions listed"));
  for (int& c : to_class) c = c < 0 ? 0 : c;
  return to_class;
}

int mirrored_class(int c) {
  if (c >= 1 && c <= 10) return c % 2 == 1 ? c + 1 : c - 1;
  return c;
}

absl::StatusOr<std::vector<double>> dice_per_class(const std::vector<int32_t>& pred,
                                                   const std::vector<int32_t>& ref, int classes) {
  if (classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dice_per_class: classes is ", classes, "; must be >= 1"));
  }
  if (pred.size() != ref.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dice_per_class: prediction has ", pred.size(),
                                                   " voxels, reference ", ref.size(),
                                                   "; they must be the same grid"));
  }
  std::vector<int64_t> both(classes, 0), in_pred(classes, 0), in_ref(classes, 0);
  for (size_t i = 0; i < pred.size(); ++i) {
    const int32_t p = pred[i], r = ref[i];
    const bool p_ok = p >= 0 && p < classes, r_ok = r >= 0 && r < classes;
    if (p_ok) ++in_pred[p];
    if (r_ok) ++in_ref[r];
    if (p_ok && p == r) ++both[p];
  }
  std::vector<double> dice(classes);
  for (int c = 0; c < classes; ++c) {
    const int64_t total = in_pred[c] + in_ref[c];
    dice[c] = total == 0 ? 1.0 : 2.0 * static_cast<double>(both[c]) / static_cast<double>(total);
  }
  return dice;
}

}  // namespace lms::unet3d
