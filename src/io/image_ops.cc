#include "lms/io/image_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "lms/status.h"

namespace lms::io {
namespace {

using Matrix3 = std::array<std::array<double, 3>, 3>;

// MATLAB rgb2ycbcr for [0, 1] input, rows Y/Cb/Cr, scaled by 1/255 below.
constexpr Matrix3 kRgbToYcbcr = {
    {{65.481, 128.553, 24.966}, {-37.797, -74.203, 112.000}, {112.000, -93.786, -18.214}}};
constexpr std::array<double, 3> kYcbcrOffset = {16.0, 128.0, 128.0};

Matrix3 invert(const Matrix3& m) {
  Matrix3 inv;
  double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
               m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
               m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      // Cofactor of (c, r) gives the adjugate's (r, c).
      int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
      inv[r][c] = (m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]) / det;
    }
  }
  return inv;
}

absl::Status require_rgb(const Image& image, const char* what) {
  LMS_RETURN_IF_ERROR(validate_image(image));
  if (image.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " needs a 3-channel image; got ", image.channels, " channel(s)"));
  }
  return absl::OkStatus();
}

// One output sample's taps along one axis.
struct Taps {
  std::vector<int> index;
  std::vector<double> weight;
};

double cubic(double x) {
  double ax = std::fabs(x), ax2 = ax * ax, ax3 = ax2 * ax;
  if (ax <= 1.0) return 1.5 * ax3 - 2.5 * ax2 + 1.0;
  if (ax <= 2.0) return -0.5 * ax3 + 2.5 * ax2 - 4.0 * ax + 2.0;
  return 0.0;
}

int mirror(int i, int n) {  // symmetric padding: ... 1 0 | 0 1 ... n-1 | n-1 n-2 ...
  int period = 2 * n;
  int m = ((i % period) + period) % period;
  return m < n ? m : period - 1 - m;
}

// MATLAB imresize's contributions(): 1-based output x maps to input
// u = x / scale + 0.5 (1 - 1 / scale); the kernel widens to 4 / scale when
// shrinking. Zero-weight taps are dropped.
std::vector<Taps> contributions(int in_len, int out_len) {
  const double scale = static_cast<double>(out_len) / in_len;
  const double kscale = std::min(scale, 1.0);
  const double width = 4.0 / kscale;
  const int taps = static_cast<int>(std::ceil(width)) + 2;
  std::vector<Taps> out(out_len);
  for (int i = 0; i < out_len; ++i) {
    double u = (i + 1) / scale + 0.5 * (1.0 - 1.0 / scale);
    int left = static_cast<int>(std::floor(u - width / 2.0));
    double sum = 0.0;
    for (int j = 0; j < taps; ++j) {
      double w = kscale * cubic(kscale * (u - (left + j)));
      if (w == 0.0) continue;
      out[i].index.push_back(mirror(left + j - 1, in_len));
      out[i].weight.push_back(w);
      sum += w;
    }
    for (double& w : out[i].weight) w /= sum;
  }
  return out;
}

Plane resize_rows(const Plane& in, int out_h) {  // changes height
  Plane out{in.width, out_h, std::vector<float>(static_cast<size_t>(in.width) * out_h)};
  std::vector<Taps> taps = contributions(in.height, out_h);
  std::vector<double> acc(in.width);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (size_t t = 0; t < taps[y].index.size(); ++t) {
      const float* row = &in.data[static_cast<size_t>(taps[y].index[t]) * in.width];
      double w = taps[y].weight[t];
      for (int x = 0; x < in.width; ++x) acc[x] += w * row[x];
    }
    float* dst = &out.data[static_cast<size_t>(y) * in.width];
    for (int x = 0; x < in.width; ++x) dst[x] = static_cast<float>(acc[x]);
  }
  return out;
}

Plane resize_cols(const Plane& in, int out_w) {  // changes width
  Plane out{out_w, in.height, std::vector<float>(static_cast<size_t>(out_w) * in.height)};
  std::vector<Taps> taps = contributions(in.width, out_w);
  for (int y = 0; y < in.height; ++y) {
    const float* row = &in.data[static_cast<size_t>(y) * in.width];
    float* dst = &out.data[static_cast<size_t>(y) * out_w];
    for (int x = 0; x < out_w; ++x) {
      double acc = 0.0;
      for (size_t t = 0; t < taps[x].index.size(); ++t) {
        acc += taps[x].weight[t] * row[taps[x].index[t]];
      }
      dst[x] = static_cast<float>(acc);
    }
  }
  return out;
}

}  // namespace

absl::Status validate_plane(const Plane& plane) {
  if (plane.width <= 0 || plane.height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("plane size ", plane.width, "x", plane.height,
                                                   " is invalid; width and height must be > 0"));
  }
  size_t want = static_cast<size_t>(plane.width) * plane.height;
  if (plane.data.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("plane data holds ", plane.data.size(),
                                                   " floats; ", plane.width, "x", plane.height,
                                                   " needs ", want));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plane> rgb_to_y(const Image& image) {
  LMS_RETURN_IF_ERROR(validate_image(image));
  Plane y{image.width, image.height,
          std::vector<float>(static_cast<size_t>(image.width) * image.height)};
  const auto& m = kRgbToYcbcr[0];
  const int c = image.channels;
  for (size_t i = 0; i < y.data.size(); ++i) {
    const float* p = &image.data[i * c];
    double r = p[0], g = p[c == 3 ? 1 : 0], b = p[c == 3 ? 2 : 0];
    y.data[i] = static_cast<float>((kYcbcrOffset[0] + m[0] * r + m[1] * g + m[2] * b) / 255.0);
  }
  return y;
}

absl::StatusOr<Image> rgb_to_ycbcr(const Image& image) {
  LMS_RETURN_IF_ERROR(require_rgb(image, "rgb_to_ycbcr"));
  Image out = image;
  for (size_t i = 0; i < image.data.size(); i += 3) {
    for (int k = 0; k < 3; ++k) {
      const auto& m = kRgbToYcbcr[k];
      double v = kYcbcrOffset[k] + m[0] * image.data[i] + m[1] * image.data[i + 1] +
                 m[2] * image.data[i + 2];
      out.data[i + k] = static_cast<float>(v / 255.0);
    }
  }
  return out;
}

absl::StatusOr<Image> ycbcr_to_rgb(const Image& image) {
  LMS_RETURN_IF_ERROR(require_rgb(image, "ycbcr_to_rgb"));
  static const Matrix3 inv = invert(kRgbToYcbcr);
  Image out = image;
  for (size_t i = 0; i < image.data.size(); i += 3) {
    double d[3];
    for (int k = 0; k < 3; ++k) d[k] = image.data[i + k] * 255.0 - kYcbcrOffset[k];
    for (int k = 0; k < 3; ++k) {
      out.data[i + k] = static_cast<float>(inv[k][0] * d[0] + inv[k][1] * d[1] + inv[k][2] * d[2]);
    }
  }
  return out;
}

absl::StatusOr<Plane> extract_channel(const Image& image, int c) {
  LMS_RETURN_IF_ERROR(validate_image(image));
  if (c < 0 || c >= image.channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel ", c, " out of range; image has ", image.channels));
  }
  Plane p{image.width, image.height,
          std::vector<float>(static_cast<size_t>(image.width) * image.height)};
  for (size_t i = 0; i < p.data.size(); ++i) p.data[i] = image.data[i * image.channels + c];
  return p;
}

absl::StatusOr<Image> merge_planes(const std::vector<Plane>& planes) {
  if (planes.size() != 1 && planes.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("merge_planes takes 1 or 3 planes; got ", planes.size()));
  }
  for (const Plane& p : planes) {
    LMS_RETURN_IF_ERROR(validate_plane(p));
    if (p.width != planes[0].width || p.height != planes[0].height) {
      return absl::InvalidArgumentError(absl::StrCat("plane sizes differ: ", p.width, "x", p.height,
                                                     " vs ", planes[0].width, "x",
                                                     planes[0].height));
    }
  }
  const int c = static_cast<int>(planes.size());
  Image out{planes[0].width, planes[0].height, c, std::vector<float>(planes[0].data.size() * c)};
  for (size_t i = 0; i < planes[0].data.size(); ++i) {
    for (int k = 0; k < c; ++k) out.data[i * c + k] = planes[k].data[i];
  }
  return out;
}

absl::StatusOr<Plane> resize_bicubic(const Plane& in, int out_w, int out_h) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  if (out_w <= 0 || out_h <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize to ", out_w, "x", out_h, " is invalid; sizes must be > 0"));
  }
  const double scale_w = static_cast<double>(out_w) / in.width;
  const double scale_h = static_cast<double>(out_h) / in.height;
  // imresize sorts the scales (stably, rows first) and resizes in that order.
  if (scale_h <= scale_w) return resize_cols(resize_rows(in, out_h), out_w);
  return resize_rows(resize_cols(in, out_w), out_h);
}

absl::StatusOr<Plane> crop(const Plane& in, int x, int y, int w, int h) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  if (w <= 0 || h <= 0 || x < 0 || y < 0 || x > in.width - w || y > in.height - h) {
    return absl::InvalidArgumentError(absl::StrCat("crop ", w, "x", h, " at (", x, ", ", y,
                                                   ") does not lie inside the ", in.width, "x",
                                                   in.height, " plane"));
  }
  Plane out{w, h, std::vector<float>(static_cast<size_t>(w) * h)};
  for (int r = 0; r < h; ++r) {
    auto src = in.data.begin() + static_cast<size_t>(y + r) * in.width + x;
    std::copy(src, src + w, out.data.begin() + static_cast<size_t>(r) * w);
  }
  return out;
}

absl::StatusOr<Plane> modcrop(const Plane& in, int scale) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  if (scale < 1 || in.width < scale || in.height < scale) {
    return absl::InvalidArgumentError(absl::StrCat("modcrop scale ", scale, " is invalid for a ",
                                                   in.width, "x", in.height, " plane"));
  }
  return crop(in, 0, 0, in.width - in.width % scale, in.height - in.height % scale);
}

absl::StatusOr<Plane> flip_horizontal(const Plane& in) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  Plane out = in;
  for (int y = 0; y < in.height; ++y) {
    auto row = out.data.begin() + static_cast<size_t>(y) * in.width;
    std::reverse(row, row + in.width);
  }
  return out;
}

absl::StatusOr<Plane> flip_vertical(const Plane& in) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  Plane out = in;
  for (int y = 0; y < in.height; ++y) {
    auto src = in.data.begin() + static_cast<size_t>(in.height - 1 - y) * in.width;
    std::copy(src, src + in.width, out.data.begin() + static_cast<size_t>(y) * in.width);
  }
  return out;
}

absl::StatusOr<Plane> rotate90(const Plane& in, int k) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  k = ((k % 4) + 4) % 4;
  Plane out = in;
  for (int step = 0; step < k; ++step) {
    Plane next{out.height, out.width, std::vector<float>(out.data.size())};
    // Counter-clockwise: new (x, y) = old (width - 1 - y, x).
    for (int y = 0; y < next.height; ++y) {
      for (int x = 0; x < next.width; ++x) {
        next.data[static_cast<size_t>(y) * next.width + x] =
            out.data[static_cast<size_t>(x) * out.width + (out.width - 1 - y)];
      }
    }
    out = std::move(next);
  }
  return out;
}

absl::StatusOr<Plane> quantize_8bit(const Plane& in) {
  LMS_RETURN_IF_ERROR(validate_plane(in));
  Plane out = in;
  for (float& v : out.data) {
    float c = std::isnan(v) ? 0.0f : std::clamp(v, 0.0f, 1.0f);
    v = static_cast<float>(std::round(c * 255.0f) / 255.0);
  }
  return out;
}

absl::StatusOr<double> psnr(const Plane& a, const Plane& b, int border) {
  LMS_RETURN_IF_ERROR(validate_plane(a));
  LMS_RETURN_IF_ERROR(validate_plane(b));
  if (a.width != b.width || a.height != b.height) {
    return absl::InvalidArgumentError(absl::StrCat("psnr of differently sized planes: ", a.width,
                                                   "x", a.height, " vs ", b.width, "x", b.height));
  }
  if (border < 0 || 2 * border >= a.width || 2 * border >= a.height) {
    return absl::InvalidArgumentError(absl::StrCat("psnr border ", border, " leaves no pixel of a ",
                                                   a.width, "x", a.height, " plane"));
  }
  double sum = 0.0;
  for (int y = border; y < a.height - border; ++y) {
    for (int x = border; x < a.width - border; ++x) {
      size_t i = static_cast<size_t>(y) * a.width + x;
      double d = static_cast<double>(a.data[i]) - b.data[i];
      sum += d * d;
    }
  }
  double mse = sum / (static_cast<double>(a.width - 2 * border) * (a.height - 2 * border));
  if (mse == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(1.0 / mse);
}

}  // namespace lms::io
