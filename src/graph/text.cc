// Text form of a graph, for golden tests and debugging. Grammar (one item per
// line, '#' starts a comment line):
//   input NAME TYPE
//   parameter NAME TYPE INIT          INIT: zeros | constant(V) | he_normal(seed=S,fan_in=F)
//   optimizer_state NAME TYPE INIT
//   node NAME = OP(IN, ...) [{KEY=VALUE, ...}] [after(NODE, ...)] -> OUT TYPE ROLE, ...
//   loss NAME
// TYPE is f32[d0,d1,...] (i64[...] for an int64 input, bf16[...] or f16[...]); VALUE is an int, a
// real (always with
// '.', 'e', 'inf' or 'nan'), a "string" or an int list [a,b]. Strings escape '"', '\\' and control
// characters (\n, \r, \t, \xHH), so that a value never ends the string or the line early; other
// bytes (UTF-8) are written as they are.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "graph/text_parser.h"
#include "lms/graph.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace {

std::string type_str(const Tensor& t) {
  return absl::StrCat(dtype_name(t.dtype), "[", absl::StrJoin(t.shape, ","), "]");
}

// 17 significant digits read back to the same double (DBL_DECIMAL_DIG), also
// for subnormals and -0.0.
std::string real_str(double v) {
  std::string s = absl::StrFormat("%.17g", v);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

std::string init_str(const Init& init) {
  switch (init.kind) {
    case Init::Kind::kZeros:
      return "zeros";
    case Init::Kind::kConstant:
      return absl::StrCat("constant(", real_str(init.value), ")");
    case Init::Kind::kHeNormal:
      return absl::StrCat("he_normal(seed=", init.seed, ",fan_in=", init.fan_in, ")");
    case Init::Kind::kValues:
      return absl::StrCat("values(elements=", init.values->size(), ")");
  }
  return "zeros";
}

std::string quote(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", u);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

struct AttrPrinter {
  std::string operator()(int64_t v) const { return absl::StrCat(v); }
  std::string operator()(double v) const { return real_str(v); }
  std::string operator()(const std::string& v) const { return quote(v); }
  std::string operator()(const std::vector<int64_t>& v) const {
    return absl::StrCat("[", absl::StrJoin(v, ","), "]");
  }
};

}  // namespace

std::string attr_value_text(const AttrValue& value) { return std::visit(AttrPrinter{}, value); }

namespace {

std::string node_line(const Graph& g, const Node& n) {
  std::vector<std::string> ins, attrs, after, outs;
  for (TensorId t : n.inputs) ins.push_back(g.tensor(t).name);
  for (const auto& [k, v] : n.attrs) attrs.push_back(absl::StrCat(k, "=", attr_value_text(v)));
  for (NodeId c : n.control_inputs) after.push_back(g.node(c).name);
  for (TensorId t : n.outputs) {
    const Tensor& o = g.tensor(t);
    outs.push_back(absl::StrCat(o.name, " ", type_str(o), " ", role_name(o.role)));
  }
  std::string line =
      absl::StrCat("node ", n.name, " = ", op_name(n.op), "(", absl::StrJoin(ins, ", "), ")");
  if (!attrs.empty()) absl::StrAppend(&line, " {", absl::StrJoin(attrs, ", "), "}");
  if (!after.empty()) absl::StrAppend(&line, " after(", absl::StrJoin(after, ", "), ")");
  absl::StrAppend(&line, " -> ", outs.empty() ? std::string("()") : absl::StrJoin(outs, ", "));
  return line;
}

}  // namespace

std::string to_text(const Graph& graph) {
  std::string out;
  for (TensorId id = 0; id < graph.num_tensors(); ++id) {
    const Tensor& t = graph.tensor(id);
    if (t.producer != kNoNode) continue;
    absl::StrAppend(&out, role_name(t.role), " ", t.name, " ", type_str(t));
    if (is_persistent(t.role)) absl::StrAppend(&out, " ", init_str(t.init));
    out += "\n";
  }
  auto order = schedule(graph);
  const std::vector<NodeId>& nodes = order.ok() ? *order : graph.order();
  for (NodeId id : nodes) absl::StrAppend(&out, node_line(graph, graph.node(id)), "\n");
  if (graph.loss() != kNoTensor)
    absl::StrAppend(&out, "loss ", graph.tensor(graph.loss()).name, "\n");
  return out;
}

absl::StatusOr<Graph> parse_graph(std::string_view text) {
  Graph g;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(to_absl(text), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    absl::Status s = parse_graph_line(g, to_std(line));
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph text line ", line_no, ": ", s.message()));
    }
  }
  LMS_RETURN_IF_ERROR(g.status());
  return g;
}

}  // namespace lms
