// Image files (namespace lms::io, part of liblms): PNG and JPEG decoding into
// float HWC images, atomic 8-bit PNG writing, and loading a folder of photos.
// Sizes are in pixels; every error is an absl::Status naming the file.
//
//   LMS_ASSIGN_OR_RETURN(lms::io::Image img, lms::io::read_image("eval/coffee.png"));
//   // img.channels is 1 (gray) or 3 (RGB); img.data[(y * width + x) * channels + c] in [0, 1].
//   LMS_RETURN_IF_ERROR(lms::io::write_png(img, "out/coffee.png"));
//
//   std::vector<std::string> warnings;
//   LMS_ASSIGN_OR_RETURN(auto photos, lms::io::load_images("data/train", 0, &warnings));
//
// Decoding never aborts or exits on bad input: libpng and libjpeg errors are
// caught with setjmp at this file's edge and returned as a Status naming the
// file and the decoder's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::io {

// An 8-bit-or-deeper photo as floats. Layout HWC interleaved (row-major,
// channels innermost); values in [0, 1]; channels is 1 (gray) or 3 (RGB).
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<float> data;
};

// Largest image read_image accepts, in pixels (width * height); larger files
// are refused with ResourceExhausted instead of allocating gigabytes.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

// OK when width, height > 0, channels is 1 or 3 and data.size() matches;
// otherwise InvalidArgument saying which.
absl::Status validate_image(const Image& image);

// Decodes a PNG (8/16-bit; gray, gray+alpha, RGB, RGBA, palette) or a JPEG
// (gray or YCbCr/RGB) chosen by the file's signature, not its extension.
// Alpha is dropped (not composited); palette images become RGB; 16-bit
// samples are scaled by 1/65535, 8-bit by 1/255.
// Errors: NotFound / PermissionDenied when the file cannot be opened;
// InvalidArgument for an empty file, a file that is neither PNG nor JPEG, or
// an unsupported colour space (e.g. CMYK JPEG); DataLoss for a corrupt or
// truncated PNG/JPEG; ResourceExhausted above kMaxImagePixels. Every message
// names the path.
absl::StatusOr<Image> read_image(const std::string& path);

// Writes `image` as an 8-bit PNG (gray or RGB): values are clamped to [0, 1]
// and rounded to the nearest of 256 levels (NaN becomes 0). Atomic
// (Note [Atomic write]): the bytes go to a temporary file in the same
// directory, which is fsync'd and renamed over `path`, so a reader never
// sees a half-written file.
// Errors: InvalidArgument for an invalid image; the errno-derived code (e.g.
// NotFound, PermissionDenied, ResourceExhausted) when writing fails.
absl::Status write_png(const Image& image, const std::string& path);

// Regular files in `dir` whose extension is .png, .jpg or .jpeg (any case),
// as full paths sorted by name. Not recursive; hidden files are skipped.
// When `rejected` is non-null it receives "<name>: <reason>" for every other
// non-hidden entry ("unsupported extension (allowed: .png, .jpg, .jpeg)",
// "not a regular file"), so a caller can say why a folder holds no image.
// Errors: NotFound / InvalidArgument when `dir` is missing or not a folder.
absl::StatusOr<std::vector<std::string>> list_images(const std::string& dir,
                                                     std::vector<std::string>* rejected = nullptr);

// "<file name>: <reason>" for a file `path` that could not be used because of
// `status` (e.g. read_image's error); the path inside the message is dropped
// so each file is named once.
std::string file_reason(const std::string& path, const absl::Status& status);

// Note [Unusable folder]: when no file of a folder can be used, the error
// lists every file with its reason, sorted by name and joined by "; "
// (at most kMaxListedReasons, then "and N more"), e.g.
//   "no usable image in data/train: a.png: not a PNG or JPEG file
//    (unrecognised signature); b.jpg: 8x8 is smaller than the crop 48;
//    c.txt: unsupported extension (allowed: .png, .jpg, .jpeg)"
inline constexpr size_t kMaxListedReasons = 100;
std::string no_usable_image_message(const std::string& dir, std::vector<std::string> reasons);

// Decodes up to `max_images` images of list_images(dir) in name order
// (max_images == 0: all). A file that fails to decode is skipped and a line
// "<path>: <reason>" is appended to *warnings (when non-null); it does not
// count toward max_images. When `names` is non-null it receives the path of
// each returned image, index for index.
// Errors: InvalidArgument for max_images < 0; list_images' errors; NotFound
// when no file in `dir` decodes (the message gives each file's reason, Note
// [Unusable folder]).
absl::StatusOr<std::vector<Image>> load_images(const std::string& dir, int max_images,
                                               std::vector<std::string>* warnings,
                                               std::vector<std::string>* names = nullptr);

}  // namespace lms::io
