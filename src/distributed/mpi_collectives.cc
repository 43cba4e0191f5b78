// The collectives of MpiEngine, all built on point-to-point messages so that
// every wait polls (mpi_engine.cc) and names the ranks it still waits for.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "distributed/mpi_engine.h"
#include "lms/status.h"

namespace lms::distributed {
namespace {

// The steps of the collectives; each channel has its own range of tags.
enum Step : int {
  kReduceScatter = 0,
  kGatherChunks = 1,
  kGatherLengths = 2,
  kGatherBytes = 3,
  kBarrier = 4
};

int tag(Channel channel, Step step) { return (channel == Channel::kStream ? 100 : 200) + step; }

// Rank r owns elements [chunk_begin(r), chunk_begin(r + 1)) of n: contiguous
// chunks whose lengths differ by at most one, the longer ones first.
int64_t chunk_begin(int64_t n, int size, int r) {
  return n / size * r + std::min<int64_t>(r, n % size);
}

// Per Note [Deterministic all-reduce], acc = c_0; acc += c_1; ...; then times
// scale, every step rounded to T. `out` may be one of the contributions:
// each element is read before it is written.
template <typename T>
void sum_in_rank_order(const std::vector<const T*>& contributions, int64_t length, T scale,
                       T* out) {
  for (int64_t k = 0; k < length; ++k) {
    T acc = contributions[0][k];
    for (size_t q = 1; q < contributions.size(); ++q) acc += contributions[q][k];
    out[k] = acc * scale;
  }
}

struct GatherBuffers {
  std::vector<int64_t> lengths;
  std::vector<std::string> strings;
};

}  // namespace

int64_t MpiEngine::scratch_elements(int64_t elements) const {
  return (size_ - 1) * (chunk_begin(elements, size_, 1) - chunk_begin(elements, size_, 0));
}

template <typename T>
absl::Status MpiEngine::all_reduce(std::span<T> data, T scale, std::span<T> scratch,
                                   Channel channel, std::string_view what, bool& in_flight) {
  in_flight = false;
  MutexLock lock(&channel_mutex(channel));
  LMS_RETURN_IF_ERROR(check_usable());
  const int64_t n = static_cast<int64_t>(data.size());
  LMS_CHECK(static_cast<int64_t>(scratch.size()) >= scratch_elements(n));
  const int64_t begin = chunk_begin(n, size_, rank_);
  const int64_t length = chunk_begin(n, size_, rank_ + 1) - begin;
  const int64_t bytes = length * static_cast<int64_t>(sizeof(T));

  // Reduce-scatter: every peer's copy of this rank's chunk arrives in a slot
  // of `scratch`; this rank sends each peer its chunk.
  std::vector<const T*> contributions(static_cast<size_t>(size_));
  Exchange scatter;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) {
      contributions[static_cast<size_t>(peer)] = data.data() + begin;
      continue;
    }
    T* slot = scratch.data() + (peer - (peer > rank_ ? 1 : 0)) * length;
    contributions[static_cast<size_t>(peer)] = slot;
    const int64_t peer_begin = chunk_begin(n, size_, peer);
    const int64_t peer_length = chunk_begin(n, size_, peer + 1) - peer_begin;
    if (length > 0) post_recv(scatter, slot, bytes, peer, tag(channel, kReduceScatter));
    if (peer_length > 0) {
      post_send(scatter, data.data() + peer_begin, peer_length * static_cast<int64_t>(sizeof(T)),
                peer, tag(channel, kReduceScatter));
    }
  }
  LMS_RETURN_IF_ERROR(wait(scatter, what, in_flight));
  sum_in_rank_order(contributions, length, scale, data.data() + begin);

  // All-gather: every rank sends its summed chunk to every peer.
  Exchange gather;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const int64_t peer_begin = chunk_begin(n, size_, peer);
    const int64_t peer_length = chunk_begin(n, size_, peer + 1) - peer_begin;
    if (peer_length > 0) {
      post_recv(gather, data.data() + peer_begin, peer_length * static_cast<int64_t>(sizeof(T)),
                peer, tag(channel, kGatherChunks));
    }
    if (length > 0)
      post_send(gather, data.data() + begin, bytes, peer, tag(channel, kGatherChunks));
  }
  return wait(gather, what, in_flight);
}

template absl::Status MpiEngine::all_reduce<float>(std::span<float>, float, std::span<float>,
                                                   Channel, std::string_view, bool&);
template absl::Status MpiEngine::all_reduce<double>(std::span<double>, double, std::span<double>,
                                                    Channel, std::string_view, bool&);

absl::StatusOr<std::vector<std::string>> MpiEngine::all_gather(std::string_view mine) {
  MutexLock lock(&host_mu_);
  LMS_RETURN_IF_ERROR(check_usable());
  auto buffers = std::make_shared<GatherBuffers>();
  buffers->lengths.assign(static_cast<size_t>(size_), 0);
  buffers->strings.resize(static_cast<size_t>(size_));
  buffers->lengths[static_cast<size_t>(rank_)] = static_cast<int64_t>(mine.size());
  buffers->strings[static_cast<size_t>(rank_)] = std::string(mine);
  const std::string& own = buffers->strings[static_cast<size_t>(rank_)];
  bool in_flight = false;
  auto kept_on_failure = [&](absl::Status status) {
    if (in_flight) keep(buffers);  // Note [Abandoned messages]
    return status;
  };

  Exchange lengths;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    post_recv(lengths, &buffers->lengths[static_cast<size_t>(peer)], sizeof(int64_t), peer,
              tag(Channel::kHost, kGatherLengths));
    post_send(lengths, &buffers->lengths[static_cast<size_t>(rank_)], sizeof(int64_t), peer,
              tag(Channel::kHost, kGatherLengths));
  }
  if (absl::Status s = wait(lengths, "all_gather", in_flight); !s.ok()) return kept_on_failure(s);

  for (int peer = 0; peer < size_; ++peer) {
    if (const int64_t length = buffers->lengths[static_cast<size_t>(peer)]; length < 0) {
      return absl::InternalError(absl::StrCat("all_gather: rank ", peer, " announced ", length,
                                              " bytes; the ranks called different collectives"));
    }
  }
  Exchange strings;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const int64_t length = buffers->lengths[static_cast<size_t>(peer)];
    std::string& theirs = buffers->strings[static_cast<size_t>(peer)];
    theirs.resize(static_cast<size_t>(length));
    if (length > 0) {
      post_recv(strings, theirs.data(), length, peer, tag(Channel::kHost, kGatherBytes));
    }
    if (!own.empty()) {
      post_send(strings, own.data(), static_cast<int64_t>(own.size()), peer,
                tag(Channel::kHost, kGatherBytes));
    }
  }
  if (absl::Status s = wait(strings, "all_gather", in_flight); !s.ok()) return kept_on_failure(s);
  return std::move(buffers->strings);
}

absl::Status MpiEngine::barrier() {
  MutexLock lock(&host_mu_);
  LMS_RETURN_IF_ERROR(check_usable());
  static char nothing = 0;  // zero-byte messages carry no data
  Exchange ex;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    post_recv(ex, &nothing, 0, peer, tag(Channel::kHost, kBarrier));
    post_send(ex, &nothing, 0, peer, tag(Channel::kHost, kBarrier));
  }
  bool in_flight = false;
  return wait(ex, "barrier", in_flight);
}

}  // namespace lms::distributed
