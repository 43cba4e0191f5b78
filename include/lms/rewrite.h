// lms::rewrite: the Large Model Support pass. Plans which activations to swap
// to pinned host memory or recompute (policy and auto_actions of LmsConfig)
// and inserts swap_out / swap_in nodes and recompute clones into the training
// graph in place (docs/design.md "Swap rewrite"). Recompute clones are named
// recompute/<tensor>/<k>, run the kernels of the nodes they copy, and keep
// results bit-identical.
//
//   LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = 256 << 20}));
//   LMS_ASSIGN_OR_RETURN(auto cfg, lms::LmsConfig::from_file("lms.toml"));
//   LMS_ASSIGN_OR_RETURN(lms::RewriteReport rep, lms::rewrite(train, cfg, *device));
//   if (!rep.fits) { /* rep.summary() says why */ }
//
// The Device overload is the one to use: it takes the capacity, the
// allocator alignment and every kernel's workspace from the device, so
// `fits` is exact: the plan places every buffer of the step at a fixed
// offset of one device arena (static placement, Pisarchyk & Lee 2020), the
// session allocates exactly that arena, and no allocator runs inside a
// step. The overloads without a device plan from what they are given; when
// they lack a fact that "fits" depends on (a budget, the kernel
// workspaces), the report says it cannot decide (fit_unknown_reason) and
// `fits` is false.
//
// lms::rewrite is lms::plan_step (lms/plan.h) that keeps the planned graph
// in `graph`: a short composition of lms::gather_facts (lms/facts.h), the
// planner and taking its graph. The graph records what it was planned for
// (Graph::plan_record), and Session::create refuses to run it on another
// device kind, capacity, alignment, fetch set or workspaces; it lays the
// step out again from that record, which gives the planned layout. A
// program that wants the plan's layout taken as it is, with no search at
// session creation, keeps the StepPlan and calls Session::create(plan,
// device).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "lms/plan.h"

namespace lms {

class Device;

// lms::rewrite (lms/plan.h) with the facts gathered from `device` (PlanningFacts): its
// capacity (the budget when config.device_memory_limit is 0), its allocator
// alignment, its pinned host pool and the workspace of every kernel
// compiled on it. With LMS enabled and config.time_model "measured" (the
// default) it first profiles the graph on the device (lms::profile_step,
// lms/profile.h: each compute node run alone, and the link fitted from a
// few copies) and plans with those times, the measured link and a
// calibrated roofline (lms/config.h TimeModel); the device is left without
// an event sink.
// `known`: facts the caller already has, which the device then does not
// measure: node_time_s and least_node_time_s (by the input graph's NodeIds;
// a fused node's time is the sum of its two), link and roofline, for example rank 0's
// measurements shared with every rank so that all ranks plan alike; ranks
// and allreduce_bytes_per_s are taken from it as given. Its other fields
// are ignored: the device's own always apply.
// Additional errors: InvalidArgument when device_memory_limit exceeds the
// device's capacity; FailedPrecondition when the device already holds
// allocations (plan before creating sessions on it); Unimplemented for an op
// the device has no kernel for.
// A graph rewritten before may be rewritten again, by any policy, for
// example for another device or budget: its swap, recompute and fused nodes
// stay as they are (ordinary nodes of the graph, nothing fuses twice), and
// the report lists only the new decisions. With policy auto, a fully
// planned graph rewritten again for the device and budget it was planned
// for is left unchanged, text included, with no new decision
// (tests/public/conv_relu_fusion_test.cc). tflms, vdnn and manual apply
// their rule to the graph as it is, swap nodes included, so they carry no
// such guarantee: rewrite the original graph with them instead.
absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config, Device& device,
                                      const RewriteOptions& options = {},
                                      const PlanningFacts& known = {});

// The StepPlan of the Device overload of lms::rewrite: the device's passes
// (Note [Device lowering]), the facts gathered from the device (or `known`)
// and plan_step. Errors: those of that overload.
absl::StatusOr<StepPlan> plan_step(const Graph& graph, const LmsConfig& config, Device& device,
                                   const RewriteOptions& options = {},
                                   const PlanningFacts& known = {});

}  // namespace lms
