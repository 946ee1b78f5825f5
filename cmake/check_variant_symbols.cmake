# ctest kernel_variants_isolated: every global or weak symbol that a kernel variant's objects
# define must belong to that variant (kernels/cpu/variant.h): its demangled name contains
# "::<variant>::". Anything else is a copy of shared code compiled with the variant's flags,
# which the linker may hand to the rest of the program (an AVX-512 std::vector<float> in a
# baseline caller, say).
#   cmake -DNM=nm -DVARIANT=avx2 "-DOBJECTS=a.o|b.o" -P check_variant_symbols.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(bad "")
set(checked 0)
foreach(obj ${objects})
  execute_process(COMMAND ${NM} --defined-only --demangle ${obj} OUTPUT_VARIABLE out
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${obj}: ${err}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line ${lines})
    # "<address> <type> <name>"; lower-case types are local, upper-case (and u, v, w) global.
    if(NOT line MATCHES "^[0-9a-fA-F]* ([A-Za-z]) (.*)$")
      continue()
    endif()
    set(type ${CMAKE_MATCH_1})
    set(name "${CMAKE_MATCH_2}")
    # DW.ref.__gxx_personality_v0: a pointer to the C++ runtime's exception personality, data
    # that every C++ object with unwinding code shares; not code of the variant. With clang:
    # __clang_call_terminate (two calls, __cxa_begin_catch then std::terminate) and the lock
    # word of OpenMP's critical reductions, the same in every object.
    if(type MATCHES "^[a-tx-z]$" OR name MATCHES "^DW\\.ref\\." OR name STREQUAL
       "__clang_call_terminate" OR name STREQUAL ".gomp_critical_user_.reduction.var")
      continue()
    endif()
    math(EXPR checked "${checked} + 1")
    string(FIND "${name}" "::${VARIANT}::" at)
    if(at EQUAL -1)
      string(APPEND bad "  ${obj}: ${type} ${name}\n")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no global symbols in the ${VARIANT} objects: wrong objects?")
endif()
if(NOT bad STREQUAL "")
  message(FATAL_ERROR "kernel variant ${VARIANT} defines symbols outside its namespace "
                      "(kernels/cpu/variant.h):\n${bad}")
endif()
message(STATUS "${VARIANT}: ${checked} global symbols, all in the variant's namespace")
