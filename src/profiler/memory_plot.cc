#include "lms/profiler/memory_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lms/profiler/atomic_file.h"

namespace lms {
namespace {

// Plot geometry in SVG user units.
constexpr double kWidth = 860, kHeight = 460;
constexpr double kLeft = 80, kRight = 200, kTop = 50, kBottom = 60;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr const char* kColours[] = {"#1f77b4", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#17becf"};

std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A 1-2-5 tick step giving about `target` ticks over [0, max].
double nice_step(double max, int target) {
  double raw = max / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return step * mag;
}

struct Scale {
  double y_max_mib;
  double x(double fraction) const { return kLeft + fraction * kPlotW; }
  double y(double mib) const { return kTop + kPlotH * (1.0 - mib / y_max_mib); }
};

absl::Status validate(const std::vector<MemorySeries>& series) {
  if (series.empty()) {
    return absl::InvalidArgumentError("memory plot: no series given; pass at least one");
  }
  for (const MemorySeries& s : series) {
    if (s.points.empty()) {
      return absl::InvalidArgumentError(
          fmt::format("memory plot: series '{}' has no points; record memory samples", s.label));
    }
    for (const auto& [t, bytes] : s.points) {
      if (!std::isfinite(t)) {
        return absl::InvalidArgumentError(
            fmt::format("memory plot: series '{}' has a non-finite time {}", s.label, t));
      }
    }
  }
  return absl::OkStatus();
}

// The step polyline of one series: 2n - 1 points (2 when n = 1).
std::string polyline_points(const MemorySeries& s, const Scale& sc) {
  auto pts = s.points;
  std::stable_sort(pts.begin(), pts.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const double t0 = pts.front().first, span = pts.back().first - t0;
  auto frac = [&](double t) { return span > 0 ? (t - t0) / span : 0.0; };
  std::string out;
  auto add = [&](double f, uint64_t bytes) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{:.2f},{:.2f}", sc.x(f), sc.y(static_cast<double>(bytes) / kMiB));
  };
  add(0.0, pts[0].second);
  for (size_t i = 1; i < pts.size(); ++i) {
    add(frac(pts[i].first), pts[i - 1].second);
    add(frac(pts[i].first), pts[i].second);
  }
  if (pts.size() == 1) add(1.0, pts[0].second);
  return out;
}

std::string axes(const Scale& sc, std::string_view x_label) {
  std::string out = fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000\"/>\n", kLeft,
      kTop, kPlotW, kPlotH);
  const double step = nice_step(sc.y_max_mib, 6);
  for (double v = 0; v <= sc.y_max_mib + step * 1e-9; v += step) {
    out += fmt::format(
        "<line class=\"ytick\" x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" y2=\"{1:.2f}\" "
        "stroke=\"#ddd\"/>\n<text x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft, sc.y(v), kLeft + kPlotW, kLeft - 6, sc.y(v) + 4, v);
  }
  for (int i = 0; i <= 4; ++i) {
    double f = i / 4.0;
    out += fmt::format(
        "<line class=\"xtick\" x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" "
        "stroke=\"#000\"/>"
        "\n<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        sc.x(f), kTop + kPlotH, kTop + kPlotH + 5, kTop + kPlotH + 20, f);
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(20,{}) rotate(-90)\" text-anchor=\"middle\">"
      "bytes in use (MiB)</text>\n",
      kLeft + kPlotW / 2, kHeight - 15, xml_escape(x_label), kTop + kPlotH / 2);
  return out;
}

std::string legend_entry(size_t row, const char* colour, std::string_view label, bool dashed) {
  double x = kLeft + kPlotW + 15, y = kTop + 10 + 22.0 * static_cast<double>(row);
  return fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>\n"
      "<text x=\"{5}\" y=\"{6}\">{7}</text>\n",
      x, y, x + 25, colour, dashed ? " stroke-dasharray=\"6,4\"" : "", x + 32, y + 4,
      xml_escape(label));
}

double y_max_mib(const std::vector<MemorySeries>& series, uint64_t capacity_bytes) {
  uint64_t top = capacity_bytes;
  for (const MemorySeries& s : series) {
    for (const auto& p : s.points) top = std::max(top, p.second);
  }
  double mib = static_cast<double>(top) / kMiB * 1.08;
  return mib > 0 ? mib : 1.0;
}

}  // namespace

absl::StatusOr<std::string> memory_svg(const std::vector<MemorySeries>& series,
                                       uint64_t capacity_bytes, std::string_view title,
                                       std::string_view x_label) {
  absl::Status valid = validate(series);
  if (!valid.ok()) return valid;
  const Scale sc{y_max_mib(series, capacity_bytes)};
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
      "<text x=\"{2}\" y=\"25\" text-anchor=\"middle\" font-size=\"15\">{3}</text>\n",
      kWidth, kHeight, kWidth / 2, xml_escape(title));
  out += axes(sc, x_label);
  for (size_t i = 0; i < series.size(); ++i) {
    const char* colour = kColours[i % std::size(kColours)];
    out += fmt::format(
        "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
        "points=\"{}\"/>\n",
        colour, polyline_points(series[i], sc));
    out += legend_entry(i, colour, series[i].label, false);
  }
  if (capacity_bytes > 0) {
    double y = sc.y(static_cast<double>(capacity_bytes) / kMiB);
    out += fmt::format(
        "<line class=\"capacity\" x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" y2=\"{1:.2f}\" "
        "stroke=\"red\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n",
        kLeft, y, kLeft + kPlotW);
    std::string label = fmt::format("capacity {:.1f} MiB", capacity_bytes / kMiB);
    out += legend_entry(series.size(), "red", label, true);
  }
  out += "</svg>\n";
  return out;
}

absl::Status write_memory_svg(const std::vector<MemorySeries>& series, uint64_t capacity_bytes,
                              const std::string& path, std::string_view title,
                              std::string_view x_label) {
  if (path.empty()) return absl::InvalidArgumentError("write_memory_svg: output path is empty");
  absl::StatusOr<std::string> svg = memory_svg(series, capacity_bytes, title, x_label);
  if (!svg.ok()) return svg.status();
  return write_file_atomically(path, *svg);
}

MemorySeries device_series(const Recorder& recorder, std::string label, int64_t step) {
  const Timeline t = recorder.snapshot();
  MemorySeries out{std::move(label), {}};
  const auto& samples = t.samples(MemoryKind::kDevice);
  if (step < 0) {
    for (const MemorySample& s : samples) out.points.emplace_back(s.t_s, s.bytes_in_use);
    return out;
  }
  auto it = std::find_if(t.steps.begin(), t.steps.end(),
                         [&](const StepRecord& r) { return r.step == step; });
  if (it == t.steps.end()) return out;
  uint64_t at_start = 0;
  for (const MemorySample& s : samples) {
    if (s.t_s <= it->start_s) at_start = s.bytes_in_use;
  }
  out.points.emplace_back(it->start_s, at_start);
  for (const MemorySample& s : samples) {
    if (s.t_s > it->start_s && s.t_s <= it->end_s) out.points.emplace_back(s.t_s, s.bytes_in_use);
  }
  out.points.emplace_back(it->end_s, out.points.back().second);
  return out;
}

MemorySeries position_series(const std::vector<uint64_t>& bytes_by_position, std::string label) {
  MemorySeries out{std::move(label), {}};
  if (bytes_by_position.empty()) return out;
  for (size_t p = 0; p < bytes_by_position.size(); ++p) {
    out.points.emplace_back(static_cast<double>(p), bytes_by_position[p]);
  }
  out.points.emplace_back(static_cast<double>(bytes_by_position.size()), bytes_by_position.back());
  return out;
}

}  // namespace lms
