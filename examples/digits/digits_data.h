// scikit-learn's handwritten digits (Alpaydin & Kaynak, UCI "Optical
// Recognition of Handwritten Digits"; 1,797 images of 8x8 pixels with values
// 0..16, labels 0..9), read from the digits.csv.gz that Debian's
// python3-sklearn ships (scripts/fetch_data.sh copies it to
// data/digits/digits.csv.gz): one image per line, 64 pixel values then the
// label.
//
//   LMS_ASSIGN_OR_RETURN(Digits all, read_digits("data/digits/digits.csv.gz", 32));
//   const DigitsSplit s = split_digits(all, /*test_fraction=*/0.2, /*seed=*/1);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::examples {

struct Digits {
  int64_t side = 8;             // images are [count, 1, side, side]
  std::vector<float> pixels;    // scaled to [0, 1] (value / 16)
  std::vector<int64_t> labels;  // 0..9
  int64_t count() const { return static_cast<int64_t>(labels.size()); }
};

// Reads the gzip'd CSV and scales each 8x8 image up to side x side by
// repeating pixels (side a positive multiple of 8). NotFound when the file
// is missing; InvalidArgument naming the line for a row that is not 64
// pixels in 0..16 and a label in 0..9, or when no row was read.
absl::StatusOr<Digits> read_digits(const std::string& path, int64_t side);

struct DigitsSplit {
  Digits train;
  Digits test;
};

// A shuffled split (the permutation from `seed`, the same on every
// machine): round(count * test_fraction) images for the test set, the rest
// for training.
DigitsSplit split_digits(const Digits& all, double test_fraction, uint64_t seed);

// Images [first, first + n) of `d` (wrapping around at the end), as a batch.
void digits_batch(const Digits& d, int64_t first, int64_t n, std::vector<float>* pixels,
                  std::vector<int64_t>* labels);

}  // namespace lms::examples
