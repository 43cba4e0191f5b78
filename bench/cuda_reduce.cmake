# Achieved vs peak memory bandwidth of the CUDA backend's grouped reductions
# (CUDA events; prints why and exits 0 without a usable GPU). Built with the
# CUDA backend only.
if(TARGET lms_backend_cuda)
  add_executable(cuda_reduce_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_reduce_bench.cc)
  # A micro-benchmark of library internals: it sees src/ (user programs do not).
  target_include_directories(cuda_reduce_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(cuda_reduce_bench PRIVATE lms_backend_cuda CUDA::cudart)
endif()
