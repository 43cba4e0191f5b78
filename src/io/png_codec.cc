// libpng reports errors by longjmp. Each function below that calls into
// libpng under setjmp holds only trivially destructible locals, so a longjmp
// never skips a C++ destructor; buffers are owned by the callers.
#include <png.h>

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "io/codec_internal.h"

namespace lms::io {
namespace {

struct PngIo {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* in = nullptr;  // decoding source
  size_t in_size = 0;
  size_t in_pos = 0;
  std::vector<uint8_t>* out = nullptr;  // encoding sink
  char error[200] = {0};
};

void on_error(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->error, sizeof(io->error), "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // e.g. sRGB profile notes

void read_bytes(png_structp png, png_bytep dst, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (io->in_size - io->in_pos < n) png_error(png, "file is truncated (unexpected end of data)");
  std::memcpy(dst, io->in + io->in_pos, n);
  io->in_pos += n;
}

void write_bytes(png_structp png, png_bytep src, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  io->out->insert(io->out->end(), src, src + n);
}

void flush_nothing(png_structp) {}

// Reads the header and sets the transforms that normalise every PNG to 8- or
// 16-bit gray or RGB without alpha. Fills width/height/channels/depth.
bool read_header(PngIo* io, png_uint_32* w, png_uint_32* h, int* channels, int* depth) {
  if (setjmp(png_jmpbuf(io->png))) return false;
  png_set_read_fn(io->png, io, read_bytes);
  png_set_user_limits(io->png, 1u << 20, 1u << 20);
  png_read_info(io->png, io->info);
  int color = png_get_color_type(io->png, io->info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(io->png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(io->png, io->info) < 8) {
    png_set_expand_gray_1_2_4_to_8(io->png);
  }
  png_set_strip_alpha(io->png);
  png_read_update_info(io->png, io->info);
  *w = png_get_image_width(io->png, io->info);
  *h = png_get_image_height(io->png, io->info);
  *channels = png_get_channels(io->png, io->info);
  *depth = png_get_bit_depth(io->png, io->info);
  return true;
}

bool read_rows(PngIo* io, png_bytepp rows) {
  if (setjmp(png_jmpbuf(io->png))) return false;
  png_read_image(io->png, rows);
  png_read_end(io->png, nullptr);
  return true;
}

bool write_all(PngIo* io, int w, int h, int color, png_bytepp rows) {
  if (setjmp(png_jmpbuf(io->png))) return false;
  png_set_write_fn(io->png, io, write_bytes, flush_nothing);
  png_set_IHDR(io->png, io->info, w, h, 8, color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(io->png, io->info);
  png_write_image(io->png, rows);
  png_write_end(io->png, nullptr);
  return true;
}

void samples_to_float(const std::vector<uint8_t>& raw, int depth, std::vector<float>* out) {
  if (depth == 16) {
    for (size_t i = 0; i < out->size(); ++i) {
      (*out)[i] = static_cast<float>((raw[2 * i] << 8) | raw[2 * i + 1]) / 65535.0f;
    }
  } else {
    for (size_t i = 0; i < out->size(); ++i) (*out)[i] = raw[i] / 255.0f;
  }
}

}  // namespace

uint8_t to_u8(float v) {
  if (!(v > 0.0f)) return 0;  // also NaN
  if (v >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(v * 255.0f));
}

absl::StatusOr<Image> decode_png(const uint8_t* bytes, size_t size) {
  PngIo io;
  io.in = bytes;
  io.in_size = size;
  io.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (io.png == nullptr) return absl::ResourceExhaustedError("libpng could not allocate a reader");
  io.info = png_create_info_struct(io.png);
  png_uint_32 w = 0, h = 0;
  int channels = 0, depth = 0;
  bool ok = io.info != nullptr && read_header(&io, &w, &h, &channels, &depth);
  absl::Status status;
  if (!ok) {
    status = absl::DataLossError(absl::StrCat("corrupt PNG header: ", io.error));
  } else if (static_cast<int64_t>(w) * h > kMaxImagePixels) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("PNG is ", w, "x", h, ", above the limit of ", kMaxImagePixels, " pixels"));
  } else if (channels != 1 && channels != 3) {
    status = absl::InvalidArgumentError(absl::StrCat("PNG decodes to ", channels, " channels"));
  }
  Image image;
  if (status.ok()) {
    size_t row_bytes = png_get_rowbytes(io.png, io.info);
    std::vector<uint8_t> raw(row_bytes * h);
    std::vector<png_bytep> rows(h);
    for (png_uint_32 y = 0; y < h; ++y) rows[y] = raw.data() + y * row_bytes;
    if (!read_rows(&io, rows.data())) {
      status = absl::DataLossError(absl::StrCat("corrupt PNG data: ", io.error));
    } else {
      image = Image{static_cast<int>(w), static_cast<int>(h), channels,
                    std::vector<float>(static_cast<size_t>(w) * h * channels)};
      samples_to_float(raw, depth, &image.data);
    }
  }
  png_destroy_read_struct(&io.png, io.info ? &io.info : nullptr, nullptr);
  if (!status.ok()) return status;
  return image;
}

absl::StatusOr<std::vector<uint8_t>> encode_png(const Image& image) {
  std::vector<uint8_t> raw(image.data.size());
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = to_u8(image.data[i]);
  size_t row_bytes = static_cast<size_t>(image.width) * image.channels;
  std::vector<png_bytep> rows(image.height);
  for (int y = 0; y < image.height; ++y) rows[y] = raw.data() + y * row_bytes;
  std::vector<uint8_t> out;
  PngIo io;
  io.out = &out;
  io.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (io.png == nullptr) return absl::ResourceExhaustedError("libpng could not allocate a writer");
  io.info = png_create_info_struct(io.png);
  int color = image.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB;
  bool ok = io.info != nullptr && write_all(&io, image.width, image.height, color, rows.data());
  png_destroy_write_struct(&io.png, io.info ? &io.info : nullptr);
  if (!ok) return absl::InternalError(absl::StrCat("libpng failed: ", io.error));
  return out;
}

}  // namespace lms::io
