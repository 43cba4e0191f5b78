// The profiler: an event sink that the executor, the device and its
// allocators report to, a thread-safe Recorder that keeps what they report,
// and the writers of what a user reads off a run: a Chrome trace (Perfetto /
// chrome://tracing), the summary figures that nvprof gave in the TFLMS case
// study, and a memory-over-time SVG plot.
//
//   lms::Recorder recorder;
//   LMS_ASSIGN_OR_RETURN(auto session, lms::Session::create(train, *device,
//                                                           {.sink = &recorder}));
//   LMS_RETURN_IF_ERROR(session->run(feeds, &step));
//   std::cout << lms::format_summary(lms::summarize(recorder));
//   LMS_RETURN_IF_ERROR(lms::write_chrome_trace(recorder, {}, "step.trace.json"));
//
// Times are seconds on std::chrono::steady_clock (lms::now_s()), bytes are
// bytes, rates GB/s with GB = 1e9 bytes. No globals: the sink is injected.
#pragma once

#include "lms/profiler/atomic_file.h"   // IWYU pragma: export
#include "lms/profiler/chrome_trace.h"  // IWYU pragma: export
#include "lms/profiler/event_sink.h"    // IWYU pragma: export
#include "lms/profiler/memory_plot.h"   // IWYU pragma: export
#include "lms/profiler/recorder.h"      // IWYU pragma: export
#include "lms/profiler/summary.h"       // IWYU pragma: export
