# lms_glob_tests(<lib> [extra libs...] [EXCLUDE <regex>]): one test executable
# per *_test.cc in the calling folder, but those whose file name matches
# EXCLUDE (the folder adds them itself). Tests whose file name contains
# "stream", "event", "device", "executor" or "session" are labelled
# "concurrency" (also run under TSan). profile_test and stall_test compare
# measured step times with predictions and run alone (lms_add_test
# RUN_SERIAL).
function(lms_glob_tests)
  cmake_parse_arguments(G "" "EXCLUDE" "" ${ARGN})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  if(G_EXCLUDE)
    list(FILTER tests EXCLUDE REGEX "${G_EXCLUDE}")
  endif()
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    set(labels "")
    if(name MATCHES "stream|event|device|executor|session")
      set(labels concurrency)
    endif()
    set(serial "")
    if(name MATCHES "^(profile|stall)_test$")
      set(serial RUN_SERIAL)
    endif()
    lms_add_test(${name} ${serial} SOURCES ${src} LIBS ${G_UNPARSED_ARGUMENTS} LABELS "${labels}")
    target_compile_definitions(${name} PRIVATE LMS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  endforeach()
endfunction()

# lms_mpi_job_test(<test target>): the test launches programs under mpirun
# (tests/examples/mpi_job.h: a watchdog, the output kept); without MPI it skips, saying why.
function(lms_mpi_job_test target)
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/examples/mpi_job.cc)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/examples)
  if(MPIEXEC_EXECUTABLE)
    target_compile_definitions(${target} PRIVATE LMS_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  endif()
endfunction()

# lms_program_test(<test target> <program>...): the test runs the programs
# (tests/examples/program_cli.h): each one built is a dependency and its
# path the macro <PROGRAM>_BINARY ("lms-bench": LMS_BENCH_BINARY).
function(lms_program_test target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/examples)
  foreach(program ${ARGN})
    if(TARGET ${program})
      string(MAKE_C_IDENTIFIER ${program} macro)
      string(TOUPPER ${macro} macro)
      add_dependencies(${target} ${program})
      target_compile_definitions(${target} PRIVATE ${macro}_BINARY="$<TARGET_FILE:${program}>")
    endif()
  endforeach()
endfunction()

# lms_workspace_scaled_tests(<test target>...): each target's tests run
# twice more, with every CPU kernel reporting 0.5x and 2x its workspace
# (Note [Workspace scale test hook]), as the tests "<target>.workspace_x0.5"
# and "<target>.workspace_x2" (label workspace_scale), one per program. For
# the tests that assert what the planner chose: what they assert must hold
# whatever workspaces the machine's oneDNN kernels need. (cmake -E env sets
# the variables: a list in gtest_discover_tests' ENVIRONMENT property reaches
# CTest split apart.)
function(lms_workspace_scaled_tests)
  foreach(target ${ARGN})
    foreach(scale 0.5 2)
      add_test(NAME ${target}.workspace_x${scale}
               COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
                       LMS_CHECK_INTERNAL=1 LMS_CPU_WORKSPACE_SCALE=${scale}
                       $<TARGET_FILE:${target}>)
      set_tests_properties(${target}.workspace_x${scale} PROPERTIES LABELS workspace_scale)
    endforeach()
  endforeach()
endfunction()
