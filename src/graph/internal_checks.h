// Whether lms re-verifies the graphs its own passes build.
#pragma once

namespace lms {

// Note [Internal graph checks]: every graph a caller hands to lms is
// verified once, at the entry that takes it (lms::rewrite, lms::plan_step,
// gather_facts, profile_step, Session::create). The graphs lms's own passes
// build from it (lowering, conv + relu fusion, the planner's candidates with
// their swap and recompute nodes) are verified again only where this returns
// true: in builds without NDEBUG, and in any process whose environment sets
// LMS_CHECK_INTERNAL=1, as every test program of the suite does
// (lms_add_test). A verify is one shape inference per node, about 0.4 s on a
// graph of 100,000 nodes, and planning one step made nine of them; a pass that
// breaks a graph is a bug of lms, which the tests are there to find.
bool internal_checks();

}  // namespace lms
