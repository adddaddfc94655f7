# Backward graphs (passes/grad.c): gradients against finite differences on the CPU reference,
# the golden backward IR of one model, and the clean refusal of GPU code for it.
ffn_c_test(grad_fd_test SOURCES ${FFNC_TEST_DIR}/grad/grad_fd_test.c LABELS grad)
ffn_golden_test(grad_ir_gpt2_tiny EXPECT ${FFNC_TEST_DIR}/grad/gpt2_tiny.grad.ir WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/gpt2_tiny.ffn --grad --emit ir -o -)
ffn_golden_test(grad_no_gpu EXPECT ${FFNC_TEST_DIR}/grad/no_gpu.out WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/gpt2_tiny.ffn --grad --emit cuda -o -)
ffn_golden_test(grad_no_rule EXPECT ${FFNC_TEST_DIR}/grad/no_rule.out WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/llama3_tiny.ffn --grad --tp 2 --tp-rank 0 --emit ir -o -)
add_test(NAME grad_cli COMMAND sh ${FFNC_TEST_DIR}/grad/cli_grad_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn)
set_tests_properties(grad_cli PROPERTIES LABELS grad)
