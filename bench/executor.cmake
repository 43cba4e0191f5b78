# Google Benchmark of the executor's overhead on convolutions: a conv chain's
# training step through lms::Session vs. the same oneDNN primitives called
# directly (issue 2: overhead under 5%).
if(TARGET lms_runtime)
  add_executable(executor_bench ${CMAKE_CURRENT_SOURCE_DIR}/executor_bench.cc)
  target_link_libraries(executor_bench PRIVATE lms_runtime lms_backend DNNL::dnnl
                                               benchmark::benchmark)
endif()
