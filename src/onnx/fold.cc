// Folding of shape arithmetic and removal of identities (Note [ONNX
// import]). Each pass handles one pattern and says whether it
// applied; the constants are small (shapes, indices, scales), so they are
// computed on the host with plain loops.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using NodeProto = ::onnx::NodeProto;

bool all_const(const Importer& im, const NodeProto& n) {
  for (int k = 0; k < n.input_size(); ++k) {
    if (!im.has_input(n, k)) continue;
    auto it = im.values.find(n.input(k));
    if (it == im.values.end() || !it->second.constant) return false;
  }
  return true;
}

// Whether `n` reads a trainable initializer (or an identity of one). Such a
// node is a computation on a parameter, which must stay in the graph so
// that the parameter gets its gradient (a Slice of a position table, say);
// only a rank-2 Transpose into Gemm / MatMul is folded (Note [Weight-side
// Transpose]).
bool reads_trainable(const Importer& im, const NodeProto& n) {
  for (int k = 0; k < n.input_size(); ++k) {
    if (!im.has_input(n, k)) continue;
    auto it = im.values.find(n.input(k));
    if (it == im.values.end()) continue;
    const std::string& source = it->second.alias_of.empty() ? n.input(k) : it->second.alias_of;
    if (it->second.initializer || !it->second.alias_of.empty()) {
      if (im.trainable.contains(source)) return true;
    }
  }
  return false;
}

// Row-major strides of dims.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int k = int(dims.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * dims[k + 1];
  return s;
}

// Builds a constant of `dtype` and `dims` whose element k is value(k).
Const build(DType dtype, std::vector<int64_t> dims, const std::function<double(int64_t)>& value) {
  Const c;
  c.dtype = dtype;
  c.dims = std::move(dims);
  const int64_t n = c.numel();
  if (dtype == DType::kFloat32) {
    auto v = std::make_shared<std::vector<float>>(n);
    for (int64_t k = 0; k < n; ++k) (*v)[k] = float(value(k));
    c.f = std::move(v);
  } else {
    c.i.resize(n);
    for (int64_t k = 0; k < n; ++k) c.i[k] = int64_t(value(k));
  }
  return c;
}

int64_t norm_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

absl::StatusOr<Const> fold_binary(const Importer& im, const NodeProto& n, const Const& a,
                                  const Const& b) {
  const size_t rank = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> ad(rank - a.dims.size(), 1), bd(rank - b.dims.size(), 1), out(rank);
  ad.insert(ad.end(), a.dims.begin(), a.dims.end());
  bd.insert(bd.end(), b.dims.begin(), b.dims.end());
  for (size_t k = 0; k < rank; ++k) {
    if (ad[k] != bd[k] && ad[k] != 1 && bd[k] != 1) {
      return im.error(n, absl::StrCat("constant operands of shapes ", list_str(a.dims), " and ",
                                      list_str(b.dims), " do not broadcast"));
    }
    out[k] = std::max(ad[k], bd[k]);
  }
  const auto as = strides_of(ad), bs = strides_of(bd), os = strides_of(out);
  const std::string& op = n.op_type();
  const bool is_int = a.dtype == DType::kInt64 && b.dtype == DType::kInt64;
  // Equal, Less and Greater give a bool, kept as int64 0 / 1 (read by Where
  // or Cast).
  const bool compares = op == "Equal" || op == "Less" || op == "Greater";
  return build(compares ? DType::kInt64 : a.dtype, out, [&](int64_t k) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t idx = (k / os[d]) % out[d];
      ia += (ad[d] == 1 ? 0 : idx) * as[d];
      ib += (bd[d] == 1 ? 0 : idx) * bs[d];
    }
    const double x = a.at(ia), y = b.at(ib);
    if (op == "Expand") return x;  // b: zeros of the target shape
    if (op == "Equal") return x == y ? 1.0 : 0.0;
    if (op == "Less") return x < y ? 1.0 : 0.0;
    if (op == "Greater") return x > y ? 1.0 : 0.0;
    if (op == "Add") return x + y;
    if (op == "Sub") return x - y;
    if (op == "Mul") return x * y;
    if (op == "Pow") return std::pow(x, y);  // in double, then the result's dtype
    if (op == "Mod") {  // fmod = 0: the divisor's sign (Python's %); 1: C's fmod
      if (y == 0) return 0.0;
      if (!is_int || attr_int(n, "fmod", 0) == 1) return std::fmod(x, y);
      int64_t r = int64_t(x) % int64_t(y);
      if (r != 0 && (r < 0) != (int64_t(y) < 0)) r += int64_t(y);
      return double(r);
    }
    if (is_int) return y == 0 ? 0.0 : double(int64_t(x) / int64_t(y));  // C truncation
    return x / y;
  });
}

// ScatterND(data, indices, updates) without reduction: data with the
// slices at `indices` (its last dim indexing data's leading dims) set to
// `updates` (Swin's shifted-window mask, built by slice assignment).
absl::StatusOr<Const> fold_scatter_nd(const Importer& im, const NodeProto& n, const Const& data,
                                      const Const& indices, const Const& updates) {
  if (attr_string(n, "reduction", "none") != "none") {
    return im.error(n, "a reduction other than none cannot be folded");
  }
  const int64_t q = indices.dims.empty() ? 0 : indices.dims.back();
  const int64_t rank = int64_t(data.dims.size());
  if (q < 1 || q > rank) return im.error(n, "indices' last dim must be in [1, rank of data]");
  int64_t slice = 1;
  for (int64_t d = q; d < rank; ++d) slice *= data.dims[d];
  const int64_t count = indices.numel() / q;
  if (updates.numel() != count * slice) {
    return im.error(n, absl::StrCat("updates holds ", updates.numel(), " values; ", count,
                                    " indices of slices of ", slice, " need ", count * slice));
  }
  const std::vector<int64_t> strides = strides_of(data.dims);
  std::vector<double> out(static_cast<size_t>(data.numel()));
  for (int64_t k = 0; k < data.numel(); ++k) out[k] = data.at(k);
  for (int64_t i = 0; i < count; ++i) {
    int64_t offset = 0;
    for (int64_t j = 0; j < q; ++j) {
      int64_t x = int64_t(indices.at(i * q + j));
      if (x < 0) x += data.dims[j];
      if (x < 0 || x >= data.dims[j]) return im.error(n, "an index is out of range");
      offset += x * strides[j];
    }
    for (int64_t s = 0; s < slice; ++s) out[offset + s] = updates.at(i * slice + s);
  }
  return build(data.dtype, data.dims, [&](int64_t k) { return out[k]; });
}

// Range(start, limit, delta): start, start + delta, ... short of limit
// (torch.arange of a sequence's length, which a causal mask compares).
absl::StatusOr<Const> fold_range(const Importer& im, const NodeProto& n, const Const& start,
                                 const Const& limit, const Const& delta) {
  if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1 || delta.at(0) == 0) {
    return im.error(n, "start, limit and delta must be scalars, delta nonzero");
  }
  const double s = start.at(0), d = delta.at(0);
  const double count = std::max(0.0, std::ceil((limit.at(0) - s) / d));
  if (count > double(int64_t{1} << 32)) return im.error(n, "the range is too long to fold");
  return build(start.dtype, {int64_t(count)}, [&](int64_t k) { return s + double(k) * d; });
}

// Where(cond, x, y): x where cond is nonzero, else y, the three
// broadcast NumPy-style (the shape arithmetic of an Expand exported from
// PyTorch's expand(n, -1, -1)).
absl::StatusOr<Const> fold_where(const Importer& im, const NodeProto& n, const Const& c,
                                 const Const& x, const Const& y) {
  const size_t rank = std::max({c.dims.size(), x.dims.size(), y.dims.size()});
  auto padded = [&](const Const& t) {
    std::vector<int64_t> d(rank - t.dims.size(), 1);
    d.insert(d.end(), t.dims.begin(), t.dims.end());
    return d;
  };
  const std::vector<int64_t> cd = padded(c), xd = padded(x), yd = padded(y);
  std::vector<int64_t> out(rank);
  for (size_t k = 0; k < rank; ++k) {
    out[k] = std::max({cd[k], xd[k], yd[k]});
    for (int64_t d : {cd[k], xd[k], yd[k]}) {
      if (d != 1 && d != out[k]) {
        return im.error(
            n, absl::StrCat("constant operands of shapes ", list_str(c.dims), ", ",
                            list_str(x.dims), " and ", list_str(y.dims), " do not broadcast"));
      }
    }
  }
  const auto cs = strides_of(cd), xs = strides_of(xd), ys = strides_of(yd), os = strides_of(out);
  return build(x.dtype, out, [&](int64_t k) {
    int64_t ic = 0, ix = 0, iy = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t idx = (k / os[d]) % out[d];
      ic += (cd[d] == 1 ? 0 : idx) * cs[d];
      ix += (xd[d] == 1 ? 0 : idx) * xs[d];
      iy += (yd[d] == 1 ? 0 : idx) * ys[d];
    }
    return c.at(ic) != 0 ? x.at(ix) : y.at(iy);
  });
}

absl::StatusOr<Const> fold_gather(const Importer& im, const NodeProto& n, const Const& data,
                                  const Const& idx) {
  const int64_t rank = int64_t(data.dims.size());
  const int64_t axis = norm_axis(attr_int(n, "axis", 0), rank);
  if (axis < 0 || axis >= rank) return im.error(n, "attribute axis out of range");
  std::vector<int64_t> out(data.dims.begin(), data.dims.begin() + axis);
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), data.dims.begin() + axis + 1, data.dims.end());
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= data.dims[d];
  const int64_t m = idx.numel(), size = data.dims[axis];
  for (int64_t k = 0; k < m; ++k) {
    const int64_t i = int64_t(idx.at(k));
    if (i < -size || i >= size) return im.error(n, absl::StrCat("index ", i, " out of range"));
  }
  return build(data.dtype, out, [&](int64_t k) {
    const int64_t o = k / (m * inner), j = (k / inner) % m, r = k % inner;
    int64_t i = int64_t(idx.at(j));
    if (i < 0) i += size;
    return data.at((o * size + i) * inner + r);
  });
}

// Unsqueeze / Squeeze / Reshape / Flatten of a constant: new dims, same data.
absl::StatusOr<Const> fold_reshape(const Importer& im, const NodeProto& n, Const c) {
  const std::string& op = n.op_type();
  std::vector<int64_t> axes;
  if (im.has_input(n, 1)) {
    LMS_ASSIGN_OR_RETURN(Const a, im.const_input(n, 1, op == "Reshape" ? "shape" : "axes"));
    for (int64_t k = 0; k < a.numel(); ++k) axes.push_back(int64_t(a.at(k)));
  } else {
    axes = attr_ints(n, "axes");
  }
  if (op == "Unsqueeze") {
    const int64_t rank = int64_t(c.dims.size() + axes.size());
    for (int64_t& a : axes) a = norm_axis(a, rank);
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes) {
      if (a < 0 || a > int64_t(c.dims.size())) return im.error(n, "axes out of range");
      c.dims.insert(c.dims.begin() + a, 1);
    }
  } else if (op == "Squeeze") {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < int64_t(c.dims.size()); ++d) {
      const bool listed =
          axes.empty() ? c.dims[d] == 1 : std::count_if(axes.begin(), axes.end(), [&](int64_t a) {
                                            return norm_axis(a, int64_t(c.dims.size())) == d;
                                          }) > 0;
      if (!listed) dims.push_back(c.dims[d]);
    }
    c.dims = dims;
  } else {  // Reshape
    LMS_ASSIGN_OR_RETURN(c.dims, resolve_reshape(n, c.dims, axes));
  }
  return c;
}

absl::StatusOr<Const> fold_concat(const Importer& im, const NodeProto& n) {
  if (n.input_size() == 0) return im.error(n, "has no input");
  std::vector<Const> parts;
  for (int k = 0; k < n.input_size(); ++k) {
    LMS_ASSIGN_OR_RETURN(Const c, im.const_input(n, k, "every input"));
    parts.push_back(std::move(c));
  }
  const int64_t rank = int64_t(parts[0].dims.size());
  const int64_t axis = norm_axis(attr_int(n, "axis", 0), rank);
  if (axis < 0 || axis >= rank) return im.error(n, "attribute axis out of range");
  std::vector<int64_t> out = parts[0].dims;
  out[axis] = 0;
  for (const Const& p : parts) {
    if (p.dims.size() != out.size()) return im.error(n, "inputs of different ranks");
    out[axis] += p.dims[axis];
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out[d];
  std::vector<double> flat;
  for (int64_t o = 0; o < outer; ++o) {
    for (const Const& p : parts) {
      const int64_t span = p.dims[axis] * inner;
      for (int64_t k = 0; k < span; ++k) flat.push_back(p.at(o * span + k));
    }
  }
  return build(parts[0].dtype, out, [&](int64_t k) { return flat[k]; });
}

// Static Slice bounds per ONNX: negative counts from the end, clamped to
// [0, dim] (steps > 0) or [-1, dim-1] (steps < 0).
struct SliceAxis {
  int64_t axis, start, step, count;
};

absl::StatusOr<std::vector<SliceAxis>> slice_axes(const Importer& im, const NodeProto& n,
                                                  const std::vector<int64_t>& dims) {
  LMS_ASSIGN_OR_RETURN(Const starts, im.const_input(n, 1, "starts"));
  LMS_ASSIGN_OR_RETURN(Const ends, im.const_input(n, 2, "ends"));
  const int64_t rank = int64_t(dims.size());
  LMS_RETURN_IF_ERROR(check_slice_lengths(im, n));
  std::vector<SliceAxis> out;
  for (int64_t k = 0; k < starts.numel(); ++k) {
    int64_t axis = k, step = 1;
    if (im.has_input(n, 3)) {
      LMS_ASSIGN_OR_RETURN(Const axes, im.const_input(n, 3, "axes"));
      axis = norm_axis(int64_t(axes.at(k)), rank);
    }
    if (im.has_input(n, 4)) {
      LMS_ASSIGN_OR_RETURN(Const steps, im.const_input(n, 4, "steps"));
      step = int64_t(steps.at(k));
    }
    if (axis < 0 || axis >= rank || step == 0) return im.error(n, "axes or steps out of range");
    const int64_t dim = dims[axis];
    auto clampi = [&](double v, int64_t lo, int64_t hi) {
      double w = v < 0 ? v + double(dim) : v;
      return int64_t(std::clamp(w, double(lo), double(hi)));
    };
    const int64_t s = step > 0 ? clampi(starts.at(k), 0, dim) : clampi(starts.at(k), 0, dim - 1);
    const int64_t e = step > 0 ? clampi(ends.at(k), 0, dim) : clampi(ends.at(k), -1, dim - 1);
    const int64_t count = std::max<int64_t>(
        0, step > 0 ? (e - s + step - 1) / step : (s - e + (-step) - 1) / (-step));
    out.push_back({axis, s, step, count});
  }
  return out;
}

absl::StatusOr<Const> fold_slice(const Importer& im, const NodeProto& n, const Const& data) {
  LMS_ASSIGN_OR_RETURN(std::vector<SliceAxis> axes, slice_axes(im, n, data.dims));
  std::vector<int64_t> out = data.dims, start(out.size(), 0), step(out.size(), 1);
  for (const SliceAxis& a : axes) {
    out[a.axis] = a.count;
    start[a.axis] = a.start;
    step[a.axis] = a.step;
  }
  const auto is = strides_of(data.dims), os = strides_of(out);
  return build(data.dtype, out, [&](int64_t k) {
    int64_t src = 0;
    for (size_t d = 0; d < out.size(); ++d)
      src += (start[d] + ((k / os[d]) % out[d]) * step[d]) * is[d];
    return data.at(src);
  });
}

// Transpose of a constant by `perm` (default: the dims reversed).
absl::StatusOr<Const> fold_transpose(const NodeProto& n, const Const& c) {
  const int64_t rank = int64_t(c.dims.size());
  LMS_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, transpose_perm(n, rank));
  std::vector<int64_t> out(rank);
  for (int64_t d = 0; d < rank; ++d) out[d] = c.dims[perm[d]];
  const auto is = strides_of(c.dims), os = strides_of(out);
  return build(c.dtype, out, [&](int64_t k) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d) src += ((k / os[d]) % out[d]) * is[perm[d]];
    return c.at(src);
  });
}

absl::StatusOr<Const> fold_constant(const Importer& im, const NodeProto& n) {
  if (const auto* a = find_attr(n, "value")) return decode_tensor(a->t(), im.model_dir);
  if (const auto* a = find_attr(n, "value_float")) return make_float_const({}, {a->f()});
  if (const auto* a = find_attr(n, "value_floats")) {
    return make_float_const({a->floats_size()}, {a->floats().begin(), a->floats().end()});
  }
  if (const auto* a = find_attr(n, "value_int")) return make_int_const({}, {a->i()});
  if (const auto* a = find_attr(n, "value_ints")) {
    return make_int_const({a->ints_size()}, {a->ints().begin(), a->ints().end()});
  }
  return im.error(n, "only the attributes value, value_float(s) and value_int(s) are supported");
}

absl::StatusOr<Const> fold_cast(const Importer& im, const NodeProto& n, const Const& c) {
  const int64_t to = attr_int(n, "to", 0);
  using TP = ::onnx::TensorProto;
  if (to == TP::FLOAT || to == TP::DOUBLE)
    return build(DType::kFloat32, c.dims, [&](int64_t k) { return c.at(k); });
  if (to == TP::INT64 || to == TP::INT32 || to == TP::INT16 || to == TP::INT8 || to == TP::UINT8) {
    return build(DType::kInt64, c.dims, [&](int64_t k) { return std::trunc(c.at(k)); });
  }
  if (to == TP::BOOL)
    return build(DType::kInt64, c.dims, [&](int64_t k) { return c.at(k) != 0 ? 1.0 : 0.0; });
  return im.error(
      n, absl::StrCat("attribute to=", to, " not supported (float, double, integer and bool are)"));
}

// Shape of a graph tensor or constant, with opset 15's start / end.
absl::StatusOr<Const> fold_shape(const Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(const Value* v, im.input(n, 0));
  if (v == nullptr) return im.error(n, "input 0 is required");
  const Shape dims = v->tensor != kNoTensor ? im.graph.tensor(v->tensor).shape : v->constant->dims;
  const int64_t rank = int64_t(dims.size());
  auto clampi = [&](int64_t a) { return std::clamp(a < 0 ? a + rank : a, int64_t{0}, rank); };
  const int64_t s = clampi(attr_int(n, "start", 0)), e = clampi(attr_int(n, "end", rank));
  std::vector<int64_t> out(dims.begin() + s, dims.begin() + std::max(s, e));
  const int64_t count = int64_t(out.size());
  return make_int_const({count}, std::move(out));
}

absl::StatusOr<Const> fold_constant_of_shape(const Importer& im, const NodeProto& n,
                                             const Const& shape) {
  std::vector<int64_t> dims;
  for (int64_t k = 0; k < shape.numel(); ++k) dims.push_back(int64_t(shape.at(k)));
  Const fill = make_float_const({1}, {0.0f});
  if (const auto* a = find_attr(n, "value")) {
    LMS_ASSIGN_OR_RETURN(fill, decode_tensor(a->t(), im.model_dir));
  }
  if (fill.numel() != 1) return im.error(n, "attribute value must hold one element");
  const double v = fill.at(0);
  return build(fill.dtype, dims, [&](int64_t) { return v; });
}

absl::StatusOr<Const> fold_const_node(const Importer& im, const NodeProto& n) {
  const std::string& op = n.op_type();
  auto in = [&](int k) { return im.const_input(n, k, absl::StrCat("input ", k)); };
  if (op == "Constant") return fold_constant(im, n);
  if (op == "Shape") return fold_shape(im, n);
  if (op == "Concat") return fold_concat(im, n);
  LMS_ASSIGN_OR_RETURN(Const a, in(0));
  if (op == "Cast") return fold_cast(im, n, a);
  if (op == "ConstantOfShape") return fold_constant_of_shape(im, n, a);
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") return fold_reshape(im, n, a);
  if (op == "Slice") return fold_slice(im, n, a);
  if (op == "Transpose") return fold_transpose(n, a);
  if (op == "Not") {  // a bool kept as int64 0 / 1 (Equal's output)
    return build(DType::kInt64, a.dims, [&](int64_t k) { return a.at(k) == 0 ? 1.0 : 0.0; });
  }
  if (op == "Neg") return build(a.dtype, a.dims, [&](int64_t k) { return -a.at(k); });
  LMS_ASSIGN_OR_RETURN(Const b, in(1));
  if (op == "Gather") return fold_gather(im, n, a, b);
  if (op == "Expand") {  // a broadcast against zeros of the shape b
    std::vector<int64_t> dims;
    for (int64_t k = 0; k < b.numel(); ++k) dims.push_back(int64_t(b.at(k)));
    Const zeros;
    zeros.dtype = a.dtype;
    zeros.dims = dims;
    if (a.dtype == DType::kFloat32) {
      zeros.f = std::make_shared<std::vector<float>>(static_cast<size_t>(zeros.numel()), 0.0f);
    } else {
      zeros.i.assign(static_cast<size_t>(zeros.numel()), 0);
    }
    return fold_binary(im, n, a, zeros);
  }
  if (op == "Where" || op == "Range" || op == "ScatterND") {
    LMS_ASSIGN_OR_RETURN(Const c, in(2));
    if (op == "ScatterND") return fold_scatter_nd(im, n, a, b, c);
    return op == "Where" ? fold_where(im, n, a, b, c) : fold_range(im, n, a, b, c);
  }
  return fold_binary(im, n, a, b);
}

bool foldable_op(const std::string& op) {
  static const char* kOps[] = {"Constant",  "Shape",   "Concat",  "Cast",      "ConstantOfShape",
                               "Unsqueeze", "Squeeze", "Reshape", "Slice",     "Gather",
                               "Add",       "Sub",     "Mul",     "Div",       "Transpose",
                               "Equal",     "Less",    "Greater", "Where",     "Range",
                               "Mod",       "Pow",     "Expand",  "ScatterND", "Not",
                               "Neg"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

// An output other than the first that some later node might read cannot be
// produced by an identity: refuse it rather than leave it dangling.
absl::Status only_first_output(const NodeProto& n, std::string_view what) {
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) {
      return Importer::error(n, absl::StrCat("output ", k, " ('", n.output(k), "', ", to_absl(what),
                                             ") is not supported"));
    }
  }
  return absl::OkStatus();
}

// Dropout in inference or with ratio 0 is the identity (opset 12+: ratio
// and training_mode are inputs).
absl::StatusOr<bool> is_identity_dropout(const Importer& im, const NodeProto& n) {
  double ratio = 0.5;
  if (im.has_input(n, 1)) {
    LMS_ASSIGN_OR_RETURN(Const r, im.const_input(n, 1, "ratio"));
    if (r.numel() != 1) return im.error(n, "ratio must be a scalar");
    ratio = r.at(0);
  }
  bool training = false;
  if (im.has_input(n, 2)) {
    LMS_ASSIGN_OR_RETURN(Const t, im.const_input(n, 2, "training_mode"));
    if (t.numel() != 1) return im.error(n, "training_mode must be a scalar");
    training = t.at(0) != 0;
  }
  return ratio == 0 || !training;
}

absl::StatusOr<bool> is_zero_pad(const Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(Const pads, im.const_input(n, 1, "pads"));
  for (int64_t k = 0; k < pads.numel(); ++k) {
    if (pads.at(k) != 0) return false;
  }
  return true;
}

bool is_unit_avg_pool(const NodeProto& n) {
  auto ones = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
  };
  auto zeros = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
  };
  const std::string pad = attr_string(n, "auto_pad", "NOTSET");
  return ones(attr_ints(n, "kernel_shape")) && ones(attr_ints(n, "strides")) &&
         zeros(attr_ints(n, "pads")) && (pad == "NOTSET" || pad == "VALID");
}

// Identity, Dropout as identity, all-zero Pad, AveragePool 1x1, one-input
// Concat: the output is the input.
absl::StatusOr<bool> remove_identity(Importer& im, const NodeProto& n) {
  const std::string& op = n.op_type();
  bool identity = op == "Identity" || (op == "Concat" && n.input_size() == 1);
  if (op == "Dropout") {
    LMS_ASSIGN_OR_RETURN(identity, is_identity_dropout(im, n));
    if (!identity) return false;
    // torch.onnx.export names the mask output even where nothing reads it
    // (a training-mode export of Dropout(p=0)): refused only where read.
    if (n.output_size() > 1 && !n.output(1).empty()) {
      im.not_computed[n.output(1)] =
          absl::StrCat("the mask of Dropout '", n.output(0),
                       "' is not supported: lms removes a Dropout of ratio 0 or in inference "
                       "mode and computes no mask");
    }
  }
  if (op == "Pad") {
    LMS_ASSIGN_OR_RETURN(identity, is_zero_pad(im, n));
  }
  if (op == "AveragePool") identity = is_unit_avg_pool(n);
  if (!identity) return false;
  LMS_ASSIGN_OR_RETURN(const Value* v, im.input(n, 0));
  if (v == nullptr) return im.error(n, "input 0 is required");
  im.alias(n.output(0), n.input(0));
  return true;
}

// A Transpose of a rank-2 constant that swaps its dims.
bool swaps_rank2(const NodeProto& n, const Const& out) {
  const std::vector<int64_t> perm = attr_ints(n, "perm");  // checked by fold_transpose
  return n.op_type() == "Transpose" && out.dims.size() == 2 && (perm.empty() || perm[0] == 1);
}

// Per Note [Weight-side Transpose], the transpose of a rank-2
// constant remembers its source (through identities); transposing that
// again is the source.
bool mark_weight_transpose(Importer& im, const NodeProto& n, Const c) {
  const Value& in = im.values.at(n.input(0));
  if (const std::string twice = in.transpose_of; !twice.empty()) {
    im.alias(n.output(0), twice);
    return true;
  }
  const std::string source = in.alias_of.empty() ? n.input(0) : in.alias_of;
  im.set_const(n.output(0), std::move(c));
  im.values[n.output(0)].transpose_of = source;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> reshaped_dims(const Importer& im, const NodeProto& n,
                                                   std::vector<int64_t> dims) {
  Const c;
  c.dims = std::move(dims);
  LMS_ASSIGN_OR_RETURN(c, fold_reshape(im, n, std::move(c)));
  return c.dims;
}

absl::StatusOr<bool> fold_node(Importer& im, const NodeProto& n) {
  LMS_ASSIGN_OR_RETURN(bool removed, remove_identity(im, n));
  if (removed) return true;
  const std::string& op = n.op_type();
  const bool shape_of_tensor = op == "Shape";
  if (!foldable_op(op) || (!shape_of_tensor && !all_const(im, n))) return false;
  if (op != "Transpose" && !shape_of_tensor && reads_trainable(im, n)) return false;
  LMS_RETURN_IF_ERROR(only_first_output(n, "a second output"));
  LMS_ASSIGN_OR_RETURN(Const c, fold_const_node(im, n));
  if (swaps_rank2(n, c)) return mark_weight_transpose(im, n, std::move(c));
  im.set_const(n.output(0), std::move(c));
  return true;
}

}  // namespace lms::onnx_import
