# Contract: the one way a test is declared, so that every test has a label and a timeout.
#   cumemtrace_test(NAME n LABELS l... COMMAND cmd... [TIMEOUT s] [ENVIRONMENT k=v...]
#                   [WORKING_DIRECTORY d] [SKIP_RETURN_CODE c] [RUN_SERIAL]
#                   [FIXTURES_SETUP f] [FIXTURES_REQUIRED f])
#     registers a CTest test; LABELS is required (CTest selects with -L/-LE: scripts/test.sh
#     leaves out `gpu` where there is no GPU), TIMEOUT defaults to 300 s.
#   cumemtrace_catch_test(NAME n EXECUTABLE exe LABELS l... SOURCES src... [LIBRARIES lib...]
#                         [INCLUDES dir...] [DEFINITIONS def...] [TIMEOUT s] [ARGS arg...])
#     builds a Catch2 executable (the shared main, tests/ on the include path) and registers it.
#   cumemtrace_skipped_test(NAME n LABELS l... REASON text)
#     a test this configuration cannot build (no clang++ for the fuzzers, no CPython headers):
#     registered all the same, it prints the reason and is reported Skipped, so it never
#     vanishes from CTest's list with nothing but a configure-time status line.
# Test folders mirror the source folders (tests/preload, live, snapshot, analysis, viz, cli) plus
# the end-to-end suites; C++ test files are named WHAT_test.cpp, Python ones test_WHAT.py or
# WHAT_test.py when run as a script.

function(cumemtrace_test)
  cmake_parse_arguments(T "RUN_SERIAL"
    "NAME;TIMEOUT;WORKING_DIRECTORY;SKIP_RETURN_CODE;FIXTURES_SETUP;FIXTURES_REQUIRED"
    "COMMAND;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT T_NAME OR NOT T_COMMAND OR NOT T_LABELS)
    message(FATAL_ERROR "cumemtrace_test(${T_NAME}): NAME, COMMAND and LABELS are required")
  endif()
  if(T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "cumemtrace_test(${T_NAME}): unexpected ${T_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_WORKING_DIRECTORY)
    set(T_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND} WORKING_DIRECTORY ${T_WORKING_DIRECTORY})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if(T_ENVIRONMENT)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
  if(DEFINED T_SKIP_RETURN_CODE)
    set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE ${T_SKIP_RETURN_CODE})
  endif()
  if(T_RUN_SERIAL)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL ON)
  endif()
  if(T_FIXTURES_SETUP)
    set_tests_properties(${T_NAME} PROPERTIES FIXTURES_SETUP ${T_FIXTURES_SETUP})
  endif()
  if(T_FIXTURES_REQUIRED)
    set_tests_properties(${T_NAME} PROPERTIES FIXTURES_REQUIRED ${T_FIXTURES_REQUIRED})
  endif()
endfunction()

function(cumemtrace_skipped_test)
  cmake_parse_arguments(T "" "NAME;REASON" "LABELS" ${ARGN})
  if(NOT T_REASON)
    message(FATAL_ERROR "cumemtrace_skipped_test(${T_NAME}): REASON is required")
  endif()
  message(STATUS "cumemtrace: test ${T_NAME} will be skipped: ${T_REASON}")
  cumemtrace_test(NAME ${T_NAME} LABELS ${T_LABELS} SKIP_RETURN_CODE 77
    COMMAND ${CMAKE_COMMAND} -E env "CUMEMTRACE_SKIP_REASON=${T_REASON}"
            sh -c "echo \"skipped: $CUMEMTRACE_SKIP_REASON\" && exit 77")
endfunction()

function(cumemtrace_catch_test)
  cmake_parse_arguments(T "" "NAME;EXECUTABLE;TIMEOUT"
    "SOURCES;LIBRARIES;INCLUDES;DEFINITIONS;LABELS;ARGS;ENVIRONMENT" ${ARGN})
  if(NOT T_EXECUTABLE OR NOT T_SOURCES)
    message(FATAL_ERROR "cumemtrace_catch_test(${T_NAME}): EXECUTABLE and SOURCES are required")
  endif()
  add_executable(${T_EXECUTABLE} ${T_SOURCES})
  target_include_directories(${T_EXECUTABLE} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${T_INCLUDES})
  target_link_libraries(${T_EXECUTABLE} PRIVATE cumemtrace_catch_main ${T_LIBRARIES})
  if(T_DEFINITIONS)
    target_compile_definitions(${T_EXECUTABLE} PRIVATE ${T_DEFINITIONS})
  endif()
  set(timeout_arg)
  if(T_TIMEOUT)
    set(timeout_arg TIMEOUT ${T_TIMEOUT})
  endif()
  set(env_arg)
  if(T_ENVIRONMENT)
    set(env_arg ENVIRONMENT ${T_ENVIRONMENT})
  endif()
  cumemtrace_test(NAME ${T_NAME} COMMAND ${T_EXECUTABLE} ${T_ARGS} LABELS ${T_LABELS}
                  ${timeout_arg} ${env_arg})
endfunction()
