# Google Benchmark of the CPU device's convolution kernels on the VDSR shapes:
# blocked vs plain layouts, and the lms kernel vs oneDNN called directly.
add_executable(conv_bench ${CMAKE_CURRENT_SOURCE_DIR}/conv_bench.cc)
target_link_libraries(conv_bench PRIVATE lms_backend DNNL::dnnl benchmark::benchmark)
