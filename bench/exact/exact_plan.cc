#include "exact_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "coin/Cbc_C_Interface.h"
#include "fmt/format.h"

namespace lms::exact {
namespace {

// The program in these units: MiB for memory rows, milliseconds for the
// objective, so that the solver's tolerances are far below one byte-scale
// or microsecond-scale difference that matters.
constexpr double kMiB = 1 << 20;
constexpr double kMs = 1e3;

std::vector<double> prefix_of(const Problem& pr) {
  std::vector<double> prefix(pr.nodes.size() + 1, 0);
  for (size_t p = 0; p < pr.nodes.size(); ++p) prefix[p + 1] = prefix[p] + pr.nodes[p].seconds;
  return prefix;
}

// Where a swap-out is issued: after the producer, or a graph input's first
// read.
int32_t issue_position(const Problem::Tensor& t) {
  return t.producer >= 0 ? t.producer : t.uses.front();
}

double in_stall(const Problem& pr, const std::vector<double>& prefix, int32_t j, int32_t trigger) {
  const Problem::Gap& g = pr.gaps[j];
  return std::max(0.0, pr.tensors[g.tensor].in_s - (prefix[g.before] - prefix[trigger + 1]));
}

double out_stall(const Problem& pr, const std::vector<double>& prefix, int32_t j) {
  const Problem::Gap& g = pr.gaps[j];
  const Problem::Tensor& t = pr.tensors[g.tensor];
  return std::max(0.0, t.out_s - (prefix[g.after + 1] - prefix[issue_position(t) + 1]));
}

bool recomputable_tensor(const Problem& pr, int32_t t) {
  const int32_t p = pr.tensors[t].producer;
  return p >= 0 && pr.nodes[p].recomputable;
}

// The gap of tensor t with after <= q < before, or -1.
int32_t covering_gap(const std::vector<std::vector<int32_t>>& gaps_of, const Problem& pr, int32_t t,
                     int32_t q) {
  for (int32_t c : gaps_of[t]) {
    if (pr.gaps[c].after <= q && q < pr.gaps[c].before) return c;
  }
  return -1;
}

std::vector<std::vector<int32_t>> gaps_by_tensor(const Problem& pr) {
  std::vector<std::vector<int32_t>> out(pr.tensors.size());
  for (int32_t j = 0; j < static_cast<int32_t>(pr.gaps.size()); ++j) {
    out[pr.gaps[j].tensor].push_back(j);
  }
  return out;
}

absl::Status check_problem(const Problem& pr) {
  const int32_t n = static_cast<int32_t>(pr.nodes.size());
  if (static_cast<int32_t>(pr.base_bytes.size()) != n) {
    return absl::InvalidArgumentError(fmt::format(
        "exact plan: base_bytes has {} entries for {} positions", pr.base_bytes.size(), n));
  }
  for (size_t p = 0; p < pr.nodes.size(); ++p) {
    for (int32_t i : pr.nodes[p].inputs) {
      if (i < 0 || i >= static_cast<int32_t>(pr.tensors.size())) {
        return absl::InvalidArgumentError(
            fmt::format("exact plan: node at position {} reads unknown tensor {}", p, i));
      }
    }
  }
  for (size_t t = 0; t < pr.tensors.size(); ++t) {
    const Problem::Tensor& x = pr.tensors[t];
    if (x.producer >= n || (x.producer < 0 && x.uses.empty() && !x.always_present) ||
        !std::is_sorted(x.uses.begin(), x.uses.end()) ||
        (!x.uses.empty() && (x.uses.front() < 0 || x.uses.back() >= n))) {
      return absl::InvalidArgumentError(fmt::format(
          "exact plan: tensor {} has a producer or uses outside positions 0..{}", t, n - 1));
    }
  }
  for (size_t j = 0; j < pr.gaps.size(); ++j) {
    const Problem::Gap& g = pr.gaps[j];
    if (g.tensor < 0 || g.tensor >= static_cast<int32_t>(pr.tensors.size()) || g.after < 0 ||
        g.after + 1 >= g.before || g.before >= n || pr.tensors[g.tensor].always_present) {
      return absl::InvalidArgumentError(fmt::format(
          "exact plan: gap {} (tensor {}, {}..{}) needs 0 <= after < after + 1 < before < {} "
          "and a tensor that may be freed",
          j, g.tensor, g.after, g.before, n));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int32_t> recompute_triggers(const Problem& pr, int32_t j) {
  const Problem::Gap& gap = pr.gaps[j];
  if (!recomputable_tensor(pr, gap.tensor)) return {};
  // Tensors computed from gap.tensor within kSegmentDepth producers.
  std::vector<std::vector<int32_t>> outputs(pr.nodes.size());
  for (int32_t t = 0; t < static_cast<int32_t>(pr.tensors.size()); ++t) {
    if (pr.tensors[t].producer >= 0) outputs[pr.tensors[t].producer].push_back(t);
  }
  std::set<int32_t> from = {gap.tensor};
  std::vector<int32_t> frontier = {gap.tensor};
  for (int depth = 0; depth < kSegmentDepth && !frontier.empty(); ++depth) {
    std::vector<int32_t> next;
    for (int32_t t : frontier) {
      for (int32_t use : pr.tensors[t].uses) {
        for (int32_t out : outputs[use]) {
          if (from.insert(out).second) next.push_back(out);
        }
      }
    }
    frontier = std::move(next);
  }
  std::set<int32_t> triggers = {gap.before - 1};
  for (const Problem::Gap& other : pr.gaps) {
    const int32_t q = other.before - 1;
    if (other.tensor != gap.tensor && from.count(other.tensor) && q > gap.after &&
        q < gap.before - 1) {
      triggers.insert(q);
    }
  }
  return {triggers.begin(), triggers.end()};
}

Evaluation evaluate(const Problem& pr, const std::vector<Choice>& choices) {
  Evaluation ev;
  if (absl::Status s = check_problem(pr); !s.ok()) {
    ev.reason = std::string(s.message());
    return ev;
  }
  if (choices.size() != pr.gaps.size()) {
    ev.reason = fmt::format("{} choices for {} gaps", choices.size(), pr.gaps.size());
    return ev;
  }
  const std::vector<double> prefix = prefix_of(pr);
  const int32_t n = static_cast<int32_t>(pr.nodes.size());
  ev.compute_s = pr.upload_s + prefix[n];
  std::vector<int64_t> bytes = pr.base_bytes;
  std::vector<double> out_s(pr.tensors.size(), -1);  // < 0: not swapped
  double in_link = 0;
  for (int32_t j = 0; j < static_cast<int32_t>(pr.gaps.size()); ++j) {
    const Problem::Gap& g = pr.gaps[j];
    const Choice& c = choices[j];
    if (c.kind == Choice::kKeep) continue;
    if (c.trigger <= g.after || c.trigger >= g.before) {
      ev.reason =
          fmt::format("gap {}: trigger {} outside {}..{}", j, c.trigger, g.after + 1, g.before - 1);
      return ev;
    }
    for (int32_t p = g.after + 1; p <= c.trigger; ++p) {
      bytes[p] -= static_cast<int64_t>(pr.tensors[g.tensor].bytes);
    }
    if (c.kind == Choice::kSwap) {
      ev.stall_s += in_stall(pr, prefix, j, c.trigger);
      in_link += pr.tensors[g.tensor].in_s;
      out_s[g.tensor] = std::max(out_s[g.tensor], out_stall(pr, prefix, j));
    } else if (!recomputable_tensor(pr, g.tensor)) {
      ev.reason = fmt::format("gap {}: tensor {} has no producer that may run again", j, g.tensor);
      return ev;
    }
  }
  ev.peak_bytes = *std::max_element(bytes.begin(), bytes.end());
  if (ev.peak_bytes > pr.limit_bytes) {
    ev.reason = fmt::format("peak {} > limit {}", ev.peak_bytes, pr.limit_bytes);
    return ev;
  }
  double out_link = 0;
  uint64_t host = 0;
  for (size_t t = 0; t < pr.tensors.size(); ++t) {
    if (out_s[t] < 0) continue;
    ev.stall_s += out_s[t];
    out_link += pr.tensors[t].out_s;
    host += pr.tensors[t].bytes;
  }
  const double link = pr.link_share * prefix[n];
  if (in_link > link * (1 + 1e-9) || out_link > link * (1 + 1e-9)) {
    ev.reason =
        fmt::format("copies of {} s in, {} s out exceed the link's {} s", in_link, out_link, link);
    return ev;
  }
  if (pr.host_limit_bytes > 0 && host > pr.host_limit_bytes) {
    ev.reason = fmt::format("{} swapped bytes exceed the host limit {}", host, pr.host_limit_bytes);
    return ev;
  }
  // The nodes run again: the closure of every recompute's producer over
  // inputs not present at its trigger.
  const std::vector<std::vector<int32_t>> gaps_of = gaps_by_tensor(pr);
  std::set<std::pair<int32_t, int32_t>> needed;  // (node position, trigger)
  std::vector<std::pair<int32_t, int32_t>> work;
  for (int32_t j = 0; j < static_cast<int32_t>(pr.gaps.size()); ++j) {
    if (choices[j].kind != Choice::kRecompute) continue;
    const std::pair<int32_t, int32_t> key{pr.tensors[pr.gaps[j].tensor].producer,
                                          choices[j].trigger};
    if (needed.insert(key).second) work.push_back(key);
  }
  while (!work.empty()) {
    const auto [node, q] = work.back();
    work.pop_back();
    for (int32_t i : pr.nodes[node].inputs) {
      const Problem::Tensor& in = pr.tensors[i];
      if (in.always_present) continue;
      bool absent = in.uses.back() <= q;
      if (!absent) {
        const int32_t c = covering_gap(gaps_of, pr, i, q);
        if (c >= 0 && choices[c].kind != Choice::kKeep && q > pr.gaps[c].after &&
            q <= choices[c].trigger) {
          if (choices[c].kind == Choice::kSwap) {
            ev.reason = fmt::format("recomputing at {} reads tensor {}, swapped out there", q, i);
            return ev;
          }
          absent = true;
        }
      }
      if (!absent) continue;
      if (!recomputable_tensor(pr, i)) {
        ev.reason = fmt::format(
            "recomputing at {} reads tensor {}, neither present nor "
            "recomputable",
            q, i);
        return ev;
      }
      const std::pair<int32_t, int32_t> key{in.producer, q};
      if (needed.insert(key).second) work.push_back(key);
    }
  }
  for (const auto& [node, q] : needed) ev.recompute_s += pr.nodes[node].seconds;
  ev.feasible = true;
  return ev;
}

namespace {

// The program, built column by column and row by row.
class Program {
 public:
  int add_col(double lb, double ub, double obj, bool integer) {
    cols_.push_back({lb, ub, obj, integer});
    return static_cast<int>(cols_.size()) - 1;
  }
  void set_ub(int col, double ub) { cols_[col].ub = std::min(cols_[col].ub, ub); }
  void add_row(std::vector<std::pair<int, double>> terms, char sense, double rhs) {
    rows_.push_back({std::move(terms), sense, rhs});
  }
  int cols() const { return static_cast<int>(cols_.size()); }
  int rows() const { return static_cast<int>(rows_.size()); }

  // Solves; fills `values` and returns the model for the status queries.
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> solve(const SolveOptions& o,
                                                         std::vector<double>& values) const {
    std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> m(Cbc_newModel(), Cbc_deleteModel);
    for (const Col& c : cols_) {
      Cbc_addCol(m.get(), "", c.lb, c.ub, c.obj, c.integer ? 1 : 0, 0, nullptr, nullptr);
    }
    for (const Row& r : rows_) {
      std::vector<int> idx;
      std::vector<double> coef;
      for (const auto& [col, v] : r.terms) idx.push_back(col), coef.push_back(v);
      Cbc_addRow(m.get(), "", static_cast<int>(idx.size()), idx.data(), coef.data(), r.sense,
                 r.rhs);
    }
    Cbc_setLogLevel(m.get(), 0);
    Cbc_setMaximumSeconds(m.get(), o.time_limit_s);
    Cbc_setAllowableFractionGap(m.get(), o.relative_gap);
    Cbc_setAllowableGap(m.get(), 1e-9);
    Cbc_setParameter(m.get(), "threads", "1");
    Cbc_solve(m.get());
    values.clear();
    if (const double* x = Cbc_bestSolution(m.get()); x != nullptr) {
      values.assign(x, x + cols_.size());
    }
    return m;
  }

 private:
  struct Col {
    double lb, ub, obj;
    bool integer;
  };
  struct Row {
    std::vector<std::pair<int, double>> terms;
    char sense;
    double rhs;
  };
  std::vector<Col> cols_;
  std::vector<Row> rows_;
};

}  // namespace

absl::StatusOr<Solution> solve(const Problem& pr, const SolveOptions& options) {
  if (absl::Status s = check_problem(pr); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> prefix = prefix_of(pr);
  const int32_t n = static_cast<int32_t>(pr.nodes.size());
  const int32_t gaps = static_cast<int32_t>(pr.gaps.size());
  const std::vector<std::vector<int32_t>> gaps_of = gaps_by_tensor(pr);
  Program prog;
  // ys[j][p - after - 1]: gap j swapped and freed at p (a prefix).
  std::vector<std::vector<int>> ys(gaps);
  // xs[j][k]: gap j recomputed at triggers[j][k].
  std::vector<std::vector<int32_t>> triggers(gaps);
  std::vector<std::vector<int>> xs(gaps);
  for (int32_t j = 0; j < gaps; ++j) {
    const Problem::Gap& g = pr.gaps[j];
    double prev = 0;
    for (int32_t p = g.after + 1; p < g.before; ++p) {
      const double stall = in_stall(pr, prefix, j, p);
      ys[j].push_back(prog.add_col(0, 1, (stall - prev) * kMs, true));
      prev = stall;
      if (ys[j].size() > 1) {
        prog.add_row({{ys[j].back(), 1}, {ys[j][ys[j].size() - 2], -1}}, 'L', 0);
      }
    }
    triggers[j] = recompute_triggers(pr, j);
    std::vector<std::pair<int, double>> one = {{ys[j].front(), 1}};
    for (size_t k = 0; k < triggers[j].size(); ++k) {
      xs[j].push_back(prog.add_col(0, 1, 0, true));
      one.push_back({xs[j].back(), 1});
    }
    prog.add_row(std::move(one), 'L', 1);
  }
  // Per tensor: swapped at all (w), its swap-out's release stall (o).
  std::vector<std::pair<int, double>> in_link, out_link, host;
  for (int32_t t = 0; t < static_cast<int32_t>(pr.tensors.size()); ++t) {
    if (gaps_of[t].empty()) continue;
    const int w = prog.add_col(0, 1, 0, false);
    const int o = prog.add_col(0, pr.tensors[t].out_s * kMs, 1, false);  // ms
    for (int32_t j : gaps_of[t]) {
      prog.add_row({{w, 1}, {ys[j].front(), -1}}, 'G', 0);
      prog.add_row({{o, 1}, {ys[j].front(), -out_stall(pr, prefix, j) * kMs}}, 'G', 0);
      in_link.push_back({ys[j].front(), pr.tensors[t].in_s * kMs});
    }
    out_link.push_back({w, pr.tensors[t].out_s * kMs});
    host.push_back({w, static_cast<double>(pr.tensors[t].bytes) / kMiB});
  }
  const double link_ms = pr.link_share * prefix[n] * kMs;
  if (!in_link.empty()) prog.add_row(in_link, 'L', link_ms);
  if (!out_link.empty()) prog.add_row(out_link, 'L', link_ms);
  if (pr.host_limit_bytes > 0 && !host.empty()) {
    prog.add_row(host, 'L', static_cast<double>(pr.host_limit_bytes) / kMiB);
  }
  // Memory: at every position over the limit, the freed bytes make up the
  // excess.
  for (int32_t p = 0; p < n; ++p) {
    if (pr.base_bytes[p] <= pr.limit_bytes) continue;
    std::vector<std::pair<int, double>> freed;
    for (int32_t j = 0; j < gaps; ++j) {
      const Problem::Gap& g = pr.gaps[j];
      if (p <= g.after || p >= g.before) continue;
      const double mib = static_cast<double>(pr.tensors[g.tensor].bytes) / kMiB;
      freed.push_back({ys[j][p - g.after - 1], mib});
      for (size_t k = 0; k < triggers[j].size(); ++k) {
        if (triggers[j][k] >= p) freed.push_back({xs[j][k], mib});
      }
    }
    prog.add_row(std::move(freed), 'G',
                 static_cast<double>(pr.base_bytes[p] - pr.limit_bytes) / kMiB);
  }
  // need(n, q): node n runs again right after q.
  std::map<std::pair<int32_t, int32_t>, int> need;
  std::vector<std::pair<int32_t, int32_t>> work;
  auto need_col = [&](int32_t node, int32_t q) {
    auto [it, fresh] = need.try_emplace({node, q}, -1);
    if (fresh) {
      it->second = prog.add_col(0, 1, pr.nodes[node].seconds * kMs, false);
      work.push_back({node, q});
    }
    return it->second;
  };
  for (int32_t j = 0; j < gaps; ++j) {
    for (size_t k = 0; k < triggers[j].size(); ++k) {
      const int col = need_col(pr.tensors[pr.gaps[j].tensor].producer, triggers[j][k]);
      prog.add_row({{col, 1}, {xs[j][k], -1}}, 'G', 0);
    }
  }
  while (!work.empty()) {
    const auto [node, q] = work.back();
    work.pop_back();
    const int self = need.at({node, q});
    for (int32_t i : pr.nodes[node].inputs) {
      const Problem::Tensor& in = pr.tensors[i];
      if (in.always_present) continue;
      if (in.uses.back() <= q) {  // released before q: run its producer again
        if (!recomputable_tensor(pr, i)) {
          prog.set_ub(self, 0);
          continue;
        }
        const int up = need_col(in.producer, q);
        prog.add_row({{up, 1}, {self, -1}}, 'G', 0);
        continue;
      }
      const int32_t c = covering_gap(gaps_of, pr, i, q);
      if (c < 0 || q == pr.gaps[c].after) continue;  // present
      // Not swapped out at q; recomputed at a later trigger: run again.
      prog.add_row({{self, 1}, {ys[c][q - pr.gaps[c].after - 1], 1}}, 'L', 1);
      std::vector<std::pair<int, double>> later;
      for (size_t k = 0; k < triggers[c].size(); ++k) {
        if (triggers[c][k] >= q) later.push_back({xs[c][k], -1});
      }
      if (later.empty()) continue;
      const int up = need_col(in.producer, q);
      later.push_back({up, 1});
      later.push_back({self, -1});
      prog.add_row(std::move(later), 'G', -1);
    }
  }

  std::vector<double> v;
  auto model = prog.solve(options, v);
  Solution sol;
  sol.columns = prog.cols();
  sol.rows = prog.rows();
  sol.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (Cbc_isProvenInfeasible(model.get())) {
    return absl::NotFoundError(
        "exact plan: no keep/swap/recompute plan fits the limit (the program is infeasible)");
  }
  if (v.empty()) {
    return absl::DeadlineExceededError(
        fmt::format("exact plan: no plan found within {} s ({} columns, {} rows)",
                    options.time_limit_s, sol.columns, sol.rows));
  }
  // Stopped on the allowed gap counts as optimal: within relative_gap.
  sol.optimal = Cbc_isProvenOptimal(model.get()) || Cbc_secondaryStatus(model.get()) == 2;
  sol.objective_s = pr.upload_s + prefix[n] + Cbc_getObjValue(model.get()) / kMs;
  sol.bound_s = pr.upload_s + prefix[n] + Cbc_getBestPossibleObjValue(model.get()) / kMs;
  sol.choices.assign(gaps, Choice{});
  for (int32_t j = 0; j < gaps; ++j) {
    for (size_t k = 0; k < xs[j].size(); ++k) {
      if (v[xs[j][k]] > 0.5) sol.choices[j] = {Choice::kRecompute, triggers[j][k]};
    }
    if (sol.choices[j].kind == Choice::kRecompute || v[ys[j].front()] < 0.5) continue;
    int32_t last = pr.gaps[j].after + 1;
    for (size_t k = 0; k < ys[j].size(); ++k) {
      if (v[ys[j][k]] > 0.5) last = pr.gaps[j].after + 1 + static_cast<int32_t>(k);
    }
    sol.choices[j] = {Choice::kSwap, last};
  }
  sol.evaluation = evaluate(pr, sol.choices);
  return sol;
}

}  // namespace lms::exact
