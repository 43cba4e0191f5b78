#include "text_data.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "fmt/format.h"

namespace lms::examples {

absl::StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(fmt::format(
        "cannot open the text '{}' (scripts/fetch_data.sh data writes data/text/kjv.txt)", path));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return absl::InvalidArgumentError(fmt::format("the text '{}' is empty", path));
  return text;
}

TextSplit split_text(const std::string& text, double held_out_fraction) {
  const double f = std::clamp(held_out_fraction, 0.0, 1.0);
  const auto cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - f));
  return {text.substr(0, cut), text.substr(cut)};
}

namespace {

void window(const std::string& text, size_t start, int64_t context, int64_t* ids, int64_t* next) {
  for (int64_t t = 0; t < context; ++t) {
    ids[t] = static_cast<unsigned char>(text[start + static_cast<size_t>(t)]);
    next[t] = static_cast<unsigned char>(text[start + static_cast<size_t>(t) + 1]);
  }
}

}  // namespace

void text_batch(const std::string& text, int64_t batch, int64_t context, uint64_t seed,
                int64_t step, std::vector<int64_t>* ids, std::vector<int64_t>* next) {
  // splitmix64 from (seed, step): the same starts on every platform and in
  // examples/python/textlm.py.
  uint64_t state = seed + static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull;
  auto draw = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const uint64_t starts = text.size() - static_cast<size_t>(context);  // 0 .. size - context - 1
  ids->resize(static_cast<size_t>(batch * context));
  next->resize(ids->size());
  for (int64_t b = 0; b < batch; ++b) {
    window(text, static_cast<size_t>(draw() % starts), context, ids->data() + b * context,
           next->data() + b * context);
  }
}

void eval_windows(const std::string& text, int64_t windows, int64_t context,
                  std::vector<int64_t>* ids, std::vector<int64_t>* next) {
  ids->resize(static_cast<size_t>(windows * context));
  next->resize(ids->size());
  const size_t room = text.size() - static_cast<size_t>(context) - 1;
  for (int64_t w = 0; w < windows; ++w) {
    const size_t start =
        windows > 1 ? room * static_cast<size_t>(w) / static_cast<size_t>(windows - 1) : 0;
    window(text, start, context, ids->data() + w * context, next->data() + w * context);
  }
}

}  // namespace lms::examples
