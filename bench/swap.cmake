# Google Benchmark of the swap rewrite: analysis + auto planning, and the whole
# lms::rewrite (plan, insertion, verify, re-analysis, simulation) on generated
# training-like graphs of 1k to 100k nodes.
if(TARGET lms_swap)
  add_executable(swap_bench ${CMAKE_CURRENT_SOURCE_DIR}/swap_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
target_include_directories(swap_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(swap_bench PRIVATE lms_swap lms_graph benchmark::benchmark
                                           benchmark::benchmark_main)
endif()
