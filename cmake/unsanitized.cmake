# Contract: cumemtrace_unsanitized(TARGET...) declares targets that are never sanitized: the
# preload libraries, the fake driver and NVML, the fake PyTorch, the traced test programs (a
# sanitizer runtime cannot be preloaded into someone else's program, and the programs' frames are
# what the tests expect). In the plain tree it does nothing. In a sanitizer tree configured with
# CUMEMTRACE_UNSANITIZED_FROM=PLAIN_TREE (scripts/sanitize.sh), those targets are not compiled a
# second time: they leave `all`, and `all` copies each one's files from the plain tree, at the
# same path relative to the tree (CT_BUILD's layout: bin/, lib/, fake/, fake_nvml/, fake_torch/).
# A file the plain tree lacks fails the build with one line (build the plain tree first).
set(CUMEMTRACE_UNSANITIZED_FROM "" CACHE PATH
  "sanitizer trees: the plain build tree whose unsanitized targets are copied, not rebuilt")

function(cumemtrace_unsanitized)
  if(CUMEMTRACE_SANITIZE STREQUAL "" OR CUMEMTRACE_UNSANITIZED_FROM STREQUAL "")
    return()
  endif()
  foreach(target ${ARGN})
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
    # The file itself, then (shared libraries with a SOVERSION) the link name beside it.
    set(copy ${CMAKE_COMMAND} -DFROM=${CUMEMTRACE_UNSANITIZED_FROM} -DTO=${CMAKE_BINARY_DIR})
    set(script -P ${PROJECT_SOURCE_DIR}/cmake/copy_unsanitized.cmake)
    set(link_name)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "SHARED_LIBRARY")
      set(link_name COMMAND ${copy} -DFILE=$<TARGET_LINKER_FILE:${target}> ${script})
    endif()
    add_custom_target(${target}_from_plain_tree ALL
      COMMAND ${copy} -DFILE=$<TARGET_FILE:${target}> ${script}
      ${link_name}
      VERBATIM)
  endforeach()
endfunction()
