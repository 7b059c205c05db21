# Chat template tests. test_jinja / test_chat_template / test_chat_template_parity are registered
# by tests/CMakeLists.txt; the real-template checks read the npm tokenizer configs
# (tools/fetch_tokenizers.sh) and skip when they are absent, the parity test reads the committed
# transformers fixtures tests/fixtures/templates/<name>.json and fails when they are missing.
add_test(NAME template_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/template/cli.sh $<TARGET_FILE:mlxcel>)
set_tests_properties(template_cli PROPERTIES ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# When the text module's npm fetch fixture exists (tests/text.cmake), run after it so that the
# real templates are present; without it this is a no-op.
set_tests_properties(test_chat_template PROPERTIES FIXTURES_REQUIRED tokenizers_npm)
