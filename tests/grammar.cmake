# Structured output (src/grammar/): 1,000 random JSON schemas constraining generation from random
# logits over the real Llama 3 vocabulary, every output validated by ajv (npm, pinned in
# tests/grammar/package-lock.json); the server end to end with the official openai client on the
# demo model. The unit tests are tests/unit/test_grammar*.c.
add_executable(grammar_schema_random ${CMAKE_CURRENT_SOURCE_DIR}/grammar/schema_random.c)
target_link_libraries(grammar_schema_random PRIVATE mlxcel_core)
if(MLXCEL_CUDA)
  set_target_properties(grammar_schema_random PROPERTIES LINKER_LANGUAGE CUDA)
endif()
add_test(NAME grammar_random_schemas
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/grammar/random_schemas.sh $<TARGET_FILE:grammar_schema_random>)
set_tests_properties(grammar_random_schemas PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED tokenizers_npm
  RESOURCE_LOCK grammar_npm)
# The unit tests read the npm tokenizers (Llama 3, Mistral).
set_tests_properties(test_grammar PROPERTIES FIXTURES_REQUIRED tokenizers_npm)
# The server on the demo model with the openai client and ajv.
add_test(NAME grammar_server_e2e
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/grammar/structured_e2e.sh $<TARGET_FILE:mlxcel>)
set_tests_properties(grammar_server_e2e PROPERTIES TIMEOUT 600 RESOURCE_LOCK grammar_npm)
# The same engine test with the token masks computed by the overlap worker during the forward
# (MLXCEL_GRAMMAR_OVERLAP=1; the CPU backend's default computes them after it).
add_test(NAME test_engine_grammar_overlap COMMAND test_engine_grammar)
set_tests_properties(test_engine_grammar_overlap PROPERTIES ENVIRONMENT "MLXCEL_GRAMMAR_OVERLAP=1")
