#!/usr/bin/env bash
# check.sh BUILD_DIR SCRATCH CXX VERSION: install trainlet from BUILD_DIR into SCRATCH,
# then build and run the consumer with find_package(trainlet VERSION) and pkg-config.
set -euo pipefail
build=$1 scratch=$2 cxx=$3 version=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$here" -B "$scratch/cmake" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DTRAINLET_WANTED="$version" >/dev/null
cmake --build "$scratch/cmake" >/dev/null
"$scratch/cmake/consumer"
libdir=$(dirname "$(find "$scratch/prefix" -name trainlet.pc)")
flags=$(PKG_CONFIG_PATH=$libdir pkg-config --cflags --libs --static trainlet)
# shellcheck disable=SC2086
"$cxx" -std=c++17 -Wall -Wextra -Werror "$here/main.cc" -o "$scratch/pc-consumer" $flags
"$scratch/pc-consumer"
echo "find_package and pkg-config consumers: ok"
