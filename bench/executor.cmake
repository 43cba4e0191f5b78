# Google Benchmark of the executor's overhead on convolutions: a conv chain's
# training step through lms::Session vs. the same oneDNN primitives called
# directly (target: overhead under 5%).
if(TARGET lms_runtime)
  add_executable(executor_bench ${CMAKE_CURRENT_SOURCE_DIR}/executor_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
  target_include_directories(executor_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(executor_bench PRIVATE lms_runtime lms_backend_cpu DNNL::dnnl
                                               benchmark::benchmark)
endif()
