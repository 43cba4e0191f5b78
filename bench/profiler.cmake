# Google Benchmark of the profiler's Recorder: cost per recorded event.
add_executable(profiler_bench ${CMAKE_CURRENT_SOURCE_DIR}/profiler_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
target_include_directories(profiler_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(profiler_bench PRIVATE lms_profiler benchmark::benchmark
                      benchmark::benchmark_main)
