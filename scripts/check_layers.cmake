# Fails when a file includes a header of a layer its own layer may not use
# (src/layers.cmake, docs/design.md "Layers"): a source under src/<layer> may
# include its own layer's headers and those of the layers it reaches through
# DEPS, found under src/ or, for the public headers, under include/lms (each
# belongs to the layer that lists it in PUBLIC_HEADERS). A public header may
# include only public headers, under the same rule. Also fails when a file
# under src/ belongs to no layer, a public header to none or to two, or the
# table has an unknown layer or a cycle. Includes resolve as the compiler
# finds them: next to the including file, then under src/, then include/.
#   cmake -P scripts/check_layers.cmake              (this checkout)
#   cmake -DROOT=<tree> -P scripts/check_layers.cmake (a tree with src/, include/)
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  get_filename_component(ROOT ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/lms_layers.cmake)
include(${ROOT}/src/layers.cmake)
lms_check_layer_table()
get_property(dirs GLOBAL PROPERTY LMS_LAYER_DIRS)

set(bad)

# The owner of every public header, as LMS_OWNER_<path under include/lms>.
file(GLOB_RECURSE public_headers LIST_DIRECTORIES false RELATIVE ${ROOT}/include/lms
     ${ROOT}/include/lms/*.h)
foreach(dir ${dirs})
  string(REPLACE "/" "_" id "${dir}")
  get_property(owned GLOBAL PROPERTY LMS_LAYER_PUBLIC_HEADERS_${id})
  foreach(entry ${owned})
    set(matched FALSE)
    foreach(header ${public_headers})
      string(FIND "${header}" "${entry}" at)
      if(header STREQUAL entry OR (entry MATCHES "/$" AND at EQUAL 0))
        set(matched TRUE)
        if(DEFINED LMS_OWNER_${header})
          list(APPEND bad "include/lms/${header}: listed by layers ${LMS_OWNER_${header}} and ${dir}")
        endif()
        set(LMS_OWNER_${header} ${dir})
      endif()
    endforeach()
    if(NOT matched)
      list(APPEND bad "src/layers.cmake: ${dir} lists include/lms/${entry}, which does not exist")
    endif()
  endforeach()
endforeach()
foreach(header ${public_headers})
  if(NOT DEFINED LMS_OWNER_${header})
    list(APPEND bad "include/lms/${header}: no layer lists it in PUBLIC_HEADERS (src/layers.cmake)")
  endif()
endforeach()

# check_includes(<file> <layer> <what>): appends to `bad` every include of
# <file> (absolute) that resolves to a header <layer> may not use.
function(check_includes file layer what)
  lms_layer_visible(visible ${layer})
  get_filename_component(here ${file} DIRECTORY)
  file(RELATIVE_PATH rel_file ${ROOT} ${file})
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  foreach(line ${lines})
    if(NOT line MATCHES "#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]")
      continue()
    endif()
    set(path "${CMAKE_MATCH_1}")
    set(found "")
    foreach(base ${here} ${ROOT}/src ${ROOT}/include)
      if(NOT found AND EXISTS ${base}/${path})
        get_filename_component(found ${base}/${path} ABSOLUTE)
      endif()
    endforeach()
    if(NOT found)
      continue()  # a third-party or system header
    endif()
    file(RELATIVE_PATH target ${ROOT} ${found})
    if(target MATCHES "^src/(.*)$")
      if(what STREQUAL "public")
        list(APPEND bad "${rel_file}: includes ${target}, but a public header may include "
                        "only include/lms")
        continue()
      endif()
      lms_layer_of(owner ${CMAKE_MATCH_1})
    elseif(target MATCHES "^include/lms/(.*)$")
      set(owner "${LMS_OWNER_${CMAKE_MATCH_1}}")
    else()
      continue()
    endif()
    if(owner AND NOT owner IN_LIST visible)
      list(APPEND bad "${rel_file}: includes ${target} of layer ${owner}, which ${layer} "
                      "does not declare (src/layers.cmake)")
    endif()
  endforeach()
  set(bad ${bad} PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE sources LIST_DIRECTORIES false ${ROOT}/src/*.h ${ROOT}/src/*.cc
     ${ROOT}/src/*.cu ${ROOT}/src/*.cuh)
foreach(file ${sources})
  file(RELATIVE_PATH rel ${ROOT}/src ${file})
  lms_layer_of(layer ${rel})
  if(NOT layer)
    list(APPEND bad "src/${rel}: in no layer's folder (src/layers.cmake)")
    continue()
  endif()
  check_includes(${file} ${layer} source)
endforeach()
foreach(header ${public_headers})
  if(DEFINED LMS_OWNER_${header})
    check_includes(${ROOT}/include/lms/${header} ${LMS_OWNER_${header}} public)
  endif()
endforeach()

if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "layer violations (docs/design.md, \"Layers\"):\n  ${text}")
endif()
list(LENGTH sources n_sources)
list(LENGTH public_headers n_public)
message(STATUS "layers: the includes of ${n_sources} files under src/ and ${n_public} public "
               "headers follow src/layers.cmake")
