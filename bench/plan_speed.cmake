# Planning speed and plan quality of lms::rewrite on the benchmarks' models
# (bench/plan_speed_bench.cc); a user program: include/lms and the example
# models only.
if(TARGET lms::lms AND TARGET lms_models)
  add_executable(plan_speed_bench ${CMAKE_CURRENT_SOURCE_DIR}/plan_speed_bench.cc)
  target_link_libraries(plan_speed_bench PRIVATE lms::lms lms_models lms_flags)
endif()
