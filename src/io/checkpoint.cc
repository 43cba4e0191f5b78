#include "lms/io/checkpoint.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "lms/io/file_util.h"
#include "lms/status.h"

namespace lms::io {
namespace {

constexpr char kMagic[8] = {'L', 'M', 'S', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8;

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

class Writer {
 public:
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void floats(const std::vector<float>& v) {
    size_t at = bytes_.size();
    bytes_.resize(at + v.size() * 4);
    if constexpr (std::endian::native == std::endian::little) {
      if (!v.empty()) std::memcpy(&bytes_[at], v.data(), v.size() * 4);
    } else {
      for (size_t i = 0; i < v.size(); ++i)
        put_le(&bytes_[at + 4 * i], std::bit_cast<uint32_t>(v[i]), 4);
    }
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

  static void put_le(uint8_t* dst, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
  }

 private:
  void le(uint64_t v, int n) {
    size_t at = bytes_.size();
    bytes_.resize(at + n);
    put_le(&bytes_[at], v, n);
  }
  std::vector<uint8_t> bytes_;
};

// Bounds-checked little-endian reads; every getter returns false past the end.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool u32(uint32_t* v) { return le(v, 4); }
  bool u64(uint64_t* v) { return le(v, 8); }
  bool str(std::string* s) {
    uint32_t len;
    if (!u32(&len) || n_ - at_ < len) return false;
    s->assign(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return true;
  }
  bool floats(uint64_t count, std::vector<float>* v) {
    if ((n_ - at_) / 4 < count) return false;
    v->resize(count);
    if constexpr (std::endian::native == std::endian::little) {
      if (count > 0) std::memcpy(v->data(), p_ + at_, count * 4);
    } else {
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t bits = 0;
        for (int b = 0; b < 4; ++b) bits |= uint32_t{p_[at_ + 4 * i + b]} << (8 * b);
        (*v)[i] = std::bit_cast<float>(bits);
      }
    }
    at_ += count * 4;
    return true;
  }
  bool at_end() const { return at_ == n_; }

 private:
  template <typename T>
  bool le(T* v, int n) {
    if (n_ - at_ < static_cast<size_t>(n)) return false;
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= uint64_t{p_[at_ + i]} << (8 * i);
    *v = static_cast<T>(x);
    at_ += n;
    return true;
  }
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

absl::Status validate_tensors(const std::vector<NamedTensor>& tensors) {
  std::set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("checkpoint tensor with an empty name");
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate checkpoint tensor name '", t.name, "'"));
    }
    if (t.shape.size() > kMaxCheckpointRank) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has rank ",
                                                     t.shape.size(), "; at most ",
                                                     kMaxCheckpointRank, " allowed"));
    }
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has negative dimension ", d));
      }
      count *= static_cast<uint64_t>(d);
    }
    if (count != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' shape holds ", count,
                                                     " elements but data has ", t.data.size()));
    }
  }
  return absl::OkStatus();
}

std::vector<uint8_t> encode(const std::vector<NamedTensor>& tensors, int64_t step,
                            const std::map<std::string, std::string>& meta) {
  Writer w;
  w.bytes().resize(kHeaderBytes);  // filled in once the payload is known
  w.u64(static_cast<uint64_t>(step));
  w.u32(static_cast<uint32_t>(meta.size()));
  for (const auto& [key, value] : meta) {
    w.str(key);
    w.str(value);
  }
  w.u32(static_cast<uint32_t>(tensors.size()));
  for (const NamedTensor& t : tensors) {
    w.str(t.name);
    w.u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.u64(static_cast<uint64_t>(d));
    w.u64(t.data.size());
    w.floats(t.data);
  }
  std::vector<uint8_t>& b = w.bytes();
  const size_t payload = b.size() - kHeaderBytes;
  std::memcpy(b.data(), kMagic, 8);
  Writer::put_le(&b[8], kCheckpointVersion, 4);
  Writer::put_le(&b[12], crc32(b.data() + kHeaderBytes, payload), 4);
  Writer::put_le(&b[16], payload, 8);
  return std::move(b);
}

// Parses a payload whose checksum already matched; false when malformed.
bool decode_payload(Reader& r, Checkpoint* ck) {
  uint64_t step;
  uint32_t n_meta, n_tensors;
  if (!r.u64(&step) || !r.u32(&n_meta)) return false;
  ck->step = static_cast<int64_t>(step);
  for (uint32_t i = 0; i < n_meta; ++i) {
    std::string key, value;
    if (!r.str(&key) || !r.str(&value)) return false;
    ck->meta[key] = value;
  }
  if (!r.u32(&n_tensors)) return false;
  for (uint32_t i = 0; i < n_tensors; ++i) {
    NamedTensor t;
    uint32_t rank;
    if (!r.str(&t.name) || !r.u32(&rank) || rank > kMaxCheckpointRank) return false;
    uint64_t product = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      uint64_t d;
      if (!r.u64(&d) || d > (uint64_t{1} << 40)) return false;
      t.shape.push_back(static_cast<int64_t>(d));
      product =
          d == 0 ? 0 : (product > (uint64_t{1} << 40) / d ? (uint64_t{1} << 41) : product * d);
    }
    uint64_t count;
    if (!r.u64(&count) || count != product || !r.floats(count, &t.data)) return false;
    ck->tensors.push_back(std::move(t));
  }
  return r.at_end();
}

}  // namespace

uint32_t crc32(const uint8_t* bytes, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ bytes[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

const NamedTensor* Checkpoint::find(const std::string& name) const {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::Status save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                             int64_t step, const std::map<std::string, std::string>& meta) {
  absl::Status valid = validate_tensors(tensors);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot save ", path, ": ", valid.message()));
  }
  std::vector<uint8_t> bytes = encode(tensors, step, meta);
  return write_file_atomically(path, bytes.data(), bytes.size());
}

absl::StatusOr<Checkpoint> load_checkpoint(const std::string& path) {
  LMS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path));
  auto loss = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid lms checkpoint: ", why));
  };
  if (bytes.size() < kHeaderBytes) {
    return loss(absl::StrCat("file is ", bytes.size(), " bytes, shorter than the header"));
  }
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return loss("wrong magic");
  Reader header(bytes.data() + 8, kHeaderBytes - 8);
  uint32_t version = 0, crc = 0;
  uint64_t payload = 0;
  header.u32(&version);
  header.u32(&crc);
  header.u64(&payload);
  if (version != kCheckpointVersion) {
    return loss(absl::StrCat("unsupported format version ", version, " (this build reads ",
                             kCheckpointVersion, ")"));
  }
  if (payload != bytes.size() - kHeaderBytes) {
    return loss(absl::StrCat("header promises ", payload, " payload bytes, file holds ",
                             bytes.size() - kHeaderBytes, " (truncated or padded)"));
  }
  if (crc32(bytes.data() + kHeaderBytes, payload) != crc) return loss("CRC32 checksum mismatch");
  Checkpoint ck;
  Reader r(bytes.data() + kHeaderBytes, payload);
  if (!decode_payload(r, &ck)) return loss("malformed payload");
  return ck;
}

absl::Status validate_checkpoint_values(const std::vector<NamedTensor>& tensors, int64_t step,
                                        const std::string& path) {
  if (step < 0) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, ": field 'step' is ",
                                                      step, "; a usable checkpoint has step >= 0"));
  }
  for (const NamedTensor& t : tensors) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (std::isfinite(t.data[i])) continue;
      if (bad++ == 0) first = i;
    }
    if (bad > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, ": tensor '", t.name, "' holds ", bad, " non-finite value",
          bad == 1 ? "" : "s", " (first: ", std::isnan(t.data[first]) ? "NaN" : "Inf",
          " at element ", first, " of ", t.data.size(),
          "); every value must be finite (the run that wrote it diverged; use an earlier "
          "checkpoint or a lower learning rate)"));
    }
  }
  return absl::OkStatus();
}

absl::Status validate_checkpoint(const Checkpoint& ck, const std::string& path) {
  return validate_checkpoint_values(ck.tensors, ck.step, path);
}

absl::StatusOr<Checkpoint> load_usable_checkpoint(const std::string& path) {
  LMS_ASSIGN_OR_RETURN(Checkpoint ck, load_checkpoint(path));
  LMS_RETURN_IF_ERROR(validate_checkpoint(ck, path));
  return ck;
}

}  // namespace lms::io
