# Cross toolchain for the portable release build: Zig's clang (PyPI `ziglang`)
# for <arch>-linux-gnu.<glibc>, e.g. x86_64-linux-gnu.2.17. scripts/package
# writes the two wrappers (zig-cc, zig-c++: `zig cc -target $ZIG_TARGET`) and
# passes them as TRAINLET_ZIG_BIN. libc++, libc++abi and libunwind are linked
# statically by zig; glibc stays dynamic, at the target's symbol versions.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${TRAINLET_ARCH})
set(CMAKE_C_COMPILER ${TRAINLET_ZIG_BIN}/zig-cc)
set(CMAKE_CXX_COMPILER ${TRAINLET_ZIG_BIN}/zig-c++)
set(CMAKE_AR ${TRAINLET_ZIG_BIN}/zig-ar)
set(CMAKE_RANLIB ${TRAINLET_ZIG_BIN}/zig-ranlib)
# Nothing from the build machine: only the deps folder is searched.
set(CMAKE_FIND_ROOT_PATH ${TRAINLET_DEPS_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
