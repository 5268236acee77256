# cmake -DFROM=PLAIN_TREE -DTO=THIS_TREE -DFILE=THIS_TREE/REL -P copy_unsanitized.cmake: copies
# PLAIN_TREE/REL to THIS_TREE/REL (a symbolic link stays a link) when it differs
# (cmake/unsanitized.cmake).
file(RELATIVE_PATH rel "${TO}" "${FILE}")
set(src "${FROM}/${rel}")
if(NOT EXISTS "${src}")
  message(FATAL_ERROR "cumemtrace: ${src} is missing: build the plain tree ${FROM} first "
                      "(the sanitizer tree copies its unsanitized targets from it)")
endif()
get_filename_component(dir "${FILE}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
if(IS_SYMLINK "${src}")
  file(READ_SYMLINK "${src}" link)
  file(CREATE_LINK "${link}" "${FILE}" SYMBOLIC)
else()
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${src}" "${FILE}"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cumemtrace: cannot copy ${src} to ${FILE}")
  endif()
endif()
