# Google Benchmark of the CPU device's convolution kernels on the VDSR shapes:
# blocked vs plain layouts, and the lms kernel vs oneDNN called directly.
add_executable(conv_bench ${CMAKE_CURRENT_SOURCE_DIR}/conv_bench.cc)
# A micro-benchmark of library internals: it sees src/ (user programs do not).
target_include_directories(conv_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(conv_bench PRIVATE lms_backend_cpu DNNL::dnnl benchmark::benchmark)
