# Fails if a public header (include/lms) includes anything but the standard
# library, Abseil and other lms/ headers: no src/ path, no oneDNN, CUDA or
# codec headers (tests/check_program_includes.cmake does the same for the
# example programs and lms-bench).
#   cmake -DROOT=<dir> -DALLOWED="<regex>" -P check_includes.cmake
file(GLOB_RECURSE files LIST_DIRECTORIES false ${ROOT}/*.h ${ROOT}/*.cc)
set(bad)
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^#include ")
  foreach(line ${lines})
    string(REGEX REPLACE "^#include [\"<]([^\">]+)[\">].*" "\\1" path "${line}")
    if(line MATCHES "^#include <" AND NOT path MATCHES "/")
      continue()  # the standard library
    endif()
    if(NOT path MATCHES "${ALLOWED}")
      list(APPEND bad "${f}: ${line}")
    endif()
  endforeach()
endforeach()
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "includes outside what ${ROOT} may use (${ALLOWED}):\n  ${text}")
endif()
message(STATUS "${ROOT}: every include is allowed")
