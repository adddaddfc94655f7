# The Python package (python/ffnc, ctypes over libffn.so): the API without a GPU or torch, and
# on a GPU against torch's own computation (label gpu; exits 77 without torch or a GPU).
find_package(Python3 3.8 REQUIRED COMPONENTS Interpreter)
set(FFNC_PYTHON_ENV "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1"
    "FFNC_LIBRARY=$<TARGET_FILE:ffn_shared>;FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
add_test(NAME python_api COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/python/tests/test_api.py)
set_tests_properties(python_api PROPERTIES LABELS python ENVIRONMENT "${FFNC_PYTHON_ENV}")
# the GPU machine's python3 (the one with torch), found on PATH when the test runs
add_test(NAME gpu_python_torch COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/python/tests/test_gpu.py)
set_tests_properties(gpu_python_torch PROPERTIES LABELS "gpu;python" SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_PYTHON_ENV}")
# training through ffnc.autograd.FFN against torch autograd: gradients, the weight rule, run_grad,
# SGD and Adam loss curves (label gpu; exits 77 without torch or a GPU)
add_test(NAME gpu_python_train COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/python/tests/test_gpu_train.py)
set_tests_properties(gpu_python_train PROPERTIES LABELS "gpu;python;grad" SKIP_RETURN_CODE 77
  ENVIRONMENT "${FFNC_PYTHON_ENV}")
