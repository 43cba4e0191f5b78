# The layer table's functions. src/layers.cmake declares the layers with
# lms_declare_layer; the build (lms_layer in CMakeLists.txt) and the check
# (scripts/check_layers.cmake) both run that one file through these
# functions, so what the compiler lets a layer include and what the check
# accepts cannot differ.

# lms_declare_layer(<dir> [DEPS <dir>...] [PUBLIC_HEADERS <path>...]): the
# layer of src/<dir>, built as target lms_<dir with '/' as '_'>. DEPS are the
# layers it uses directly; it may include their headers and, transitively,
# those of their DEPS. PUBLIC_HEADERS are the headers of include/lms it
# implements, relative to include/lms ("device.h"; "io/" for a folder).
function(lms_declare_layer dir)
  cmake_parse_arguments(PARSE_ARGV 1 L "" "" "DEPS;PUBLIC_HEADERS")
  if(L_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "lms_declare_layer(${dir}): unexpected ${L_UNPARSED_ARGUMENTS}")
  endif()
  string(REPLACE "/" "_" id "${dir}")
  set_property(GLOBAL APPEND PROPERTY LMS_LAYER_DIRS ${dir})
  set_property(GLOBAL PROPERTY LMS_LAYER_DIR_${id} ${dir})
  set_property(GLOBAL PROPERTY LMS_LAYER_DEPS_${id} ${L_DEPS})
  set_property(GLOBAL PROPERTY LMS_LAYER_PUBLIC_HEADERS_${id} ${L_PUBLIC_HEADERS})
endfunction()

# lms_layer_visible(<out> <dir>): <dir> and every layer it reaches through
# DEPS, the layers whose headers it may include.
function(lms_layer_visible out dir)
  set(seen ${dir})
  set(queue ${dir})
  while(queue)
    list(POP_FRONT queue d)
    string(REPLACE "/" "_" id "${d}")
    get_property(deps GLOBAL PROPERTY LMS_LAYER_DEPS_${id})
    foreach(dep ${deps})
      if(NOT dep IN_LIST seen)
        list(APPEND seen ${dep})
        list(APPEND queue ${dep})
      endif()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# lms_layer_of(<out> <path relative to src/>): the declared layer whose
# folder holds the path most closely (backend/cpu/stream.h is backend/cpu's,
# backend/kernel.h backend's), or "" when none does.
function(lms_layer_of out path)
  get_property(dirs GLOBAL PROPERTY LMS_LAYER_DIRS)
  set(best "")
  foreach(dir ${dirs})
    string(LENGTH "${dir}/" n)
    string(SUBSTRING "${path}" 0 ${n} prefix)
    string(LENGTH "${best}" best_n)
    if(prefix STREQUAL "${dir}/" AND n GREATER best_n)
      set(best ${dir})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

# lms_check_layer_table(): every DEPS entry is a declared layer and the DEPS
# have no cycle; a fatal error names the offending layers.
function(lms_check_layer_table)
  get_property(dirs GLOBAL PROPERTY LMS_LAYER_DIRS)
  foreach(dir ${dirs})
    string(REPLACE "/" "_" id "${dir}")
    get_property(deps GLOBAL PROPERTY LMS_LAYER_DEPS_${id})
    foreach(dep ${deps})
      if(NOT dep IN_LIST dirs)
        message(FATAL_ERROR "src/layers.cmake: layer ${dir} declares ${dep}, which is no layer")
      endif()
      lms_layer_visible(reach ${dep})
      if(dir IN_LIST reach)
        message(FATAL_ERROR "src/layers.cmake: layers ${dir} and ${dep} depend on each other")
      endif()
    endforeach()
  endforeach()
endfunction()

# lms_layer_include_root(<root> <dir>): makes <root> a folder of symbolic
# links to src/ that holds exactly the layers <dir> may include, at the paths
# the sources name them by ("graph/graph.h"). A layer with layers declared
# inside its folder (backend, with backend/cpu and backend/cuda) is linked
# entry by entry, leaving those out; the others as one link to the folder.
function(lms_layer_include_root root dir)
  file(REMOVE_RECURSE ${root})  # removes the links, not what they point to
  get_property(dirs GLOBAL PROPERTY LMS_LAYER_DIRS)
  lms_layer_visible(visible ${dir})
  foreach(layer ${visible})
    set(inner)
    foreach(other ${dirs})
      string(FIND "${other}" "${layer}/" at)
      if(at EQUAL 0)
        list(APPEND inner ${other})
      endif()
    endforeach()
    get_filename_component(parent ${root}/${layer} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    if(NOT inner)
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${root}/${layer} SYMBOLIC)
      continue()
    endif()
    file(MAKE_DIRECTORY ${root}/${layer})
    # A header added to the folder re-runs CMake, which links it too.
    file(GLOB entries CONFIGURE_DEPENDS LIST_DIRECTORIES true
         RELATIVE ${PROJECT_SOURCE_DIR}/src/${layer} ${PROJECT_SOURCE_DIR}/src/${layer}/*)
    foreach(entry ${entries})
      if(NOT "${layer}/${entry}" IN_LIST dirs)
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer}/${entry} ${root}/${layer}/${entry}
             SYMBOLIC)
      endif()
    endforeach()
  endforeach()
endfunction()
