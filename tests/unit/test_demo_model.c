/* The committed demo model (models/wordnet-chat-16m) answers fixed prompts greedily with exactly
 * the tokens transformers produced for them (samples_transformers.json, made on the GPU machine
 * by tools/train_demo/sample.py). Runs the real `mlxcel generate --json`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "models/wordnet-chat-16m"

/* Runs argv, returns its stdout (malloc'd) or NULL. */
static char *run_capture(char *const argv[]) {
    int fd[2];
    if (pipe(fd)) return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)r;
        if (cap - len < 1024) buf = realloc(buf, cap *= 2);
    }
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    buf[len] = '\0';
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s exited with %d\n", argv[0], st);
        free(buf);
        return NULL;
    }
    return buf;
}

static void assert_ids_equal(json_t *got, json_t *want, const char *what, const char *prompt) {
    size_t n = json_array_size(want);
    if (json_array_size(got) != n)
        fprintf(stderr, "%s: %s length %zu, want %zu\n", prompt, what, json_array_size(got), n);
    assert_int_equal(json_array_size(got), n);
    for (size_t i = 0; i < n; i++) {
        json_int_t g = json_integer_value(json_array_get(got, i));
        json_int_t w = json_integer_value(json_array_get(want, i));
        if (g != w) fprintf(stderr, "%s: %s differ at %zu: %lld vs %lld\n", prompt, what, i, (long long)g, (long long)w);
        assert_int_equal(g, w);
    }
}

static void test_demo_samples(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR"), *bin = getenv("MLXCEL_BIN");
    assert_non_null(src);
    assert_non_null(bin);
    char model[4096], path[4200];
    snprintf(model, sizeof model, "%s/" MODEL, src);
    snprintf(path, sizeof path, "%s/samples_transformers.json", model);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) fprintf(stderr, "%s: %s\n", path, je.text);
    assert_non_null(ref);
    json_t *samples = json_object_get(ref, "samples");
    assert_true(json_array_size(samples) >= 3);
    char ntok[16];
    snprintf(ntok, sizeof ntok, "%d", (int)json_integer_value(json_object_get(ref, "max_new_tokens")));
    for (size_t i = 0; i < 3; i++) { /* three prompts keep the test quick on two cores */
        json_t *s = json_array_get(samples, i);
        const char *prompt = json_string_value(json_object_get(s, "prompt"));
        char *argv[] = {(char *)bin, "generate", "-m", model, "-p", (char *)prompt, "-n", ntok,
                        "--temp", "0", "--json", NULL};
        char *out = run_capture(argv);
        assert_non_null(out);
        json_t *got = json_loads(out, 0, &je);
        if (!got) fprintf(stderr, "not JSON: %s\n", out);
        assert_non_null(got);
        assert_ids_equal(json_object_get(got, "prompt_ids"), json_object_get(s, "prompt_ids"),
                         "prompt ids", prompt);
        assert_ids_equal(json_object_get(got, "tokens"), json_object_get(s, "generated_ids"),
                         "generated ids", prompt);
        assert_string_equal(json_string_value(json_object_get(got, "text")),
                            json_string_value(json_object_get(s, "generated_text")));
        json_decref(got);
        free(out);
    }
    json_decref(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_demo_samples)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
