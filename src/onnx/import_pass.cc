#include "onnx/import_pass.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;
using Nodes = google::protobuf::RepeatedPtrField<NodeProto>;

// The values defined at a point of a graph; a body's scope sees its fused
// node's.
struct Scope {
  absl::flat_hash_set<std::string> defined;
  const Scope* outer = nullptr;

  bool has(const std::string& v) const {
    return defined.contains(v) || (outer != nullptr && outer->has(v));
  }
};

absl::Status check_nodes(const Nodes& nodes, Scope& scope) {
  for (const NodeProto& n : nodes) {
    for (const std::string& in : n.input()) {
      if (!in.empty() && !scope.has(in)) {
        return Importer::error(
            n,
            absl::StrCat("reads '", in, "', which no earlier node, initializer or input writes"));
      }
    }
    if (const GraphProto* body = fused_body(n)) {
      Scope inner{.defined = {}, .outer = &scope};
      LMS_RETURN_IF_ERROR(check_nodes(body->node(), inner));
    }
    for (const std::string& out : n.output()) {
      if (out.empty()) continue;
      if (scope.has(out)) {
        return Importer::error(n, absl::StrCat("writes '", out, "', which is written before"));
      }
      scope.defined.insert(out);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> ImportPipeline::run(GraphProto& g) const {
  const bool ordered = check_file_order(g).ok();
  bool changed = false;
  for (const std::unique_ptr<ImportPass>& pass : passes_) {
    absl::StatusOr<bool> c = pass->run(g);
    if (!c.ok()) {
      return absl::Status(
          c.status().code(),
          absl::StrCat("ONNX import pass '", to_absl(pass->name()), "': ", c.status().message()));
    }
    if (!*c) continue;
    changed = true;
    if (!ordered) continue;
    if (absl::Status s = check_file_order(g); !s.ok()) {
      return absl::InternalError(absl::StrCat("ONNX import pass '", to_absl(pass->name()),
                                              "' left the nodes out of order: ", s.message()));
    }
  }
  return changed;
}

// The order: the layer norm rewrite, then GELU, then attention. As
// exported, no two of the patterns share a node (each inner value of a
// chain has one reader, and at each step the patterns need readers of
// different ops), so the order changes no result; it is the precedence the
// importer gave them when they were matched ahead of the walk (the layer
// norm rewritten before anything else read the graph, a GELU chain
// preferred over an attention chain), and a pattern added later that can
// overlap takes its precedence from its line: an earlier pass takes the
// node. Folding is no pass: it computes on the values the walk has bound
// for the given input shapes (a Shape of a mapped tensor), so it stays a
// step of the walk.
ImportPipeline import_pipeline(const std::string& model_dir) {
  ImportPipeline p;
  p.add(std::make_unique<FuseLayerNormPass>(model_dir));
  p.add(std::make_unique<FuseGeluPass>());
  p.add(std::make_unique<FuseAttentionPass>());
  return p;
}

absl::Status check_file_order(const GraphProto& g) {
  Scope scope;
  for (const auto& in : g.input()) scope.defined.insert(in.name());
  for (const auto& t : g.initializer()) scope.defined.insert(t.name());
  LMS_RETURN_IF_ERROR(check_nodes(g.node(), scope));
  for (const auto& o : g.output()) {
    if (!scope.has(o.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX graph output '", o.name(), "' is written by no node"));
    }
  }
  return absl::OkStatus();
}

absl::Status refuse_fused_domain(const GraphProto& g) {
  for (const NodeProto& n : g.node()) {
    if (n.domain() == kFusedDomain) {
      return Importer::error(n, absl::StrCat("domain '", n.domain(),
                                             "' is unknown to lms; "
                                             "supported: the default domain (ai.onnx)"));
    }
  }
  return absl::OkStatus();
}

const GraphProto* fused_body(const NodeProto& n) {
  if (n.domain() != kFusedDomain) return nullptr;
  const ::onnx::AttributeProto* body = find_attr(n, "body");
  return body != nullptr && body->type() == ::onnx::AttributeProto::GRAPH ? &body->g() : nullptr;
}

void for_each_exported_node(const GraphProto& g, const std::function<void(const NodeProto&)>& f) {
  for (const NodeProto& n : g.node()) {
    if (const GraphProto* body = fused_body(n)) {
      for_each_exported_node(*body, f);
    } else {
      f(n);
    }
  }
}

NodeProto fused_node(const GraphProto& g, const std::vector<int>& chain, std::string_view op) {
  const NodeProto& last = g.node(chain.back());
  NodeProto f;
  f.set_name(last.name());
  f.set_domain(std::string(kFusedDomain));
  f.set_op_type(std::string(op));
  absl::flat_hash_set<std::string> inside, read;
  for (int k : chain) inside.insert(g.node(k).output().begin(), g.node(k).output().end());
  for (int k : chain) {
    for (const std::string& in : g.node(k).input()) {
      if (!in.empty() && !inside.contains(in) && read.insert(in).second) f.add_input(in);
    }
  }
  for (const std::string& out : last.output()) f.add_output(out);
  ::onnx::AttributeProto* body = f.add_attribute();
  body->set_name("body");
  body->set_type(::onnx::AttributeProto::GRAPH);
  body->mutable_g()->set_name(absl::StrCat(to_absl(op), " of ", last.output(0)));
  for (int k : chain) *body->mutable_g()->add_node() = g.node(k);
  return f;
}

void add_attr(NodeProto& n, std::string_view name, int64_t value) {
  ::onnx::AttributeProto* a = n.add_attribute();
  a->set_name(std::string(name));
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(value);
}

void add_attr(NodeProto& n, std::string_view name, const std::vector<int64_t>& values) {
  ::onnx::AttributeProto* a = n.add_attribute();
  a->set_name(std::string(name));
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

bool replace_chains(GraphProto& g, std::vector<ChainFusion> fusions) {
  if (fusions.empty()) return false;
  absl::flat_hash_set<int> removed;
  absl::flat_hash_map<int, NodeProto*> at;  // the chain's node last in file order -> fused
  for (ChainFusion& f : fusions) {
    removed.insert(f.nodes.begin(), f.nodes.end());
    at[*std::max_element(f.nodes.begin(), f.nodes.end())] = &f.fused;
  }
  Nodes nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    if (auto it = at.find(i); it != at.end()) {
      *nodes.Add() = std::move(*it->second);
    } else if (!removed.contains(i)) {
      *nodes.Add() = std::move(*g.mutable_node(i));
    }
  }
  g.mutable_node()->Swap(&nodes);
  return true;
}

}  // namespace lms::onnx_import
