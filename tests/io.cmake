# io/model foundation: the malformed-checkpoint corpus and the inspect-vs-formula check.
# Bad corpus: every tests/fixtures/bad/<case>/ is one test (see tests/io/check_bad.sh). These
# run in the ASan/UBSan build too: a sanitizer report fails them.
file(GLOB BAD_CASES LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/tests/fixtures/bad/*)
# an empty or lost corpus would register no test and pass by finding nothing
list(LENGTH BAD_CASES n_bad_cases)
if(n_bad_cases LESS 47)
  message(FATAL_ERROR "tests/fixtures/bad: ${n_bad_cases} cases, 47 expected (tools/make_ckpt_fixtures.py)")
endif()
foreach(case ${BAD_CASES})
  if(IS_DIRECTORY ${case})
    get_filename_component(case_name ${case} NAME)
    add_test(NAME bad_${case_name}
             COMMAND sh ${PROJECT_SOURCE_DIR}/tests/io/check_bad.sh $<TARGET_FILE:mlxcel> ${case})
  endif()
endforeach()
