#include "lms/io/image.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "io/codec_internal.h"
#include "lms/io/file_util.h"
#include "lms/status.h"

namespace lms::io {
namespace {

bool has_png_signature(const std::vector<uint8_t>& b) {
  static constexpr uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), kSig, 8) == 0;
}

bool has_jpeg_signature(const std::vector<uint8_t>& b) {
  return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

bool is_image_extension(const std::string& name) {
  size_t dot = name.find_last_of('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

}  // namespace

absl::Status validate_image(const Image& image) {
  if (image.width <= 0 || image.height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("image size ", image.width, "x", image.height,
                                                   " is invalid; width and height must be > 0"));
  }
  if (image.channels != 1 && image.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("image has ", image.channels, " channels; 1 (gray) or 3 (RGB) allowed"));
  }
  size_t want = static_cast<size_t>(image.width) * image.height * image.channels;
  if (image.data.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("image data holds ", image.data.size(),
                                                   " floats; ", image.width, "x", image.height, "x",
                                                   image.channels, " needs ", want));
  }
  return absl::OkStatus();
}

absl::StatusOr<Image> read_image(const std::string& path) {
  LMS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path));
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, not an image"));
  }
  absl::StatusOr<Image> image;
  if (has_png_signature(bytes)) {
    image = decode_png(bytes.data(), bytes.size());
  } else if (has_jpeg_signature(bytes)) {
    image = decode_jpeg(bytes.data(), bytes.size());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a PNG or JPEG file (unrecognised signature)"));
  }
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

absl::Status write_png(const Image& image, const std::string& path) {
  absl::Status valid = validate_image(image);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": ", valid.message()));
  }
  absl::StatusOr<std::vector<uint8_t>> bytes = encode_png(image);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("cannot encode ", path, ": ", bytes.status().message()));
  }
  return write_file_atomically(path, bytes->data(), bytes->size());
}

absl::StatusOr<std::vector<std::string>> list_images(const std::string& dir,
                                                     std::vector<std::string>* rejected) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno_status(errno, absl::StrCat("cannot list image folder ", dir));
  std::vector<std::string> paths;
  auto reject = [&](const std::string& name, const char* why) {
    if (rejected != nullptr) rejected->push_back(absl::StrCat(name, ": ", why));
  };
  while (dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    std::string full = absl::StrCat(dir, dir.back() == '/' ? "" : "/", name);
    struct stat st;
    if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      reject(name, "not a regular file");
    } else if (!is_image_extension(name)) {
      reject(name, "unsupported extension (allowed: .png, .jpg, .jpeg)");
    } else {
      paths.push_back(full);
    }
  }
  ::closedir(d);
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string file_reason(const std::string& path, const absl::Status& status) {
  size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string why = absl::StrReplaceAll(status.message(), {{path + ": ", ""}, {" " + path, ""}});
  return absl::StrCat(name, ": ", why);
}

std::string no_usable_image_message(const std::string& dir, std::vector<std::string> reasons) {
  if (reasons.empty()) return absl::StrCat("no usable image in ", dir, ": the folder is empty");
  std::sort(reasons.begin(), reasons.end());
  size_t more = 0;
  if (reasons.size() > kMaxListedReasons) {
    more = reasons.size() - kMaxListedReasons;
    reasons.resize(kMaxListedReasons);
  }
  return absl::StrCat("no usable image in ", dir, ": ", absl::StrJoin(reasons, "; "),
                      more > 0 ? absl::StrCat("; and ", more, " more files") : "");
}

absl::StatusOr<std::vector<Image>> load_images(const std::string& dir, int max_images,
                                               std::vector<std::string>* warnings,
                                               std::vector<std::string>* names) {
  if (max_images < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_images is ", max_images, "; use 0 for all or a positive count"));
  }
  std::vector<std::string> reasons;
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> paths, list_images(dir, &reasons));
  std::vector<Image> images;
  for (const std::string& path : paths) {
    if (max_images > 0 && static_cast<int>(images.size()) == max_images) break;
    absl::StatusOr<Image> image = read_image(path);
    if (!image.ok()) {
      reasons.push_back(file_reason(path, image.status()));
      if (warnings != nullptr) warnings->push_back(image.status().ToString());
      continue;
    }
    images.push_back(*std::move(image));
    if (names != nullptr) names->push_back(path);
  }
  if (images.empty()) return absl::NotFoundError(no_usable_image_message(dir, std::move(reasons)));
  return images;
}

}  // namespace lms::io
