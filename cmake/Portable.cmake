# The portable release build (scripts/package): cross-compiled with Zig's
# clang for an old glibc (cmake/zig-toolchain.cmake), so the host's headers and
# libraries must stay out of it. TRAINLET_DEPS_PREFIX holds c-ares and libcrypto
# built for the target (lib/*.a, include/), and include/ also links the
# header-only libraries from Debian's packages (Boost, spdlog, fmt, CLI11,
# nlohmann-json): those are the same targets the native build gets from
# find_package, defined here without it (their package files would add
# /usr/include, whose glibc headers are the build machine's).
if(NOT TRAINLET_DEPS_PREFIX)
  message(FATAL_ERROR "TRAINLET_PORTABLE needs -DTRAINLET_DEPS_PREFIX=<deps folder> (scripts/package)")
endif()
set(dep_inc ${TRAINLET_DEPS_PREFIX}/include)
find_package(Threads REQUIRED)
foreach(t Boost::headers CLI11::CLI11 nlohmann_json::nlohmann_json fmt::fmt-header-only)
  add_library(${t} INTERFACE IMPORTED)
  set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${dep_inc})
endforeach()
set_target_properties(fmt::fmt-header-only PROPERTIES INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
# Boost 1.74's Asio names std::result_of (and its hash std::unary_function), which
# libc++ leaves out of C++20 unless asked; libstdc++ still has them.
set_target_properties(Boost::headers PROPERTIES INTERFACE_COMPILE_DEFINITIONS
  "_LIBCPP_ENABLE_CXX20_REMOVED_TYPE_TRAITS;_LIBCPP_ENABLE_CXX17_REMOVED_UNARY_BINARY_FUNCTION")

add_library(trainlet_cares INTERFACE)
add_library(trainlet::cares ALIAS trainlet_cares)
target_link_libraries(trainlet_cares INTERFACE ${TRAINLET_DEPS_PREFIX}/lib/libcares.a)
target_include_directories(trainlet_cares SYSTEM INTERFACE ${dep_inc})
target_compile_definitions(trainlet_cares INTERFACE CARES_STATICLIB)
add_library(trainlet_crypto INTERFACE)
add_library(trainlet::crypto ALIAS trainlet_crypto)
target_link_libraries(trainlet_crypto INTERFACE ${TRAINLET_DEPS_PREFIX}/lib/libcrypto.a
                      ${CMAKE_DL_LIBS} Threads::Threads)
target_include_directories(trainlet_crypto SYSTEM INTERFACE ${dep_inc})
add_library(trainlet_spdlog INTERFACE)
add_library(trainlet::spdlog ALIAS trainlet_spdlog)
target_include_directories(trainlet_spdlog SYSTEM INTERFACE ${dep_inc})
target_compile_definitions(trainlet_spdlog INTERFACE SPDLOG_FMT_EXTERNAL)
target_link_libraries(trainlet_spdlog INTERFACE fmt::fmt-header-only Threads::Threads)
