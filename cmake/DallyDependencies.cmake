# Finds the Debian packages Dally builds against and exposes each as an
# imported target, so the folder libraries only name targets.

find_package(Threads REQUIRED)
find_package(date CONFIG REQUIRED)          # date::date, date::date-tz
find_package(absl CONFIG REQUIRED)          # absl::flat_hash_map, ...
find_package(Boost 1.74 REQUIRED COMPONENTS unit_test_framework)
find_package(benchmark CONFIG QUIET)        # benchmark::benchmark

# Debian's libcaf-dev ships no CMake config: find headers and libraries by
# hand and wrap them in imported targets.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)
find_package(OpenSSL REQUIRED)              # OpenSSL::SSL, for CAF::openssl
if(NOT TARGET CAF::core)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io UNKNOWN IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
  add_library(CAF::openssl UNKNOWN IMPORTED)
  set_target_properties(CAF::openssl PROPERTIES
    IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
    INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL")
endif()

# RocksDB, linked statically everywhere: the shared library pays a
# __tls_get_addr per memtable key comparison (its perf context), a fifth of
# a write's CPU. One target, so no binary mixes the two builds.
find_package(RocksDB CONFIG REQUIRED)
if(NOT TARGET dally_rocksdb)
  add_library(dally_rocksdb INTERFACE)
  target_link_libraries(dally_rocksdb INTERFACE RocksDB::rocksdb)
  add_library(dally::rocksdb ALIAS dally_rocksdb)
endif()

# hiredis (Debian's libhiredis-dev) for the Redis client of
# dally-peers-bench; optional: without it that benchmark is not built.
find_path(HIREDIS_INCLUDE_DIR hiredis/hiredis.h)
find_library(HIREDIS_LIBRARY hiredis)
if(HIREDIS_INCLUDE_DIR AND HIREDIS_LIBRARY AND NOT TARGET hiredis::hiredis)
  add_library(hiredis::hiredis UNKNOWN IMPORTED)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${HIREDIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${HIREDIS_INCLUDE_DIR}")
endif()
