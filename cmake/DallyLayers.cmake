# The layers of docs/architecture.md, enforced by the build.
#
#   dally_layer(<target> FOLDER <folder> ALLOWS <folders...>
#               [FORBIDS_SYSTEM <roots...>] [CHECK_HEADERS])
#
# <target>, the library of <folder>, may include the headers of <folder>
# and of the project folders it ALLOWS, nothing of the other project folders,
# and nothing under the system include roots it FORBIDS (caf, rocksdb). The
# rule holds by construction: the target's include path starts with a
# directory of stand-ins for every forbidden header, each an #error, so a
# forbidden include, direct or through another header, fails to compile.
# CHECK_HEADERS compiles each of the folder's headers on its own as well, so
# that a header no source of the folder includes is held to the rule too.
#
#   dally_forbid_links(<target> <libraries...>)
#
# Fails the configuration if <target> links any of <libraries>, directly or
# through the libraries it links.

set(DALLY_FOLDERS core proto storage logic net runtime actors cluster sim
                  apps bench tests examples)

function(_dally_poison_file dir rel why)
  set(path "${dir}/${rel}")
  if(NOT EXISTS "${path}")
    file(WRITE "${path}" "#error \"${why} (docs/architecture.md)\"\n")
  endif()
endfunction()

function(dally_layer target)
  cmake_parse_arguments(arg "CHECK_HEADERS" "FOLDER" "ALLOWS;FORBIDS_SYSTEM"
                        ${ARGN})
  set(poison "${CMAKE_BINARY_DIR}/layers/${target}")
  file(REMOVE_RECURSE "${poison}")
  foreach(folder IN LISTS DALLY_FOLDERS)
    if(folder STREQUAL arg_FOLDER OR folder IN_LIST arg_ALLOWS)
      continue()
    endif()
    file(GLOB_RECURSE headers CONFIGURE_DEPENDS
         RELATIVE "${PROJECT_SOURCE_DIR}"
         "${PROJECT_SOURCE_DIR}/${folder}/*.hpp")
    foreach(h IN LISTS headers)
      _dally_poison_file("${poison}" "${h}"
                         "${arg_FOLDER}/ must not include ${h}")
    endforeach()
  endforeach()
  if(NOT "proto" IN_LIST arg_ALLOWS)
    foreach(h dally.pb.h dally_api.pb.h dally_cluster.pb.h)
      _dally_poison_file("${poison}" "proto/${h}"
                         "${arg_FOLDER}/ must not include proto/${h}")
    endforeach()
  endif()
  foreach(root IN LISTS arg_FORBIDS_SYSTEM)
    find_path(_dally_root_dir "${root}" NO_CACHE)
    file(GLOB_RECURSE headers RELATIVE "${_dally_root_dir}"
         "${_dally_root_dir}/${root}/*")
    foreach(h IN LISTS headers)
      _dally_poison_file("${poison}" "${h}"
                         "${arg_FOLDER}/ must not include <${h}>")
    endforeach()
    unset(_dally_root_dir)
  endforeach()
  target_include_directories(${target} BEFORE PRIVATE "${poison}")
  if(arg_CHECK_HEADERS)
    file(GLOB headers CONFIGURE_DEPENDS RELATIVE "${PROJECT_SOURCE_DIR}"
         "${PROJECT_SOURCE_DIR}/${arg_FOLDER}/*.hpp")
    set(checks "${CMAKE_BINARY_DIR}/layers/${target}-headers")
    foreach(h IN LISTS headers)
      string(MAKE_C_IDENTIFIER "${h}" name)
      set(src "${checks}/${name}.cpp")
      set(text "#include \"${h}\"\n")
      if(EXISTS "${src}")
        file(READ "${src}" old)
      endif()
      if(NOT old STREQUAL text)
        file(WRITE "${src}" "${text}")
      endif()
      target_sources(${target} PRIVATE "${src}")
    endforeach()
  endif()
endfunction()

function(_dally_link_closure target out)
  set(seen "")
  set(todo "${target}")
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen OR NOT TARGET "${t}")
      continue()
    endif()
    list(APPEND seen "${t}")
    get_target_property(aliased "${t}" ALIASED_TARGET)
    if(aliased)
      list(APPEND todo "${aliased}")
    endif()
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(libs "${t}" ${prop})
      if(libs)
        list(APPEND todo ${libs})
      endif()
    endforeach()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

function(dally_forbid_links target)
  _dally_link_closure(${target} closure)
  foreach(lib IN LISTS ARGN)
    if(lib IN_LIST closure)
      message(FATAL_ERROR "${target} must not link ${lib} "
                          "(docs/architecture.md)")
    endif()
  endforeach()
endfunction()
