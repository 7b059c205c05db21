# Golden fixtures that cannot tell a right engine from a wrong one: a greedy continuation that
# repeats one token or copies the prompt passes an engine that copies its input. The checker
# (stdlib Python) lists them; tests/fixtures/echo_known.txt holds the known ones as expected
# failures, so a new echo fixture fails here, and so does a listed one that was fixed.
add_test(NAME fixtures_echo
  COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/reference/check_fixtures.py ${PROJECT_SOURCE_DIR}
          --known ${PROJECT_SOURCE_DIR}/tests/fixtures/echo_known.txt)
