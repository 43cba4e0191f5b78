# Google Benchmark of the profiler's Recorder: cost per recorded event.
add_executable(profiler_bench ${CMAKE_CURRENT_SOURCE_DIR}/profiler_bench.cc)
target_link_libraries(profiler_bench PRIVATE lms_profiler benchmark::benchmark
                      benchmark::benchmark_main)
