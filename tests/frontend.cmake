# Front-end tests (frontend/): golden IR for the tiny examples and for focused files,
# golden diagnostics for every error class, and every example (examples/, and the code of
# dsl.md in tests/frontend/spec_examples) checking clean.
#
#   FFNC_UPDATE_GOLDEN=1 ctest -L golden -R '^fe_'     rewrites the expected files;
#   review each diff by eye: it is what a user will see.
#
# The goldens run ffnc: `check FILE` for diagnostics, `build FILE --emit ir -o - -O0` for
# the IR as the front end builds it (-O0 runs no pass, so these pin the front end, not
# what the passes make of its output).
#
# fe_driver is the front end alone with the same two command lines, compiled from the
# front-end and IR sources only: for debugging the front end while the rest of the library
# does not build (FE_TOOL below can point at it).
set(FE_DIR ${FFNC_TEST_DIR}/frontend)

add_executable(fe_driver
  ${FE_DIR}/fe_driver.c
  ${FFNC_FRONTEND_ALONE_SOURCES})
target_include_directories(fe_driver PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/frontend ${PROJECT_BINARY_DIR}/gen)
target_link_libraries(fe_driver PRIVATE m)
set(FE_TOOL $<TARGET_FILE:ffnc>)

# Each test runs in a copy of its directory in the build tree, so messages name files as a
# user would see them (`arity.ffn:12:5`) and a failing test's `.actual` file lands there,
# not in the sources. The copies follow the sources at every configure (configure_file).
set(FE_RUN ${CMAKE_CURRENT_BINARY_DIR}/frontend)
function(fe_stage src_dir name)
  file(GLOB files CONFIGURE_DEPENDS ${src_dir}/*.ffn)
  foreach(f ${files})
    get_filename_component(base ${f} NAME)
    configure_file(${f} ${FE_RUN}/${name}/${base} COPYONLY)
  endforeach()
endfunction()
fe_stage(${FFNC_EXAMPLES_DIR} examples)
fe_stage(${FE_DIR}/spec_examples spec_examples)
fe_stage(${FE_DIR}/ir ir)
fe_stage(${FE_DIR}/diag diag)

# IR of the tiny examples: tests/frontend/examples/NAME.ir
foreach(name llama3_tiny gpt2_tiny phi3_tiny)
  ffn_golden_test(fe_ir_example_${name}
    EXPECT ${FE_DIR}/examples/${name}.ir
    WORKDIR ${FE_RUN}/examples
    COMMAND ${FE_TOOL} build ${name}.ffn --emit ir -o - -O0)
endforeach()

# Every example checks clean (the full-size ones too: the front end is cheap).
file(GLOB FE_EXAMPLES CONFIGURE_DEPENDS ${FFNC_EXAMPLES_DIR}/*.ffn)
foreach(path ${FE_EXAMPLES})
  get_filename_component(name ${path} NAME_WE)
  ffn_golden_test(fe_check_example_${name}
    EXPECT ${FE_DIR}/clean.out
    WORKDIR ${FE_RUN}/examples
    COMMAND ${FE_TOOL} check ${name}.ffn)
endforeach()

# The code of dsl.md: each must check clean.
file(GLOB FE_SPEC CONFIGURE_DEPENDS ${FE_DIR}/spec_examples/*.ffn)
foreach(path ${FE_SPEC})
  get_filename_component(name ${path} NAME_WE)
  ffn_golden_test(fe_spec_${name}
    EXPECT ${FE_DIR}/clean.out
    WORKDIR ${FE_RUN}/spec_examples
    COMMAND ${FE_TOOL} check ${name}.ffn)
endforeach()

# Focused IR: tests/frontend/ir/NAME.ffn -> NAME.ir
file(GLOB FE_IR CONFIGURE_DEPENDS ${FE_DIR}/ir/*.ffn)
foreach(path ${FE_IR})
  get_filename_component(name ${path} NAME_WE)
  ffn_golden_test(fe_ir_${name}
    EXPECT ${FE_DIR}/ir/${name}.ir
    WORKDIR ${FE_RUN}/ir
    COMMAND ${FE_TOOL} build ${name}.ffn --emit ir -o - -O0)
endforeach()
# Command-line precision and fusion: they replace the file's setting without a conflict.
ffn_golden_test(fe_ir_precision_cli
  EXPECT ${FE_DIR}/ir/precision.cli.ir
  WORKDIR ${FE_RUN}/ir
  COMMAND ${FE_TOOL} build precision.ffn --emit ir -o - -O0 --precision matmul=bf16
          --precision weights=i4,group=64 --ffn-fusion 2..5)

# Diagnostics: tests/frontend/diag/NAME.ffn -> NAME.out
file(GLOB FE_DIAG CONFIGURE_DEPENDS ${FE_DIR}/diag/*.ffn)
list(REMOVE_ITEM FE_DIAG ${FE_DIR}/diag/spec_example.ffn)
foreach(path ${FE_DIAG})
  get_filename_component(name ${path} NAME_WE)
  ffn_golden_test(fe_diag_${name}
    EXPECT ${FE_DIR}/diag/${name}.out
    WORKDIR ${FE_RUN}/diag
    COMMAND ${FE_TOOL} check ${name}.ffn)
endforeach()
# A precision setting on the command line that the file contradicts.
ffn_golden_test(fe_diag_weights_f8_cli
  EXPECT ${FE_DIR}/diag/weights_f8.cli.out
  WORKDIR ${FE_RUN}/ir
  COMMAND ${FE_TOOL} check precision.ffn --precision weights=i8)

# dsl.md's diagnostic example, from a file named as in the spec so that the first line
# matches it character for character.
configure_file(${FE_DIR}/diag/spec_example.ffn ${FE_RUN}/spec_example/mlp.ffn COPYONLY)
ffn_golden_test(fe_diag_spec_example
  EXPECT ${FE_DIR}/diag/spec_example.out
  WORKDIR ${FE_RUN}/spec_example
  COMMAND ${FE_TOOL} check mlp.ffn)
# FFN Fusion requested on the command line: errors name the option (no source line).
ffn_golden_test(fe_diag_fusion_cli
  EXPECT ${FE_DIR}/diag/fusion_range.cli.out
  WORKDIR ${FE_RUN}/examples
  COMMAND ${FE_TOOL} check llama3_tiny.ffn --ffn-fusion 2..6)
