# Google Benchmark micro-benchmarks of the BFC allocator.
add_executable(allocator_bench ${CMAKE_CURRENT_SOURCE_DIR}/allocator_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
target_include_directories(allocator_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(allocator_bench PRIVATE lms_allocator benchmark::benchmark
                                              benchmark::benchmark_main)
