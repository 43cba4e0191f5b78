// Text for the byte-level language model of the textlm example: a file read
// whole, split into a training part and a held-out part, and batches of
// windows from it as token ids (one byte each, ids in [0, 256)).
//
//   LMS_ASSIGN_OR_RETURN(std::string text, read_text("data/text/kjv.txt"));
//   const TextSplit split = split_text(text, 0.1);
//   text_batch(split.train, 16, 128, seed, step, &ids, &next);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::examples {

// The bytes of the file at `path`. NotFound when it cannot be opened (the
// message names scripts/fetch_data.sh, which writes data/text/kjv.txt);
// InvalidArgument when it is empty.
absl::StatusOr<std::string> read_text(const std::string& path);

// The first (1 - held_out_fraction) of the text trains; the rest, the last
// part, is held out. A contiguous split: no window of the held-out text
// overlaps one of the training text (for the King James Bible at 0.1, the
// held-out part is the end of the New Testament).
struct TextSplit {
  std::string train;
  std::string held_out;
};
TextSplit split_text(const std::string& text, double held_out_fraction);

// `batch` windows of `context` + 1 bytes of `text`: ids[b, t] is the byte at
// start_b + t and next[b, t] the one after it, both [batch, context]
// row-major. The starts are uniform over the text (up to a bias below
// 2^-40), drawn by splitmix64 seeded with seed + step * 0xD1B54A32D192ED03
// alone, so a step's batch does not depend on the steps before it and is the
// same on every platform. text.size() must exceed `context`.
void text_batch(const std::string& text, int64_t batch, int64_t context, uint64_t seed,
                int64_t step, std::vector<int64_t>* ids, std::vector<int64_t>* next);

// The held-out windows the evaluation reads: `windows` windows of `context`
// + 1 bytes, evenly spaced over `text`, the same every time. Window w's ids
// are ids[w * context, (w + 1) * context).
void eval_windows(const std::string& text, int64_t windows, int64_t context,
                  std::vector<int64_t>* ids, std::vector<int64_t>* next);

}  // namespace lms::examples
