# Google Benchmark of the CPU device's tiled attention (forward + backward)
# against plain oneDNN matmuls doing the same number of FLOPs.
add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
target_include_directories(attention_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(attention_bench PRIVATE lms_backend_cpu DNNL::dnnl benchmark::benchmark)
