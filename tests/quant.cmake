# quant: mlxcel convert through the binary (unit tests: tests/unit/test_quant.c, test_convert.c).
add_test(NAME quant_convert_cli
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/quant/convert_cli.sh $<TARGET_FILE:mlxcel>
                 ${PROJECT_SOURCE_DIR})
add_test(NAME quant_compare_cli
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/quant/compare_cli.sh $<TARGET_FILE:mlxcel>
                 ${PROJECT_SOURCE_DIR})
