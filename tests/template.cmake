# Chat template tests. test_jinja / test_chat_template / test_chat_template_parity are registered
# by tests/CMakeLists.txt; the real-template checks read the npm tokenizer configs
# (tools/fetch_tokenizers.sh) and skip when they are absent, the parity test reads the committed
# transformers fixtures tests/fixtures/templates/<name>.json and fails when they are missing.
add_test(NAME template_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/template/cli.sh $<TARGET_FILE:mlxcel>)
set_tests_properties(template_cli PROPERTIES ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# When the text module's npm fetch fixture exists (tests/text.cmake), run after it so that the
# real templates are present; without it this is a no-op.
set_tests_properties(test_chat_template PROPERTIES FIXTURES_REQUIRED tokenizers_npm)

# Six more real templates (DeepSeek-V3, InternLM2, Llama 3.1, Llama 3.2, Mistral Nemo, Qwen 2.5),
# expected renders from jinja2 set up as transformers' apply_chat_template
# (tools/reference/make_template_fixtures.py --names ... --date-string "26 Jul 2024").
add_test(NAME test_chat_template_parity_more
  COMMAND test_chat_template_parity ${PROJECT_SOURCE_DIR}/tests/fixtures/templates
          deepseek_v3 internlm2 llama3_1 llama3_2 mistral_nemo qwen2_5)
set_tests_properties(test_chat_template_parity_more PROPERTIES ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
