# Install rules (`cmake --install BUILD --prefix P`), included by the top-level CMakeLists.txt.
#
# Layout, relocatable as a whole (no absolute path is written into any installed file):
#   bin/cumemtrace                the CLI and collector
#   lib/libcumemtrace.so          the preload: `run` finds it as ../lib next to the executable,
#                                 and the preload finds the collector as ../bin/cumemtrace
#   lib/cumemtrace/python/        sitecustomize.py + cumemtrace_torch.py (+ its generated
#                                 cumemtrace_torch_layouts.py) + cumemtrace_phases.py
#                                 + cumemtrace_modules.py + cumemtrace_ranks.py
#                                 + cumemtrace_workspaces.py:
#                                 `run` puts this first on PYTHONPATH to capture PyTorch's
#                                 allocator events and phases (docs/pytorch.md)
#   include/cumemtrace.h          the marks API (header only)
#   lib/cmake/cumemtrace/         find_package(cumemtrace): cumemtrace::headers,
#                                 CUMEMTRACE_EXECUTABLE, CUMEMTRACE_PRELOAD_LIBRARY
#   lib/pkgconfig/cumemtrace.pc   pkg-config --cflags cumemtrace
#   lib/cumemtrace/fake/libcuda.so.1
#                                 the fake CUDA driver (tests/fake_driver), to try `run` without a
#                                 GPU: LD_LIBRARY_PATH=PREFIX/lib/cumemtrace/fake (README); its
#                                 rule is beside its target
#   share/cumemtrace/schemas/     the snapshot JSON schema
#   share/cumemtrace/grafana/     the Grafana dashboard over `run --metrics` (docs/metrics.md)
#   share/doc/cumemtrace/         README and docs
# bin and lib are fixed names (not GNUInstallDirs' lib/<multiarch>): the two programs find each
# other by these relative paths. Tests and benchmarks install nothing else.
include(CMakePackageConfigHelpers)

install(TARGETS cumemtrace RUNTIME DESTINATION bin COMPONENT runtime)
install(TARGETS cumemtrace_preload LIBRARY DESTINATION lib COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/preload/python/sitecustomize.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_torch.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_torch_layouts.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_phases.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_modules.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_ranks.py
  ${PROJECT_SOURCE_DIR}/preload/python/cumemtrace_workspaces.py
  DESTINATION lib/cumemtrace/python COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/include/cumemtrace.h DESTINATION include COMPONENT devel)
install(FILES ${PROJECT_SOURCE_DIR}/schemas/snapshot.schema.json
  DESTINATION share/cumemtrace/schemas COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/share/grafana/cumemtrace.json
  DESTINATION share/cumemtrace/grafana COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/cumemtrace COMPONENT doc)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/cumemtrace/docs COMPONENT doc)

configure_file(${PROJECT_SOURCE_DIR}/cmake/cumemtraceConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/cumemtraceConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/cumemtraceConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/cmake/cumemtraceConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/cumemtraceConfigVersion.cmake
  DESTINATION lib/cmake/cumemtrace COMPONENT devel)

configure_file(${PROJECT_SOURCE_DIR}/cmake/cumemtrace.pc.in
  ${PROJECT_BINARY_DIR}/cmake/cumemtrace.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/cumemtrace.pc DESTINATION lib/pkgconfig COMPONENT devel)
