# Hostile input (issue 11): files that are not what they claim, sizes that overflow,
# outputs that are not regular files, and models large enough to expose quadratic compile
# time. Each test is bounded in time and memory.
ffn_c_test(source_file_test SOURCES hostile/source_file_test.c LABELS hostile)
