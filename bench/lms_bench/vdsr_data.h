// Real VDSR training batches for lms-bench: x2 bicubic pairs of the Y channel
// of the photos in a folder, through examples/vdsr's Dataset (Note [Batch
// determinism] there: the batch of a step depends only on (seed, step)).
//
//   std::vector<std::string> warnings;
//   LMS_ASSIGN_OR_RETURN(auto source, lms::bench::load_vdsr_photos("data", 1, 48, &warnings));
//   LMS_ASSIGN_OR_RETURN(auto factory, lms::bench::vdsr_factory(model, source));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model_factory.h"

namespace lms::bench {

// Loads <dir>/train when it exists, else <dir>. Errors: NotFound when the
// folder is missing or holds no decodable photo, InvalidArgument when every
// photo that decodes is smaller than `crop` (both list each file with its
// reason); Unimplemented when lms-bench was built without examples/vdsr
// (LMS_BUILD_EXAMPLES=OFF). Files that do not decode are skipped with a line
// in *warnings. The source returns InvalidArgument when a crop is larger
// than the smallest photo.
absl::StatusOr<VdsrBatchSource> load_vdsr_photos(const std::string& dir, uint64_t seed,
                                                 int64_t crop, std::vector<std::string>* warnings);

}  // namespace lms::bench
