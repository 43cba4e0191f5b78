# Installs the lms build in BUILD_DIR to a fresh prefix under WORK_DIR, then
# configures, builds and runs the consumer project against it.
#   cmake -DBUILD_DIR=<lms build> -DSOURCE_DIR=<tests/consumer> -DWORK_DIR=<scratch> -P run.cmake
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: `${ARGN}` failed (${rc})")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# The installed tree holds the public headers only.
file(GLOB_RECURSE private LIST_DIRECTORIES false ${WORK_DIR}/prefix/include/*.cc)
if(private)
  message(FATAL_ERROR "consumer test: sources installed: ${private}")
endif()
step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
     -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
# The example config the README's sample loads is installed with the library.
set(config ${WORK_DIR}/prefix/share/lms/lms.toml)
if(NOT EXISTS ${config})
  message(FATAL_ERROR "consumer test: the example config was not installed at ${config}")
endif()
step(${WORK_DIR}/build/consumer ${config})
