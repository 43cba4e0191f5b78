// Internal to lms_io: in-memory PNG/JPEG codecs behind read_image/write_png.
// Messages carry the decoder's reason but not the path; callers prefix it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/io/image.h"

namespace lms::io {

// DataLoss for corrupt or truncated data, InvalidArgument for unsupported
// formats, ResourceExhausted above kMaxImagePixels.
absl::StatusOr<Image> decode_png(const uint8_t* bytes, size_t size);
absl::StatusOr<Image> decode_jpeg(const uint8_t* bytes, size_t size);

// 8-bit gray or RGB PNG of a validated image.
absl::StatusOr<std::vector<uint8_t>> encode_png(const Image& image);

// Quantises [0, 1] to 0..255 with rounding; NaN -> 0.
uint8_t to_u8(float v);

}  // namespace lms::io
