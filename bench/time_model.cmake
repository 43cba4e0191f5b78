# Predicted vs measured step time and stall of a swapped VDSR step on the
# emulated device at several links, with the measured time model
# (lms::profile_step) and the old roofline constants. Built like a user
# program: include/lms and lms::lms only.
if(TARGET lms::lms AND TARGET lms_models)
  add_executable(time_model_bench ${CMAKE_CURRENT_SOURCE_DIR}/time_model_bench.cc)
  target_link_libraries(time_model_bench PRIVATE lms::lms lms_models lms_flags fmt::fmt)
endif()
