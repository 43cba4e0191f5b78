# Fails when a source file of a program built on liblms (examples/,
# bench/lms_bench) includes something a user's program could not: every
# include must be a public header ("lms/..."), a header of the program itself
# or of a project library it links (a plain file name found in one of LOCAL),
# a third-party library (THIRD_PARTY), or a system header (<name> or <sys/...>).
# A path under src/ ("io/image.h", "backend/cpu/cpu_device.h") or a relative
# path out of the folder fails.
#   cmake -DFILES_UNDER="<dir>;..." -DLOCAL="<dir>;..." -DTHIRD_PARTY="<regex>"
#         -P check_program_includes.cmake
set(files)
foreach(dir ${FILES_UNDER})
  file(GLOB_RECURSE found LIST_DIRECTORIES false ${dir}/*.h ${dir}/*.cc)
  list(APPEND files ${found})
endforeach()
if(NOT files)
  message(FATAL_ERROR "no source file under ${FILES_UNDER}")
endif()
set(bad)
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*([\"<])([^\">]+)[\">]")
      list(APPEND bad "${f}: ${line} (not a plain include)")
      continue()
    endif()
    set(quote "${CMAKE_MATCH_1}")
    set(path "${CMAKE_MATCH_2}")
    if(path MATCHES "\\.\\.")
      list(APPEND bad "${f}: ${line} (relative path)")
      continue()
    endif()
    if(path MATCHES "^lms/" OR path MATCHES "${THIRD_PARTY}")
      continue()
    endif()
    if(quote STREQUAL "<")
      if(NOT path MATCHES "/" OR path MATCHES "^sys/")
        continue()  # the standard library and POSIX
      endif()
    elseif(NOT path MATCHES "/")
      set(local FALSE)
      foreach(dir ${LOCAL})
        if(EXISTS ${dir}/${path})
          set(local TRUE)
        endif()
      endforeach()
      if(local)
        continue()
      endif()
    endif()
    list(APPEND bad "${f}: ${line}")
  endforeach()
endforeach()
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "includes a program on liblms may not use (allowed: \"lms/...\", a "
                      "header of the program or of ${LOCAL}, ${THIRD_PARTY}, system headers):"
                      "\n  ${text}")
endif()
list(LENGTH files n)
message(STATUS "${FILES_UNDER}: every include of ${n} files is allowed")
