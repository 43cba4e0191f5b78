// libjpeg's default error manager calls exit(); ours records the message and
// longjmps back. As in png_codec.cc, the functions that setjmp hold only
// trivially destructible locals. A premature end of data is only a warning to
// libjpeg (it pads with gray); we treat it as DataLoss so truncated files are
// never mistaken for whole photos.
#include <cstddef>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "io/codec_internal.h"

namespace lms::io {
namespace {

struct JpegErr {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErr*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  // level -1 is a warning about corrupt data; truncation is the one that would
  // otherwise silently yield a gray-padded image.
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error_exit(cinfo);
}

struct JpegIo {
  jpeg_decompress_struct cinfo;
  JpegErr err;
};

bool read_header(JpegIo* io, const uint8_t* bytes, size_t size) {
  if (setjmp(io->err.jump)) return false;
  jpeg_create_decompress(&io->cinfo);
  jpeg_mem_src(&io->cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&io->cinfo, TRUE);
  io->cinfo.out_color_space = io->cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&io->cinfo);
  return true;
}

bool read_rows(JpegIo* io, uint8_t* raw, size_t row_bytes) {
  if (setjmp(io->err.jump)) return false;
  while (io->cinfo.output_scanline < io->cinfo.output_height) {
    JSAMPROW row = raw + io->cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&io->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&io->cinfo);
  return true;
}

}  // namespace

absl::StatusOr<Image> decode_jpeg(const uint8_t* bytes, size_t size) {
  JpegIo io{};
  io.cinfo.err = jpeg_std_error(&io.err.mgr);
  io.err.mgr.error_exit = on_error_exit;
  io.err.mgr.emit_message = on_message;
  absl::Status status;
  if (!read_header(&io, bytes, size)) {
    status = absl::DataLossError(absl::StrCat("corrupt JPEG header: ", io.err.message));
    if (io.err.mgr.msg_code == JERR_CONVERSION_NOTIMPL) {
      status = absl::InvalidArgumentError(
          absl::StrCat("unsupported JPEG colour space (", io.cinfo.num_components,
                       " components; gray and YCbCr/RGB supported)"));
    }
  }
  const int w = static_cast<int>(io.cinfo.output_width);
  const int h = static_cast<int>(io.cinfo.output_height);
  const int channels = io.cinfo.output_components;
  if (status.ok() && static_cast<int64_t>(w) * h > kMaxImagePixels) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("JPEG is ", w, "x", h, ", above the limit of ", kMaxImagePixels, " pixels"));
  }
  Image image;
  if (status.ok()) {
    size_t row_bytes = static_cast<size_t>(w) * channels;
    std::vector<uint8_t> raw(row_bytes * h);
    if (!read_rows(&io, raw.data(), row_bytes)) {
      status = absl::DataLossError(absl::StrCat("corrupt JPEG data: ", io.err.message));
    } else {
      image = Image{w, h, channels, std::vector<float>(raw.size())};
      for (size_t i = 0; i < raw.size(); ++i) image.data[i] = raw[i] / 255.0f;
    }
  }
  jpeg_destroy_decompress(&io.cinfo);
  if (!status.ok()) return status;
  return image;
}

}  // namespace lms::io
