# The differential test generator (tests/diff/ffn_diffgen.c): random valid programs, each
# checked against the CPU reference. CI (label diff) runs a fixed set on the CPU: the source's
# graph against the optimized graphs of -O0 and -O3, each compiled to CUDA text for sm_90.
# The gpu-labelled run compiles each with NVRTC and runs it on the GPU (exit 77 without one).
# A failure prints the seed and the program; `ffn_diffgen --seed S --print` prints it again.
add_executable(ffn_diffgen diff/ffn_diffgen.c)
target_include_directories(ffn_diffgen PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(ffn_diffgen PRIVATE ffn)
add_test(NAME diff_random_programs_cpu COMMAND ffn_diffgen --count 2000 --seed 1 --mode cpu)
set_tests_properties(diff_random_programs_cpu PROPERTIES LABELS diff TIMEOUT 300) # ~30 s alone; 120 s and more beside the NVRTC tests of a full -j run
# about 15 s on a 2-core machine; seeds 1..5000 all pass (65 skipped as overflowing)
add_test(NAME gpu_diff_random_programs COMMAND ffn_diffgen --count 200 --seed 1 --mode gpu)
set_tests_properties(gpu_diff_random_programs PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1800
  ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR};FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
# The backward graphs of the same programs (their f32 twins, relu as silu, no rounding casts)
# against finite differences: passes/grad.c's rules on what no hand-written test combines.
add_test(NAME diff_random_programs_grad COMMAND ffn_diffgen --count 2000 --seed 1 --mode grad)
set_tests_properties(diff_random_programs_grad PROPERTIES LABELS "diff;grad")
