// The figures the TFLMS case study (arXiv 1807.02037, Sec. 5) read off nvprof,
// computed from a Recorder.
//
//   lms::ProfileSummary s = lms::summarize(recorder);
//   std::cout << lms::format_summary(s);
//
// Busy time of a stream is the length of the union of its intervals of one
// kind (nodes on compute, copies on d2h / h2d), so overlapping reports are
// not double counted. The span is first event to last event of the whole
// recording.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lms/profiler/recorder.h"

namespace lms {

struct ProfileSummary {
  double step_time_s = 0;              // mean over recorded steps, or the span if none
  double compute_utilisation_pct = 0;  // busy time of compute nodes / span * 100
  double h2d_gb_per_s = 0;             // bytes_h2d / busy time of h2d copies, GB = 1e9 B
  double d2h_gb_per_s = 0;             // bytes_d2h / busy time of d2h copies, GB = 1e9 B
  // Time some copy ran (union of the d2h and h2d copy intervals), and the
  // share of it during which a compute node also ran: 100% means every copy
  // was hidden behind compute (vDNN's and TFLMS's goal).
  double copy_busy_s = 0;
  double copy_overlap_pct = 0;
  // Union of the compute stream's stall intervals (Note [Stall]);
  // stalls reported on other streams are not counted.
  double stall_s = 0;
  double host_wait_s = 0;  // union of the host's wait intervals (not stall)
  // How far the host runs ahead of the device: for each compute node with
  // an issue marker (EventSink::on_issue), its start on the compute stream
  // less the time the host issued it, seconds; markers and nodes of the
  // same name are paired in order. Median and largest; 0 without markers.
  double issue_lead_median_s = 0;
  double issue_lead_max_s = 0;
  uint64_t peak_device_bytes = 0;
  uint64_t peak_pinned_host_bytes = 0;
  uint64_t bytes_d2h = 0;  // sum of copy bytes on the d2h stream
  uint64_t bytes_h2d = 0;  // sum of copy bytes on the h2d stream
  int64_t steps = 0;       // number of recorded steps
  double span_s = 0;       // first event to last event
};

// Length of the union of [start, end) intervals; order does not matter.
double union_length_s(std::vector<std::pair<double, double>> intervals);
// Length of the time covered by both unions (of `a` and of `b`).
double overlap_length_s(std::vector<std::pair<double, double>> a,
                        std::vector<std::pair<double, double>> b);

ProfileSummary summarize(const Timeline& timeline);
ProfileSummary summarize(const Recorder& recorder);

// A small aligned two-column table, one figure per line, units in the rows.
std::string format_summary(const ProfileSummary& summary);

}  // namespace lms
