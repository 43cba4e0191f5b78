// The graph IR: nodes (op, attributes, input and output tensors, control
// inputs) and tensors (name, shape, dtype, producer, consumers). Layouts are
// NCHW / NCDHW (other ranks: docs/ops.md), dtype float32 (int64: embedding ids).
//
//   lms::Graph g;
//   lms::TensorId x = g.input("lr", {16, 1, 64, 64});
//   lms::TensorId w = g.parameter("conv1/w", {64, 1, 3, 3}, lms::Init::he_normal(1, 9));
//   lms::TensorId y = lms::conv2d(g, "conv1", x, w, lms::kNoTensor, {.pad = {1, 1}});
//   LMS_RETURN_IF_ERROR(g.status());   // the first error any builder hit
//
// Builders never fail loudly: a bad call records an InvalidArgument naming the
// node in g.status() (the graph keeps only the nodes that were valid) and
// returns kNoTensor, which later builders propagate. This keeps model code
// free of error plumbing, in the manner of XLA's XlaBuilder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/op_kind.h"
#include "lms/types.h"

namespace lms {

using TensorId = int32_t;
using NodeId = int32_t;
inline constexpr TensorId kNoTensor = -1;
inline constexpr NodeId kNoNode = -1;

// What a tensor is for. Parameters and optimizer state are persistent: they
// live in device memory for the whole session. kHost tensors are swapped-out
// copies in pinned host memory (outputs of swap_out).
enum class TensorRole : uint8_t {
  kInput,           // fed every step
  kParameter,       // persistent, trained
  kOptimizerState,  // persistent (momentum, Adam moments, step count)
  kActivation,      // produced by a forward node
  kGradient,        // produced by a backward node
  kHost,            // pinned host copy of a swapped-out tensor
};

const char* role_name(TensorRole role);
bool is_persistent(TensorRole role);

// How a persistent tensor is initialised. he_normal draws N(0, 2/fan_in) from
// a seeded generator (He et al., ICCV 2015), so runs are reproducible.
// values holds the tensor's initial values (row-major, one float per
// element), shared and immutable: copies of the graph share them, and
// Session::create uploads them (an imported model's weights, lms/onnx.h).
// Graph::parameter / optimizer_state check that their count is the shape's
// element count. The text form prints such a tensor as
// values(elements=N) without the numbers, and parse_graph refuses it.
struct Init {
  enum class Kind : uint8_t { kZeros, kConstant, kHeNormal, kValues };
  Kind kind = Kind::kZeros;
  double value = 0;                                            // kConstant
  int64_t fan_in = 1;                                          // kHeNormal
  uint64_t seed = 0;                                           // kHeNormal
  std::shared_ptr<const std::vector<float>> values = nullptr;  // kValues
  static Init zeros() { return {}; }
  static Init constant(double v) { return {Kind::kConstant, v, 1, 0, nullptr}; }
  static Init he_normal(uint64_t seed, int64_t fan_in) {
    return {Kind::kHeNormal, 0, fan_in, seed, nullptr};
  }
  static Init from_values(std::shared_ptr<const std::vector<float>> v) {
    return {Kind::kValues, 0, 1, 0, std::move(v)};
  }
};

struct Tensor {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  TensorRole role = TensorRole::kActivation;
  Init init;                      // persistent tensors only
  NodeId producer = kNoNode;      // kNoNode for inputs and persistent tensors
  std::vector<NodeId> consumers;  // in order of node creation, no duplicates
  uint64_t bytes() const { return shape_bytes(shape, dtype); }
};

// What lms::rewrite planned a graph for (lms/rewrite.h). Session::create
// refuses a planned graph on a device, capacity, fetch set or kernel
// workspaces other than these, because the plan's "fits" holds only for them.
struct PlanRecord {
  bool planned = false;                   // set by lms::rewrite
  bool lms_enabled = false;               // LmsConfig::enabled
  SwapPolicy policy = SwapPolicy::kAuto;  // LmsConfig::policy
  std::string device_kind;                // Device::kind() ("cpu", "cuda"); empty: no device given
  uint64_t capacity_bytes = 0;            // device capacity planned for; 0: not known
  uint64_t budget_bytes = 0;              // bytes planned for (the capacity or device_memory_limit)
  bool budget_from_limit = false;         // budget_bytes came from device_memory_limit
  uint64_t alignment_bytes = 0;           // allocator alignment planned for
  std::vector<std::string> fetched;       // tensors kept to the end of the step, sorted
  bool workspaces_known = false;
  std::vector<uint64_t> workspace_bytes;  // by NodeId of the planned graph
  // The bound of the placement search that found the layout `fits` was
  // decided on (placed buffers; Note [Last-resort placement]).
  // Session::create lays a planned graph out with this bound and the facts
  // above, which gives that very layout; a StepPlan (lms/plan.h) carries
  // the layout itself, so its session searches nothing.
  int64_t placement_search_buffers = 0;
};

// Why a node exists. Passes and the planner tell generated nodes apart by
// this, never by a name prefix. A graph read from its text form has every
// node kOriginal but swap_out / swap_in (kSwap).
enum class NodeOrigin : uint8_t {
  kOriginal,   // built by the user, the importer, autodiff or the optimizer
  kSwap,       // swap_out / swap_in inserted by lms::rewrite
  kRecompute,  // a clone lms::rewrite runs again (recompute/<tensor>/<k>)
  kFused,      // the work of several nodes in one kernel (a device pass)
  kCast,       // a dtype conversion inserted by a pass
};
const char* node_origin_name(NodeOrigin origin);  // "original", "swap", ...

struct Node {
  std::string name;
  OpKind op = OpKind::kConv;  // op_name(op) in the text form
  Attrs attrs;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  std::vector<NodeId> control_inputs;  // must run before this node
  NodeOrigin origin = NodeOrigin::kOriginal;
};

// OK if every dim of `shape` is positive and the tensor's size in bytes fits
// in int64 (so num_elements and shape_bytes cannot overflow); else
// InvalidArgument "<what>: ..." saying which. Every tensor of a Graph passes.
absl::Status check_shape(std::string_view what, const Shape& shape, DType dtype = DType::kFloat32);

class Graph {
 public:
  // Graph inputs and persistent tensors. A duplicate or malformed name (empty,
  // with whitespace, control characters or one of ( ) , = [ ] { } "), a shape
  // check_shape rejects or a he_normal init with fan_in < 1 is recorded as an
  // InvalidArgument in status() naming the tensor, and returns kNoTensor.
  // `dtype` kInt64 for the ids embedding reads and the labels of
  // softmax_cross_entropy (fed with Int64Feeds, lms/session.h); parameters
  // and optimizer state are float32.
  TensorId input(std::string_view name, Shape shape, DType dtype = DType::kFloat32);
  TensorId parameter(std::string_view name, Shape shape, Init init);
  TensorId optimizer_state(std::string_view name, Shape shape, Init init = Init::zeros());
  // A tensor without producer with `from`'s name, shape, dtype, role and
  // init: the one way a pass that rebuilds a graph copies an input or a
  // persistent tensor, so none of them is lost. Errors as input().
  TensorId leaf_like(const Tensor& from);

  // Adds a node: validates attributes and infers output shapes with the op
  // registry. Output tensors are named "<name>" for a
  // single output and "<name>:<i>" otherwise, with the given role.
  // InvalidArgument naming the node for an unknown tensor, a duplicate name,
  // bad attributes or shapes; FailedPrecondition if status() already
  // holds an error.
  absl::StatusOr<std::vector<TensorId>> add_node(OpKind op, std::string_view name,
                                                 std::vector<TensorId> inputs, Attrs attrs,
                                                 TensorRole output_role = TensorRole::kActivation);
  // Like add_node, but records a failure in status() and returns an empty list.
  std::vector<TensorId> add(OpKind op, std::string_view name, std::vector<TensorId> inputs,
                            Attrs attrs, TensorRole output_role = TensorRole::kActivation);
  // add() for single-output ops; kNoTensor on failure.
  TensorId add1(OpKind op, std::string_view name, std::vector<TensorId> inputs, Attrs attrs,
                TensorRole output_role = TensorRole::kActivation);

  void add_control_edge(NodeId before, NodeId after);

  // Gives tensor `id` the name `name` (for a pass that merges nodes whose
  // outputs keep their names). InvalidArgument, naming both, when the name
  // is taken or not allowed (as add_node's names).
  absl::Status rename_tensor(TensorId id, std::string_view name);

  // A name not used by any node or tensor yet: `base`, else base_1, base_2 ...
  std::string unique_name(std::string_view base) const;

  // The first error recorded by a builder (OK if none).
  const absl::Status& status() const { return status_; }
  void record_error(absl::Status error);

  // Accessors. Ids are dense indices, stable for the graph's lifetime.
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  int32_t num_tensors() const { return static_cast<int32_t>(tensors_.size()); }
  const Node& node(NodeId id) const { return nodes_[id]; }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  Node& mutable_node(NodeId id) { return nodes_[id]; }
  Tensor& mutable_tensor(TensorId id) { return tensors_[id]; }
  TensorId find_tensor(std::string_view name) const;  // kNoTensor if absent
  NodeId find_node(std::string_view name) const;      // kNoNode if absent

  // Replaces input `index` of node `consumer` with `replacement`, keeping the
  // consumer lists of both tensors right.
  void replace_input(NodeId consumer, int index, TensorId replacement);

  // The preferred order of nodes (creation order unless set_order was
  // called); schedule() turns it into a topological order.
  const std::vector<NodeId>& order() const { return order_; }
  // Sets the preferred order; InvalidArgument unless it is a permutation of
  // all node ids.
  absl::Status set_order(std::vector<NodeId> order);

  // Graph-level marks: the training loss and the tensors fetched by default.
  TensorId loss() const { return loss_; }
  void set_loss(TensorId t) { loss_ = t; }
  // What lms::rewrite planned this graph for (planned = false before).
  const PlanRecord& plan_record() const { return plan_record_; }
  void set_plan_record(PlanRecord record) { plan_record_ = std::move(record); }

 private:
  TensorId add_tensor(std::string_view name, Shape shape, TensorRole role, Init init);
  // A tensor without producer (input or persistent), after checking its name
  // and shape; records the error and returns kNoTensor otherwise.
  TensorId add_leaf(std::string_view name, Shape shape, TensorRole role, Init init,
                    DType dtype = DType::kFloat32);
  absl::Status check_new_name(std::string_view name) const;

  std::vector<Node> nodes_;
  std::vector<Tensor> tensors_;
  std::vector<NodeId> order_;
  absl::flat_hash_map<std::string, TensorId> tensor_by_name_;
  absl::flat_hash_map<std::string, NodeId> node_by_name_;
  TensorId loss_ = kNoTensor;
  PlanRecord plan_record_;
  absl::Status status_;
};

// A deterministic topological order of all nodes, respecting data and control
// edges: Kahn's algorithm that always takes the ready node earliest in
// graph.order(), so a valid preferred order is returned unchanged.
// InvalidArgument naming a node on the cycle if the graph is cyclic.
absl::StatusOr<std::vector<NodeId>> schedule(const Graph& graph);

// Checks the graph invariants (docs/design.md, "Graph IR"): acyclic; every
// node's op known, attrs valid and output shapes equal to what shape inference
// gives; producer and consumer lists consistent; no activation without
// producer; swap_in after its swap_out; inputs of a node produced earlier in
// the schedule. InvalidArgument naming the first offending node or tensor.
absl::Status verify(const Graph& graph);

// Text form, one line per tensor declaration and node, in schedule order:
//   input lr f32[16,1,64,64]
//   parameter conv1/w f32[64,1,3,3] he_normal(seed=1,fan_in=9)
//   node conv1 = conv(lr, conv1/w) {dilation=[1,1], pad=[1,1], stride=[1,1]}
//       -> conv1 f32[16,64,64,64] activation                  (one line)
//   node swap_in/x/0 = swap_in(swap_out/x) after(relu3) -> swap_in/x/0 f32[...] activation
// Attribute values: integers, reals printed with enough digits to read back
// exactly (and always with '.', 'e', "inf" or "nan"), int lists [a,b] and
// strings in double quotes with \" \\ \n \r \t and \xHH escapes.
// parse_graph(to_text(g)) gives a graph whose to_text is identical, for every
// attribute value and every seed.
std::string to_text(const Graph& graph);
// InvalidArgument with the line number and what was expected for malformed
// text, or the builder's error for a node or tensor the graph rejects.
absl::StatusOr<Graph> parse_graph(std::string_view text);

}  // namespace lms
