#include "graph/text_parser.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace {

constexpr absl::string_view kDelimiters = " \t(),=[]{}\"";

class Cursor {
 public:
  explicit Cursor(absl::string_view text) : rest_(text) {}

  void skip_space() { rest_ = absl::StripLeadingAsciiWhitespace(rest_); }
  bool done() {
    skip_space();
    return rest_.empty();
  }
  bool peek(char c) {
    skip_space();
    return !rest_.empty() && rest_[0] == c;
  }
  bool try_consume(absl::string_view token) {
    skip_space();
    if (rest_.substr(0, token.size()) != token) return false;
    rest_.remove_prefix(token.size());
    return true;
  }
  absl::Status expect(absl::string_view token) {
    if (try_consume(token)) return absl::OkStatus();
    return error(absl::StrCat("expected '", token, "'"));
  }
  // A run of characters that are not delimiters (names, numbers, keywords).
  absl::StatusOr<std::string> word(absl::string_view what) {
    skip_space();
    size_t n = rest_.find_first_of(kDelimiters);
    if (n == absl::string_view::npos) n = rest_.size();
    if (n == 0) return error(absl::StrCat("expected ", what));
    std::string w(rest_.substr(0, n));
    rest_.remove_prefix(n);
    return w;
  }
  // A string in double quotes with the escapes of text.cc: \" \\ \n \r \t \xHH.
  absl::StatusOr<std::string> quoted() {
    LMS_RETURN_IF_ERROR(expect("\""));
    std::string s;
    while (!rest_.empty() && rest_[0] != '"') {
      if (rest_[0] != '\\') {
        s += rest_[0];
        rest_.remove_prefix(1);
        continue;
      }
      LMS_ASSIGN_OR_RETURN(char ch, escape());
      s += ch;
    }
    if (rest_.empty()) return error("unterminated string");
    rest_.remove_prefix(1);
    return s;
  }
  absl::Status error(absl::string_view what) const {
    absl::string_view near = rest_.substr(0, 24);
    return absl::InvalidArgumentError(absl::StrCat(what, " at '", near, "'"));
  }

 private:
  // The character of the escape sequence at the start of rest_ (a backslash).
  absl::StatusOr<char> escape() {
    const absl::string_view seq = rest_.substr(0, 2);
    if (seq.size() == 2) {
      switch (seq[1]) {
        case '"':
        case '\\':
          rest_.remove_prefix(2);
          return seq[1];
        case 'n':
          rest_.remove_prefix(2);
          return '\n';
        case 'r':
          rest_.remove_prefix(2);
          return '\r';
        case 't':
          rest_.remove_prefix(2);
          return '\t';
        case 'x':
          if (rest_.size() >= 4 && absl::ascii_isxdigit(rest_[2]) &&
              absl::ascii_isxdigit(rest_[3])) {
            const int value = hex_digit(rest_[2]) * 16 + hex_digit(rest_[3]);
            rest_.remove_prefix(4);
            return static_cast<char>(value);
          }
          break;
        default:
          break;
      }
    }
    return error("bad escape in string, allowed: \\\" \\\\ \\n \\r \\t \\xHH");
  }
  static int hex_digit(char c) {
    return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
  }

  absl::string_view rest_;
};

// An integer of type T (int64_t, or uint64_t for seeds, which use all 64 bits).
template <typename T = int64_t>
absl::StatusOr<T> parse_int(Cursor& c) {
  LMS_ASSIGN_OR_RETURN(std::string w, c.word("an integer"));
  T v = 0;
  if (!absl::SimpleAtoi(w, &v)) {
    return c.error(absl::StrCat("'", w, "' is not an integer in [", std::numeric_limits<T>::min(),
                                ", ", std::numeric_limits<T>::max(), "]"));
  }
  return v;
}

// "[a,b,...]" with `a` parsed by `item`.
absl::StatusOr<std::vector<int64_t>> parse_int_list(Cursor& c) {
  LMS_RETURN_IF_ERROR(c.expect("["));
  std::vector<int64_t> v;
  if (c.try_consume("]")) return v;
  do {
    LMS_ASSIGN_OR_RETURN(int64_t x, parse_int(c));
    v.push_back(x);
  } while (c.try_consume(","));
  LMS_RETURN_IF_ERROR(c.expect("]"));
  return v;
}

// TYPE: f32[d0,...], i64[...], bf16[...] or f16[...] (text.cc).
struct TensorType {
  DType dtype = DType::kFloat32;
  Shape shape;
};

absl::StatusOr<TensorType> parse_type(Cursor& c) {
  TensorType t;
  bool found = false;
  for (DType d : {DType::kFloat32, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    if (c.try_consume(dtype_name(d))) {
      t.dtype = d;
      found = true;
      break;
    }
  }
  if (!found) {
    return c.error("expected a tensor type 'f32[...]', 'i64[...]', 'bf16[...]' or 'f16[...]'");
  }
  LMS_ASSIGN_OR_RETURN(t.shape, parse_int_list(c));
  return t;
}

absl::StatusOr<AttrValue> parse_attr_value(Cursor& c) {
  if (c.peek('"')) {
    LMS_ASSIGN_OR_RETURN(std::string s, c.quoted());
    return AttrValue(s);
  }
  if (c.peek('[')) {
    LMS_ASSIGN_OR_RETURN(auto v, parse_int_list(c));
    return AttrValue(v);
  }
  LMS_ASSIGN_OR_RETURN(std::string w, c.word("an attribute value"));
  if (w.find_first_of(".eEni") != std::string::npos) {
    double d = 0;
    if (!absl::SimpleAtod(w, &d)) return c.error(absl::StrCat("'", w, "' is not a real number"));
    return AttrValue(d);
  }
  int64_t i = 0;
  if (!absl::SimpleAtoi(w, &i)) return c.error(absl::StrCat("'", w, "' is not an integer"));
  return AttrValue(i);
}

absl::StatusOr<Init> parse_init(Cursor& c) {
  LMS_ASSIGN_OR_RETURN(std::string kind, c.word("an initialiser"));
  if (kind == "zeros") return Init::zeros();
  if (kind == "constant") {
    LMS_RETURN_IF_ERROR(c.expect("("));
    LMS_ASSIGN_OR_RETURN(AttrValue v, parse_attr_value(c));
    LMS_RETURN_IF_ERROR(c.expect(")"));
    if (!std::holds_alternative<double>(v)) return c.error("constant() takes a real");
    return Init::constant(std::get<double>(v));
  }
  if (kind == "he_normal") {
    LMS_RETURN_IF_ERROR(c.expect("("));
    LMS_RETURN_IF_ERROR(c.expect("seed"));
    LMS_RETURN_IF_ERROR(c.expect("="));
    LMS_ASSIGN_OR_RETURN(uint64_t seed, parse_int<uint64_t>(c));
    LMS_RETURN_IF_ERROR(c.expect(","));
    LMS_RETURN_IF_ERROR(c.expect("fan_in"));
    LMS_RETURN_IF_ERROR(c.expect("="));
    LMS_ASSIGN_OR_RETURN(int64_t fan_in, parse_int(c));
    LMS_RETURN_IF_ERROR(c.expect(")"));
    if (fan_in <= 0) return c.error("fan_in must be positive");
    return Init::he_normal(seed, fan_in);
  }
  if (kind == "values") {
    return c.error(
        "values(...) initialisers hold data the text form does not carry; build the graph "
        "in code (Init::from_values) or import it (lms/onnx.h)");
  }
  return c.error(absl::StrCat("unknown initialiser '", kind,
                              "', allowed: zeros, constant(V), he_normal(seed=S,fan_in=F)"));
}

// The role of a node output: inputs and persistent tensors have no producer,
// so their roles are only declared by their own line kinds.
absl::StatusOr<TensorRole> parse_role(Cursor& c) {
  LMS_ASSIGN_OR_RETURN(std::string w, c.word("a tensor role"));
  for (TensorRole r : {TensorRole::kActivation, TensorRole::kGradient, TensorRole::kHost}) {
    if (w == role_name(r)) return r;
  }
  return c.error(absl::StrCat("unknown role '", w,
                              "', allowed: activation, gradient, host (for node outputs)"));
}

absl::Status parse_declaration(Graph& g, Cursor& c, const std::string& kind) {
  LMS_ASSIGN_OR_RETURN(std::string name, c.word("a tensor name"));
  LMS_ASSIGN_OR_RETURN(TensorType type, parse_type(c));
  const Shape& shape = type.shape;
  if (kind == "input") {
    g.input(name, shape, type.dtype);
  } else if (type.dtype != DType::kFloat32) {
    return c.error(absl::StrCat(kind, " '", name, "' must be ", dtype_name(DType::kFloat32)));
  } else {
    LMS_ASSIGN_OR_RETURN(Init init, parse_init(c));
    if (kind == "parameter") {
      g.parameter(name, shape, init);
    } else {
      g.optimizer_state(name, shape, init);
    }
  }
  if (!c.done()) return c.error("unexpected text after the declaration");
  return g.status();
}

absl::StatusOr<std::vector<TensorId>> parse_inputs(Graph& g, Cursor& c) {
  std::vector<TensorId> inputs;
  LMS_RETURN_IF_ERROR(c.expect("("));
  if (c.try_consume(")")) return inputs;
  do {
    LMS_ASSIGN_OR_RETURN(std::string name, c.word("an input tensor name"));
    TensorId t = g.find_tensor(name);
    if (t == kNoTensor) return c.error(absl::StrCat("unknown tensor '", name, "'"));
    inputs.push_back(t);
  } while (c.try_consume(","));
  LMS_RETURN_IF_ERROR(c.expect(")"));
  return inputs;
}

absl::StatusOr<Attrs> parse_attrs(Cursor& c) {
  Attrs attrs;
  if (!c.try_consume("{")) return attrs;
  if (c.try_consume("}")) return attrs;
  do {
    LMS_ASSIGN_OR_RETURN(std::string key, c.word("an attribute name"));
    LMS_RETURN_IF_ERROR(c.expect("="));
    LMS_ASSIGN_OR_RETURN(AttrValue v, parse_attr_value(c));
    if (!attrs.emplace(key, std::move(v)).second) {
      return c.error(absl::StrCat("attribute '", key, "' given twice"));
    }
  } while (c.try_consume(","));
  LMS_RETURN_IF_ERROR(c.expect("}"));
  return attrs;
}

absl::StatusOr<std::vector<NodeId>> parse_after(Graph& g, Cursor& c) {
  std::vector<NodeId> after;
  if (!c.try_consume("after")) return after;
  LMS_RETURN_IF_ERROR(c.expect("("));
  do {
    LMS_ASSIGN_OR_RETURN(std::string name, c.word("a node name"));
    NodeId n = g.find_node(name);
    if (n == kNoNode) return c.error(absl::StrCat("unknown node '", name, "' in after()"));
    after.push_back(n);
  } while (c.try_consume(","));
  LMS_RETURN_IF_ERROR(c.expect(")"));
  return after;
}

struct OutputDecl {
  std::string name;
  TensorType type;
  TensorRole role;
};

absl::StatusOr<std::vector<OutputDecl>> parse_outputs(Cursor& c) {
  std::vector<OutputDecl> outs;
  LMS_RETURN_IF_ERROR(c.expect("->"));
  if (c.try_consume("()")) return outs;
  do {
    OutputDecl d;
    LMS_ASSIGN_OR_RETURN(d.name, c.word("an output tensor name"));
    LMS_ASSIGN_OR_RETURN(d.type, parse_type(c));
    LMS_ASSIGN_OR_RETURN(d.role, parse_role(c));
    outs.push_back(std::move(d));
  } while (c.try_consume(","));
  return outs;
}

absl::Status check_outputs(Graph& g, NodeId id, const std::vector<OutputDecl>& decls) {
  const Node& n = g.node(id);
  if (n.outputs.size() != decls.size()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", n.name, "' declares ", decls.size(),
                                                   " outputs, the op gives ", n.outputs.size()));
  }
  for (size_t j = 0; j < decls.size(); ++j) {
    Tensor& t = g.mutable_tensor(n.outputs[j]);
    if (t.name != decls[j].name || t.shape != decls[j].type.shape ||
        t.dtype != decls[j].type.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", n.name, "': output ", j, " declared as '", decls[j].name,
                       "' with another dtype, shape or name than the op gives ('", t.name, "')"));
    }
    t.role = decls[j].role;
  }
  return absl::OkStatus();
}

absl::Status parse_node(Graph& g, Cursor& c) {
  LMS_ASSIGN_OR_RETURN(std::string name, c.word("a node name"));
  LMS_RETURN_IF_ERROR(c.expect("="));
  LMS_ASSIGN_OR_RETURN(std::string op, c.word("an op name"));
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> inputs, parse_inputs(g, c));
  LMS_ASSIGN_OR_RETURN(Attrs attrs, parse_attrs(c));
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> after, parse_after(g, c));
  LMS_ASSIGN_OR_RETURN(std::vector<OutputDecl> outs, parse_outputs(c));
  if (!c.done()) return c.error("unexpected text after the outputs");
  const std::optional<OpKind> kind = parse_op_kind(op);
  if (!kind) {
    return absl::InvalidArgumentError(absl::StrCat("node '", name, "' (", op, "): unknown op"));
  }
  LMS_RETURN_IF_ERROR(g.add_node(*kind, name, std::move(inputs), std::move(attrs)).status());
  NodeId id = g.find_node(name);
  for (NodeId a : after) g.add_control_edge(a, id);
  return check_outputs(g, id, outs);
}

}  // namespace

absl::StatusOr<AttrValue> parse_attr_value_text(std::string_view text) {
  Cursor c(to_absl(text));
  LMS_ASSIGN_OR_RETURN(AttrValue v, parse_attr_value(c));
  if (!c.done()) return c.error("unexpected text after the attribute value");
  return v;
}

absl::Status parse_graph_line(Graph& graph, std::string_view line) {
  Cursor c(to_absl(line));
  LMS_ASSIGN_OR_RETURN(std::string kind, c.word("a line keyword"));
  if (kind == "input" || kind == "parameter" || kind == "optimizer_state") {
    return parse_declaration(graph, c, kind);
  }
  if (kind == "node") return parse_node(graph, c);
  if (kind == "loss") {
    LMS_ASSIGN_OR_RETURN(std::string name, c.word("the loss tensor name"));
    TensorId t = graph.find_tensor(name);
    if (t == kNoTensor) return c.error(absl::StrCat("unknown tensor '", name, "'"));
    if (!c.done()) return c.error("unexpected text after the loss");
    graph.set_loss(t);
    return absl::OkStatus();
  }
  return c.error(absl::StrCat("unknown line keyword '", kind,
                              "', allowed: input, parameter, optimizer_state, node, loss"));
}

}  // namespace lms
