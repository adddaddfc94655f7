# CPU reference interpreter and numerics (ir/numerics.c, ir/interp.c): `ctest -R interp`.
foreach(name interp_numerics_test interp_ops_test interp_quant_test interp_errors_test interp_optable_test wq_pack_test
             interp_prequant_test)
  ffn_c_test(${name} SOURCES ${FFNC_TEST_DIR}/interp/${name}.c LABELS interp)
endforeach()
