# The command line (issue 12): every mistake is refused with a message that names it and
# exit 2 (usage), -h works everywhere, outputs get the usual mode, shape errors name the dim.
# `ctest -L cli`.
set(CLI_MODEL ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn)

# ffn_cli_test(NAME STATUS PATTERN ARGS...): `ffnc ARGS...` exits STATUS and prints PATTERN.
function(ffn_cli_test name status pattern)
  add_test(NAME cli_${name}
           COMMAND sh ${FFNC_TEST_DIR}/cli/expect.sh ${status} ${pattern} $<TARGET_FILE:ffnc> ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES LABELS cli
                       ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
endfunction()

# numbers: garbage, out of range, not finite
ffn_cli_test(compare_tol_garbage 2 "compare: --tol abc: expected a finite number" compare a.st b.st --tol abc)
ffn_cli_test(compare_tol_nan 2 "compare: --tol nan: expected a finite number" compare a.st b.st --tol=nan)
ffn_cli_test(bench_reps_negative 2 "bench: --reps -5: expected an integer from 1" bench ${CLI_MODEL} --tokens 1 --reps -5)
ffn_cli_test(bench_reps_suffix 2 "bench: --reps 3x: expected an integer" bench ${CLI_MODEL} --tokens 1 --reps 3x)
ffn_cli_test(bench_tokens_empty_item 2 "bench: --tokens 1,,16: expected integers" bench ${CLI_MODEL} --tokens 1,,16)
ffn_cli_test(bench_tokens_zero 2 "bench: --tokens 0: expected an integer from 1" bench ${CLI_MODEL} --tokens=16,0)
ffn_cli_test(gen_seed_garbage 2 "gen: --seed xyz: expected an integer from 0" gen ${CLI_MODEL} --weights w.st --seed xyz)
ffn_cli_test(gen_dim_zero 2 "gen: --dim T=0: expected NAME=SIZE" gen ${CLI_MODEL} --inputs i.st --dim T=0)
ffn_cli_test(analyze_max_error 2 "analyze: --max-error abc: expected a finite number"
             analyze ${CLI_MODEL} --weights w.st --input i.st --max-error abc)
ffn_cli_test(build_opt_level 2 "build: -O5: expected -O0, -O1, -O2 or -O3" build ${CLI_MODEL} --emit ir -o out.ir -O5)

# repeated options: refused where one replaced the other, allowed where they add up
ffn_cli_test(run_weights_twice 2 "run: --weights given more than once"
             run ${CLI_MODEL} --weights a.st --weights=b.st --input i.st --output o.st)
ffn_cli_test(bench_tokens_twice 2 "bench: --tokens given more than once" bench ${CLI_MODEL} --tokens 1 --tokens 16)
ffn_cli_test(gen_dim_twice 2 "gen: --dim T=4: dim T given more than once"
             gen ${CLI_MODEL} --inputs i.st --dim T=3 --dim T=4)
ffn_cli_test(build_emit_twice 2 "build: --emit given more than once" build ${CLI_MODEL} --emit ir --emit cuda -o out.ir)
ffn_cli_test(check_repeatable 0 "^$" check ${CLI_MODEL} --ffn-fusion 0..2 --ffn-fusion=2..4 --precision weights=i8)

# option shapes: unknown, missing value, value on a flag, a forgotten value swallowing the next option
ffn_cli_test(analyze_unknown 2 "analyze: unknown option '--bogus'" analyze ${CLI_MODEL} --bogus)
ffn_cli_test(run_swallowed_value 2 "run: --weights needs a value"
             run ${CLI_MODEL} --weights --input i.st --output o.st)
ffn_cli_test(compare_missing_value 2 "compare: --tol needs a value" compare a.st b.st --tol)
ffn_cli_test(bench_flag_value 2 "bench: --no-graphs takes no value" bench ${CLI_MODEL} --tokens 1 --no-graphs=1)

# -h and --help on every command (exit 0, the usage on standard output)
foreach(cmd check build run bench gen compare analyze tune)
  ffn_cli_test(help_h_${cmd} 0 "^usage: ffnc ${cmd} " ${cmd} -h)
  ffn_cli_test(help_long_${cmd} 0 "^usage: ffnc ${cmd} " ${cmd} --help)
endforeach()
# ffnc --help: the commands, every environment variable, the exit statuses
foreach(pattern "analyze +what" "FFNC_CACHE_DIR" "FFNC_NO_CACHE" "FFNC_NVRTC_LIBRARY" "FFNC_DISABLE_NVRTC"
        "FFNC_GEMM_VARIANT" "FFNC_GEMM_SPLITS" "FFNC_NO_TUNE" "tune +time each GEMM" "FFNC_INTERP_THREADS" "FFNC_NCCL_LIBRARY" "FFNC_TP_WHOLE_WEIGHTS" "FFNC_TP_OVERLAP" "FFNC_TP_BLOCKS" "FFNC_LIBRARY" "exit status" "3 +a device")
  string(MAKE_C_IDENTIFIER "${pattern}" id)
  ffn_cli_test(help_top_${id} 0 "${pattern}" --help)
endforeach()

# ffnc tune: usage errors before anything touches the GPU (exit 2); without a GPU, exit 3 (no_gpu)
ffn_cli_test(tune_no_file 2 "tune: usage: ffnc tune FILE.ffn" tune --tokens 1,16)
ffn_cli_test(tune_two_files 2 "tune: unexpected argument 'b.ffn'" tune ${CLI_MODEL} b.ffn)
ffn_cli_test(tune_tokens_zero 2 "tune: --tokens 0: expected an integer from 1" tune ${CLI_MODEL} --tokens 16,0)
ffn_cli_test(tune_tokens_garbage 2 "tune: --tokens 1,,16: expected integers" tune ${CLI_MODEL} --tokens 1,,16)
ffn_cli_test(tune_tokens_too_many 2 "tune: --tokens .*: at most 32 values" tune ${CLI_MODEL}
             --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33)
ffn_cli_test(tune_tokens_twice 2 "tune: --tokens given more than once" tune ${CLI_MODEL} --tokens 1 --tokens 16)
ffn_cli_test(tune_weights_twice 2 "tune: --weights given more than once" tune ${CLI_MODEL} --weights a.st --weights b.st)
ffn_cli_test(tune_unknown 2 "tune: unknown option '--tp'" tune ${CLI_MODEL} --tp 2)
ffn_cli_test(tune_bad_arch 2 "tune: --arch sm_7x: expected sm_XX" tune ${CLI_MODEL} --arch sm_7x)
ffn_cli_test(tune_missing_value 2 "tune: --weights needs a value" tune ${CLI_MODEL} --weights)

# build -o - is for the text stages; the AOT package is binary
ffn_cli_test(build_aot_stdout 2 "build: -o -: the AOT package is binary" build ${CLI_MODEL} -o -)
ffn_cli_test(build_emit_stdout 0 "^model llama3_tiny_mlp" build ${CLI_MODEL} --emit ir -O0 -o -)

add_test(NAME cli_outputs COMMAND sh ${FFNC_TEST_DIR}/cli/outputs_test.sh $<TARGET_FILE:ffnc> ${CLI_MODEL}
         ${CMAKE_CURRENT_BINARY_DIR}/cli_outputs)
set_tests_properties(cli_outputs PROPERTIES LABELS cli
                     ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
