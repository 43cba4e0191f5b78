# Google Benchmark micro-benchmarks of the BFC allocator.
add_executable(allocator_bench ${CMAKE_CURRENT_SOURCE_DIR}/allocator_bench.cc)
target_link_libraries(allocator_bench PRIVATE lms_allocator benchmark::benchmark
                                              benchmark::benchmark_main)
