# Import speed of lms::import_onnx on a model file (bench/onnx_import_bench.cc);
# a user program: include/lms only. Needs the ONNX importer in liblms.
if(TARGET lms::lms AND TARGET lms_onnx)
  add_executable(onnx_import_bench ${CMAKE_CURRENT_SOURCE_DIR}/onnx_import_bench.cc)
  target_link_libraries(onnx_import_bench PRIVATE lms::lms lms_flags)
endif()
