# pjrt_c_api.h, fetched at configure time from the Go module github.com/gomlx/gopjrt (pinned by
# version and by the sha256 of the module's zip as the Go module proxy serves it; the same zip
# Go's checksum database vouches for with the go.sum hash the Makefile pins). Taken from Go's
# module cache when `go` has it, else downloaded from $JAXPORT_GOPROXY. Extracted into the
# build tree, never into the source tree.
#
# -DJAXPORT_PJRT_INCLUDE_DIR=DIR uses DIR/pjrt_c_api.h instead (an offline machine, or a newer
# header of the same major version).
#
# Sets JAXPORT_PJRT_HEADER_DIR.
set(JAXPORT_GOPJRT_VERSION "v0.10.0")
set(JAXPORT_GOPJRT_ZIP_SHA256 "427cd403af80884f4f723cd2038753ec8bc841551e7578d700d80d69afbcc12e")
set(JAXPORT_PJRT_INCLUDE_DIR "" CACHE PATH "Directory holding pjrt_c_api.h (default: fetched from the gopjrt Go module)")
set(JAXPORT_GOPROXY "https://proxy.golang.org" CACHE STRING "Go module proxy the gopjrt module zip is downloaded from")

if(JAXPORT_PJRT_INCLUDE_DIR)
  if(NOT EXISTS "${JAXPORT_PJRT_INCLUDE_DIR}/pjrt_c_api.h")
    message(FATAL_ERROR "JAXPORT_PJRT_INCLUDE_DIR=${JAXPORT_PJRT_INCLUDE_DIR} holds no pjrt_c_api.h")
  endif()
  set(JAXPORT_PJRT_HEADER_DIR "${JAXPORT_PJRT_INCLUDE_DIR}")
  return()
endif()

set(_jaxport_pjrt_dir "${CMAKE_CURRENT_BINARY_DIR}/_deps/gopjrt-${JAXPORT_GOPJRT_VERSION}")
set(_jaxport_pjrt_stamp "${_jaxport_pjrt_dir}/.sha256-${JAXPORT_GOPJRT_ZIP_SHA256}")
if(NOT EXISTS "${_jaxport_pjrt_stamp}")
  set(_zip "")
  find_program(JAXPORT_GO go)
  if(JAXPORT_GO)
    execute_process(COMMAND "${JAXPORT_GO}" env GOMODCACHE OUTPUT_VARIABLE _modcache
                    OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    set(_cached "${_modcache}/cache/download/github.com/gomlx/gopjrt/@v/${JAXPORT_GOPJRT_VERSION}.zip")
    if(_rc EQUAL 0 AND EXISTS "${_cached}")
      set(_zip "${_cached}")
    endif()
  endif()
  if(NOT _zip)
    set(_zip "${_jaxport_pjrt_dir}.zip")
    set(_url "${JAXPORT_GOPROXY}/github.com/gomlx/gopjrt/@v/${JAXPORT_GOPJRT_VERSION}.zip")
    message(STATUS "jaxport: downloading pjrt_c_api.h (gopjrt ${JAXPORT_GOPJRT_VERSION}) from ${_url}")
    file(DOWNLOAD "${_url}" "${_zip}" STATUS _status TLS_VERIFY ON)
    list(GET _status 0 _code)
    if(NOT _code EQUAL 0)
      list(GET _status 1 _why)
      message(FATAL_ERROR "jaxport: cannot download ${_url}: ${_why} (or pass -DJAXPORT_PJRT_INCLUDE_DIR=DIR)")
    endif()
  endif()
  file(SHA256 "${_zip}" _sum)
  if(NOT _sum STREQUAL JAXPORT_GOPJRT_ZIP_SHA256)
    message(FATAL_ERROR "jaxport: ${_zip} has sha256 ${_sum}, pinned ${JAXPORT_GOPJRT_ZIP_SHA256}; refused")
  endif()
  set(_member "github.com/gomlx/gopjrt@${JAXPORT_GOPJRT_VERSION}/pjrt/pjrt_c_api.h")
  file(REMOVE_RECURSE "${_jaxport_pjrt_dir}.tmp")
  file(ARCHIVE_EXTRACT INPUT "${_zip}" DESTINATION "${_jaxport_pjrt_dir}.tmp" PATTERNS "${_member}")
  if(NOT EXISTS "${_jaxport_pjrt_dir}.tmp/${_member}")
    message(FATAL_ERROR "jaxport: ${_zip} holds no ${_member}")
  endif()
  file(MAKE_DIRECTORY "${_jaxport_pjrt_dir}")
  file(RENAME "${_jaxport_pjrt_dir}.tmp/${_member}" "${_jaxport_pjrt_dir}/pjrt_c_api.h")
  file(REMOVE_RECURSE "${_jaxport_pjrt_dir}.tmp")
  file(GLOB _old "${_jaxport_pjrt_dir}/.sha256-*")
  if(_old)
    file(REMOVE ${_old})
  endif()
  file(TOUCH "${_jaxport_pjrt_stamp}")
endif()
set(JAXPORT_PJRT_HEADER_DIR "${_jaxport_pjrt_dir}")
