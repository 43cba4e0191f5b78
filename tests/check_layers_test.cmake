# Tests scripts/check_layers.cmake and the include roots the build made from
# src/layers.cmake. The check must pass on the tree, and on copies of its
# src/ and include/ with one violation injected it must fail naming the
# violation; the include root of every built layer must hold exactly the
# layers the table lets it include.
#   cmake -DROOT=<repo> -DWORK_DIR=<scratch dir> -DLAYER_INCLUDE=<build>/layer_include
#         -P check_layers_test.cmake
cmake_minimum_required(VERSION 3.25)
set(check ${ROOT}/scripts/check_layers.cmake)
set(failures)

# run_check(<tree> <expect_pass> <expected message regex> <what>)
function(run_check tree expect_pass expected what)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${tree} -P ${check}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \t\r\n]+" " " text "${out}${err}")  # messages wrap
  if(expect_pass AND NOT rc EQUAL 0)
    list(APPEND failures "${what}: the check failed:\n${out}${err}")
  elseif(NOT expect_pass AND rc EQUAL 0)
    list(APPEND failures "${what}: the check passed")
  elseif(NOT text MATCHES "${expected}")
    list(APPEND failures "${what}: the output does not match '${expected}':\n${out}${err}")
  endif()
  set(failures ${failures} PARENT_SCOPE)
endfunction()

# fresh_copy(<dir>): <dir> holds a copy of the tree's src/ and include/.
function(fresh_copy dir)
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  file(COPY ${ROOT}/src ${ROOT}/include DESTINATION ${dir})
endfunction()

function(append file text)
  file(APPEND ${file} "\n${text}\n")
endfunction()

run_check(${ROOT} TRUE "follow src/layers.cmake" "the tree")

set(tree ${WORK_DIR}/tree)
fresh_copy(${tree})
run_check(${tree} TRUE "follow src/layers.cmake" "an unchanged copy")

append(${tree}/src/graph/graph.cc "#include \"swap/liveness.h\"")
run_check(${tree} FALSE
          "src/graph/graph.cc: includes src/swap/liveness.h of layer swap, which graph does not declare"
          "graph including a swap header")

fresh_copy(${tree})
append(${tree}/src/backend/cuda/cuda_memory.cc "#include \"../cpu/stream.h\"")
run_check(${tree} FALSE
          "cuda_memory.cc: includes src/backend/cpu/stream.h of layer backend/cpu, which backend/cuda"
          "the CUDA backend including a CPU backend header by a relative path")

fresh_copy(${tree})
append(${tree}/src/allocator/bfc_allocator.cc "#include \"lms/session.h\"")
run_check(${tree} FALSE
          "bfc_allocator.cc: includes include/lms/session.h of layer runtime, which allocator does not"
          "the allocator including the runtime's public header")

fresh_copy(${tree})
append(${tree}/include/lms/graph.h "#include \"graph/op_registry.h\"")
run_check(${tree} FALSE "include/lms/graph.h: includes src/graph/op_registry.h, but a public header"
          "a public header including a src/ header")

fresh_copy(${tree})
append(${tree}/include/lms/distributed.h "#include \"lms/session.h\"")
run_check(${tree} FALSE "distributed.h: includes include/lms/session.h of layer runtime"
          "a public header including one of a higher layer")

fresh_copy(${tree})
file(WRITE ${tree}/include/lms/unlisted.h "#pragma once\n")
run_check(${tree} FALSE "include/lms/unlisted.h: no layer lists it"
          "a public header no layer lists")

fresh_copy(${tree})
file(WRITE ${tree}/src/plugins/loader.cc "#include \"graph/graph.h\"\n")
run_check(${tree} FALSE "src/plugins/loader.cc: in no layer's folder" "a folder that is no layer")

fresh_copy(${tree})
append(${tree}/src/layers.cmake "lms_declare_layer(common DEPS graph)")
run_check(${tree} FALSE "depend on each other" "a cycle in the table")
file(REMOVE_RECURSE ${WORK_DIR})

# The include roots of the layers this build compiled: a layer's root holds
# a layer's folder exactly when the table lets it include that layer.
include(${ROOT}/cmake/lms_layers.cmake)
include(${ROOT}/src/layers.cmake)
get_property(dirs GLOBAL PROPERTY LMS_LAYER_DIRS)
set(n_roots 0)
foreach(dir ${dirs})
  string(REPLACE "/" "_" id "${dir}")
  set(root ${LAYER_INCLUDE}/lms_${id})
  if(NOT IS_DIRECTORY ${root})
    continue()  # not built here (a header-only layer, the CUDA backend without nvcc)
  endif()
  math(EXPR n_roots "${n_roots} + 1")
  lms_layer_visible(visible ${dir})
  foreach(other ${dirs})
    if(other IN_LIST visible AND NOT IS_DIRECTORY ${root}/${other})
      list(APPEND failures "lms_${id}'s include root lacks ${other}, which ${dir} may include")
    elseif(NOT other IN_LIST visible AND EXISTS ${root}/${other})
      list(APPEND failures "lms_${id}'s include root holds ${other}, which ${dir} may not include")
    endif()
  endforeach()
endforeach()
if(n_roots LESS 5)
  list(APPEND failures "only ${n_roots} layer include roots under ${LAYER_INCLUDE}")
endif()

if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "${text}")
endif()
message(STATUS "check_layers: passes on the tree, fails on 8 injected violations; "
               "${n_roots} include roots match src/layers.cmake")
