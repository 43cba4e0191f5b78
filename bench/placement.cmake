# Google Benchmark of the static placement of a step's buffers
# (src/swap/placement.h): placement time and arena / lower-bound gap on
# generated training-like live ranges of 10k to 400k buffers and on the
# example models, with the BFC replay's fragmentation beside it.
if(TARGET lms::lms AND TARGET lms_models)
  add_executable(placement_bench ${CMAKE_CURRENT_SOURCE_DIR}/placement_bench.cc)
  # A micro-benchmark of library internals: it sees src/ (user programs do
  # not). It links liblms (every layer) rather than lms_swap because the
  # model builders of lms_models link liblms.
  target_include_directories(placement_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(placement_bench PRIVATE lms::lms lms_models benchmark::benchmark)
endif()
