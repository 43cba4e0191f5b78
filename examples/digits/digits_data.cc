#include "digits_data.h"

#include <zlib.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <utility>

#include "fmt/format.h"

namespace lms::examples {

absl::StatusOr<Digits> read_digits(const std::string& path, int64_t side) {
  if (side < 8 || side % 8 != 0) {
    return absl::InvalidArgumentError(
        fmt::format("digits: side {} must be a positive multiple of 8", side));
  }
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(fmt::format(
        "digits: {} not found (scripts/fetch_data.sh copies it from python3-sklearn)", path));
  }
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) return absl::NotFoundError(fmt::format("digits: cannot open {}", path));
  Digits d;
  d.side = side;
  const int64_t scale = side / 8;
  char line[1024];
  for (int64_t row = 1; gzgets(f.get(), line, sizeof line) != nullptr; ++row) {
    std::string_view text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
    if (text.empty()) continue;
    int values[65];
    int n = 0;
    const char* p = text.data();
    const char* end = text.data() + text.size();
    while (p < end && n < 65) {
      auto [next, ec] = std::from_chars(p, end, values[n]);
      if (ec != std::errc()) break;
      ++n;
      p = next;
      if (p < end && *p == ',') ++p;
    }
    bool ok = n == 65 && p == end && values[64] >= 0 && values[64] <= 9;
    for (int i = 0; ok && i < 64; ++i) ok = values[i] >= 0 && values[i] <= 16;
    if (!ok) {
      return absl::InvalidArgumentError(
          fmt::format("digits: {} line {}: expected 64 pixel values in 0..16 and a label in 0..9, "
                      "comma-separated",
                      path, row));
    }
    const size_t base = d.pixels.size();
    d.pixels.resize(base + static_cast<size_t>(side * side));
    for (int64_t y = 0; y < side; ++y) {
      for (int64_t x = 0; x < side; ++x) {
        d.pixels[base + static_cast<size_t>(y * side + x)] =
            static_cast<float>(values[(y / scale) * 8 + x / scale]) / 16.0f;
      }
    }
    d.labels.push_back(values[64]);
  }
  if (d.labels.empty()) return absl::InvalidArgumentError(fmt::format("digits: {} is empty", path));
  return d;
}

DigitsSplit split_digits(const Digits& all, double test_fraction, uint64_t seed) {
  const int64_t n = all.count();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates on splitmix64: the same permutation on every platform.
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = n; i > 1; --i) {
    std::swap(order[static_cast<size_t>(i - 1)], order[next() % static_cast<uint64_t>(i)]);
  }
  const auto test_count =
      static_cast<int64_t>(std::llround(static_cast<double>(n) * test_fraction));
  DigitsSplit s;
  s.train.side = s.test.side = all.side;
  const size_t image = static_cast<size_t>(all.side * all.side);
  for (int64_t k = 0; k < n; ++k) {
    Digits& to = k < test_count ? s.test : s.train;
    const size_t i = static_cast<size_t>(order[static_cast<size_t>(k)]);
    to.pixels.insert(to.pixels.end(), all.pixels.begin() + static_cast<ptrdiff_t>(i * image),
                     all.pixels.begin() + static_cast<ptrdiff_t>((i + 1) * image));
    to.labels.push_back(all.labels[i]);
  }
  return s;
}

void digits_batch(const Digits& d, int64_t first, int64_t n, std::vector<float>* pixels,
                  std::vector<int64_t>* labels) {
  const size_t image = static_cast<size_t>(d.side * d.side);
  pixels->resize(static_cast<size_t>(n) * image);
  labels->resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const size_t i = static_cast<size_t>((first + k) % d.count());
    std::copy(d.pixels.begin() + static_cast<ptrdiff_t>(i * image),
              d.pixels.begin() + static_cast<ptrdiff_t>((i + 1) * image),
              pixels->begin() + static_cast<ptrdiff_t>(static_cast<size_t>(k) * image));
    (*labels)[static_cast<size_t>(k)] = d.labels[i];
  }
}

}  // namespace lms::examples
