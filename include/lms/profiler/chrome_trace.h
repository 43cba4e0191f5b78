// Chrome Trace Event Format writer (opens in Perfetto and chrome://tracing).
//
//   lms::TraceOptions opts;
//   opts.device_capacity_bytes = 256 << 20;  // draws a capacity counter
//   LMS_RETURN_IF_ERROR(lms::write_chrome_trace(recorder, opts, "step.trace.json"));
//
// Layout: one process; one track (tid) per stream — host, compute, d2h, h2d —
// named by "thread_name" metadata events, plus a "steps" track when steps were
// recorded. Nodes, copies, stalls and host waits are "X" (complete) events:
//   node:      name = node name, cat = op, args {op}
//   copy:      name = tensor,    cat = "swap_out" (d2h) / "swap_in" (h2d) /
//              "copy" (other streams), args {tensor, bytes}
//   stall:     name = reason,    cat = "stall", args {node, reason}; on the
//              compute track: the compute stream waiting on a copy (Note
//              [Stall])
//   host wait: name = reason,    cat = "host_wait", args {node, reason}; on
//              the host track: the host blocked in a device call, not stall
// Memory is "C" (counter) events: "device_bytes_in_use",
// "pinned_host_bytes_in_use", and "device_capacity_bytes" when the options
// give a capacity. Timestamps are microseconds relative to the first event.
// Format reference: "Trace Event Format" (Google, 2016), JSON Object Format.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "lms/profiler/recorder.h"

namespace lms {

struct TraceOptions {
  std::string process_name = "lms";
  int pid = 1;
  // Device memory capacity in bytes; 0 = no capacity counter.
  uint64_t device_capacity_bytes = 0;
};

// The trace as a JSON string (what write_chrome_trace writes).
std::string chrome_trace_json(const Timeline& timeline, const TraceOptions& options);

// Writes the trace of everything `recorder` holds to `path`, atomically (temp
// file + rename). Errors: InvalidArgument for an empty path; Internal naming
// the path when it cannot be written. An empty recorder gives a valid trace
// with only metadata events.
absl::Status write_chrome_trace(const Recorder& recorder, const TraceOptions& options,
                                const std::string& path);

}  // namespace lms
