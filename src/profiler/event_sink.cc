#include "lms/profiler/event_sink.h"

#include <chrono>

namespace lms {

const char* stream_name(StreamKind stream) {
  switch (stream) {
    case StreamKind::kHost:
      return "host";
    case StreamKind::kCompute:
      return "compute";
    case StreamKind::kD2H:
      return "d2h";
    case StreamKind::kH2D:
      return "h2d";
    case StreamKind::kComm:
      return "comm";
  }
  return "unknown";
}

double now_s() {
  using Seconds = std::chrono::duration<double>;
  return std::chrono::duration_cast<Seconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace lms
