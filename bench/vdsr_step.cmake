# Wall time of a VDSR training step on the emulated CPU device (the speed
# target against PyTorch, at most 0.8x its time; bench/compare_pytorch.sh,
# bench/SPEED.md).
if(TARGET lms_runtime AND TARGET lms_models)
  add_executable(vdsr_step_bench ${CMAKE_CURRENT_SOURCE_DIR}/vdsr_step_bench.cc)
  target_link_libraries(vdsr_step_bench PRIVATE lms::lms lms_models lms_flags fmt::fmt)
endif()
