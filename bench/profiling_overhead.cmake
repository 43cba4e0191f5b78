# Step time with and without the profiler's Recorder as event sink.
add_executable(profiling_overhead_bench ${CMAKE_CURRENT_SOURCE_DIR}/profiling_overhead_bench.cc)
target_link_libraries(profiling_overhead_bench PRIVATE lms::lms lms_models
                      benchmark::benchmark benchmark::benchmark_main)
