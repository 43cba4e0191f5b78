# The exact reference of the auto planner (bench/exact/exact_plan.h): keep /
# swap / recompute as a mixed-integer program, solved with COIN-OR CBC
# (Debian's coinor-libcbc-dev), and exact_plan_bench, which prints the
# optimum beside lms::rewrite's plan. Not part of liblms. CBC is looked for
# in the top-level CMakeLists.txt.
if(TARGET PkgConfig::CBC AND TARGET lms::lms AND TARGET lms_models)
  add_library(lms_exact ${CMAKE_CURRENT_SOURCE_DIR}/exact/exact_plan.cc
                        ${CMAKE_CURRENT_SOURCE_DIR}/exact/from_graph.cc)
  # It reads the planner's analysis (src/swap), like the other benchmarks of
  # library internals.
  target_include_directories(lms_exact PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/exact
                                              ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(lms_exact PUBLIC lms::lms absl::status absl::statusor
                                  PRIVATE PkgConfig::CBC fmt::fmt)
  # lms_bench_lib (bench/lms_bench.cmake, same conditions): the model
  # factories and link presets of lms-bench ratio.
  add_executable(exact_plan_bench ${CMAKE_CURRENT_SOURCE_DIR}/exact_plan_bench.cc)
  target_link_libraries(exact_plan_bench PRIVATE lms_exact lms_bench_lib lms_flags fmt::fmt)
elseif(NOT TARGET PkgConfig::CBC)
  message(STATUS "lms: COIN-OR CBC not found (coinor-libcbc-dev): no exact plan reference")
endif()
