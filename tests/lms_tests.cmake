# lms_glob_tests(<lib> [extra libs...]): one test executable per *_test.cc in
# the calling folder. Tests whose file name contains "stream", "event",
# "device" or "executor" are labelled "concurrency" (also run under TSan).
function(lms_glob_tests)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    set(labels "")
    if(name MATCHES "stream|event|device|executor|session")
      set(labels concurrency)
    endif()
    lms_add_test(${name} SOURCES ${src} LIBS ${ARGN} LABELS "${labels}")
    target_compile_definitions(${name} PRIVATE LMS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  endforeach()
endfunction()
