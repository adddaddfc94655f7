# install.cmake: what `cmake --install` puts where, and how other projects find it.
#
#   bin/ffnc
#   lib/libffn.so.X.Y.Z (+ SONAME link libffn.so.X.Y, and libffn.so)   the public API only
#   lib/libffn.a                                    the same API, internal names made local
#   include/ffn.h                                   (needs dlpack/dlpack.h: libdlpack-dev)
#   lib/cmake/ffnc/ffncConfig.cmake, ffncConfigVersion.cmake, ffncTargets.cmake
#                                                   find_package(ffnc): ffnc::ffn, ffnc::ffn_static
#   lib/pkgconfig/ffn.pc                            pkg-config ffn (--static for libffn.a)
include(CMakePackageConfigHelpers)

# libffn.a for other programs: the library's objects linked into one relocatable object whose
# hidden symbols (everything not FFN_API) are then made local, so a host program with its own
# read_file or cache_get links. A plain archive would export all ~140 internal names.
set(FFNC_DIST_DIR ${PROJECT_BINARY_DIR}/dist)
set(FFNC_DIST_STATIC ${FFNC_DIST_DIR}/libffn.a)
add_custom_command(
  OUTPUT ${FFNC_DIST_STATIC}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${FFNC_DIST_DIR}
  COMMAND ${CMAKE_LINKER} -r -o ${FFNC_DIST_DIR}/ffn.o $<TARGET_OBJECTS:ffn_objects>
  COMMAND ${CMAKE_OBJCOPY} --localize-hidden ${FFNC_DIST_DIR}/ffn.o
  COMMAND ${CMAKE_COMMAND} -E rm -f ${FFNC_DIST_STATIC}
  COMMAND ${CMAKE_AR} rcs ${FFNC_DIST_STATIC} ${FFNC_DIST_DIR}/ffn.o
  DEPENDS ffn_objects $<TARGET_OBJECTS:ffn_objects>
  COMMENT "libffn.a with only the ffn_ API global"
  COMMAND_EXPAND_LISTS VERBATIM)
add_custom_target(ffn_dist_static ALL DEPENDS ${FFNC_DIST_STATIC})

install(TARGETS ffnc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ffn_shared EXPORT ffncTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${FFNC_DIST_STATIC} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/ffn.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(FFNC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ffnc)
install(EXPORT ffncTargets NAMESPACE ffnc:: DESTINATION ${FFNC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ffncConfig.cmake.in
  ${FFNC_DIST_DIR}/ffncConfig.cmake INSTALL_DESTINATION ${FFNC_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
# 0.x: only the same minor version is compatible (see the SONAME)
write_basic_package_version_file(${FFNC_DIST_DIR}/ffncConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${FFNC_DIST_DIR}/ffncConfig.cmake ${FFNC_DIST_DIR}/ffncConfigVersion.cmake
  DESTINATION ${FFNC_CMAKE_DIR})

# ffn.pc finds its prefix from its own place (${pcfiledir}), so `cmake --install --prefix P`
# works for any P.
file(RELATIVE_PATH FFNC_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
set(FFNC_PC_CFLAGS "-I\${includedir}")
if(NOT DLPACK_INCLUDE_DIR STREQUAL "/usr/include")
  string(APPEND FFNC_PC_CFLAGS " -I${DLPACK_INCLUDE_DIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/ffn.pc.in ${FFNC_DIST_DIR}/ffn.pc @ONLY)
install(FILES ${FFNC_DIST_DIR}/ffn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
