# nvcc driven directly rather than through CMake's CUDA language, because the toolkit may be
# NVIDIA's PyPI wheels (lib/ instead of lib64/), which CMake 3.25 does not detect.
#   strata_nvcc_setup()                       -> NVCC, NVCC_FLAGS, NVCC_RELEASE, CUDART_STATIC
#   strata_nvcc_object(OUT src [INCLUDES dirs...] [DEPENDS files...])
#                                             -> OUT = the object's path, built by nvcc
include_guard(GLOBAL)

set(STRATA_CUDA_HOME "" CACHE PATH "CUDA toolkit root; empty for a CPU-only build")
set(STRATA_CUDA_ARCHS "80;89;90" CACHE STRING "SM architectures for the CUDA part")

macro(strata_nvcc_setup)
  set(NVCC ${STRATA_CUDA_HOME}/bin/nvcc)
  if(NOT EXISTS ${NVCC})
    message(FATAL_ERROR "STRATA_CUDA_HOME=${STRATA_CUDA_HOME} has no bin/nvcc")
  endif()
  find_library(CUDART_STATIC cudart_static REQUIRED NO_DEFAULT_PATH
    PATHS ${STRATA_CUDA_HOME}/lib ${STRATA_CUDA_HOME}/lib64 ${STRATA_CUDA_HOME}/targets/x86_64-linux/lib)
  set(NVCC_FLAGS -std=c++20 -O3 -Xcompiler=-fPIC -I${STRATA_CUDA_HOME}/include)
  if(EXISTS ${STRATA_CUDA_HOME}/include/cccl)
    list(APPEND NVCC_FLAGS -I${STRATA_CUDA_HOME}/include/cccl)
  endif()
  foreach(arch ${STRATA_CUDA_ARCHS})
    list(APPEND NVCC_FLAGS -gencode=arch=compute_${arch},code=sm_${arch})
  endforeach()
  execute_process(COMMAND ${NVCC} --version OUTPUT_VARIABLE NVCC_VERSION_TEXT)
  string(REGEX MATCH "release [0-9]+\\.[0-9]+" NVCC_RELEASE "${NVCC_VERSION_TEXT}")
endmacro()

function(strata_nvcc_object out src)
  cmake_parse_arguments(ARG "" "" "INCLUDES;DEPENDS;FLAGS" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  get_filename_component(abs ${src} ABSOLUTE)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.o)
  set(includes)
  foreach(dir ${ARG_INCLUDES})
    list(APPEND includes -I${dir})
  endforeach()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${NVCC} ${NVCC_FLAGS} ${ARG_FLAGS} ${includes} -c ${abs} -o ${obj}
    DEPENDS ${abs} ${ARG_DEPENDS}
    COMMENT "nvcc ${name}.cu (sm ${STRATA_CUDA_ARCHS})"
    VERBATIM)
  set(${out} ${obj} PARENT_SCOPE)
endfunction()
