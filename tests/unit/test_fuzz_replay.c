/* Replays every committed fuzz input (fuzz/corpus/<target>/ and fuzz/regress/<target>/) through
 * the fuzz targets' own bodies, so past findings stay fixed in every build, including the
 * ASan/UBSan one, without clang or libFuzzer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_template_one
#include "../../fuzz/fuzz_template.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_gbnf_one
#include "../../fuzz/fuzz_gbnf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_json_schema_one
#include "../../fuzz/fuzz_json_schema.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_srv_api_one
#include "../../fuzz/fuzz_srv_api.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_srv_embed_one
#include "../../fuzz/fuzz_srv_embed.c"
#undef LLVMFuzzerTestOneInput

static int replay_dir(const char *sub, int (*fn)(const uint8_t *, size_t)) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/fuzz/%s", getenv("MLXCEL_SOURCE_DIR"), sub);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        static uint8_t buf[1 << 20];
        size_t len = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        fn(buf, len); /* traps or sanitizer reports fail the test */
        n++;
    }
    closedir(d);
    return n;
}

static void test_replay(void **st) {
    (void)st;
    assert_non_null(getenv("MLXCEL_SOURCE_DIR"));
    int n = replay_dir("corpus/safetensors", fuzz_safetensors_one);
    n += replay_dir("regress/safetensors", fuzz_safetensors_one);
    assert_true(n > 0);
    int m = replay_dir("corpus/config", fuzz_config_one);
    m += replay_dir("regress/config", fuzz_config_one);
    assert_true(m > 0);
    int t = replay_dir("corpus/template", fuzz_template_one);
    t += replay_dir("regress/template", fuzz_template_one);
    assert_true(t > 0);
    int g = replay_dir("corpus/gbnf", fuzz_gbnf_one) + replay_dir("regress/gbnf", fuzz_gbnf_one);
    assert_true(g > 0);
    int j = replay_dir("corpus/json_schema", fuzz_json_schema_one) + replay_dir("regress/json_schema", fuzz_json_schema_one);
    assert_true(j > 0);
    int a = replay_dir("corpus/srv_api", fuzz_srv_api_one);
    a += replay_dir("regress/srv_api", fuzz_srv_api_one);
    assert_true(a > 0);
    int e = replay_dir("corpus/srv_embed", fuzz_srv_embed_one);
    e += replay_dir("regress/srv_embed", fuzz_srv_embed_one);
    assert_true(e > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
