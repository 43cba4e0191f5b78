# lms-bench: the LMS comparison harness (bench/README.md). lms_bench_lib holds
# everything but main() so tests/bench runs the sweep and search in-process.
# Real VDSR photo batches come from examples/vdsr's Dataset when vdsr_lib is
# built (LMS_BUILD_EXAMPLES=ON), and real MRI volumes for the 3-D U-Net from
# examples/unet3d's unet3d_lib; otherwise lms-bench falls back to random data.
if(TARGET lms::lms AND TARGET lms_models)
  file(GLOB LMS_BENCH_LIB_SRCS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/lms_bench/*.cc)
  list(REMOVE_ITEM LMS_BENCH_LIB_SRCS ${CMAKE_CURRENT_SOURCE_DIR}/lms_bench/main.cc)
  add_library(lms_bench_lib ${LMS_BENCH_LIB_SRCS})
  # Like a user program: include/lms and lms::lms only.
  target_include_directories(lms_bench_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/lms_bench)
  target_link_libraries(lms_bench_lib
    PUBLIC lms::lms lms_models absl::status absl::statusor nlohmann_json::nlohmann_json
    PRIVATE lms_flags fmt::fmt)
  if(TARGET lms_onnx)  # lms::import_onnx is in liblms
    target_compile_definitions(lms_bench_lib PRIVATE LMS_BENCH_HAVE_ONNX=1)
  endif()
  if(TARGET vdsr_lib)
    target_link_libraries(lms_bench_lib PRIVATE vdsr_lib)
    target_compile_definitions(lms_bench_lib PRIVATE LMS_BENCH_HAVE_VDSR_DATA=1)
  endif()
  if(TARGET unet3d_lib)
    target_link_libraries(lms_bench_lib PRIVATE unet3d_lib)
    target_compile_definitions(lms_bench_lib PRIVATE LMS_BENCH_HAVE_UNET3D_DATA=1)
  endif()

  add_executable(lms-bench ${CMAKE_CURRENT_SOURCE_DIR}/lms_bench/main.cc)
  target_link_libraries(lms-bench PRIVATE lms_bench_lib)
  set_target_properties(lms-bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
