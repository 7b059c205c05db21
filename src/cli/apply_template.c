/* mlxcel apply-template: renders a checkpoint's chat template for a conversation and prints
 * the prompt exactly (no newline added), as transformers' apply_chat_template(tokenize=False). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "text/chat_template.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mlxcel apply-template -m DIR [--messages FILE|-] [--no-generation-prompt]\n"
            "                             [--extra JSON] [--chat-template-file FILE]\n\n"
            "Renders the chat template of the checkpoint in DIR and prints the prompt.\n\n"
            "  -m, --model DIR            checkpoint directory (chat_template.jinja or tokenizer_config.json)\n"
            "  --messages FILE|-          JSON array of messages, or an object {\"messages\": [...],\n"
            "                             \"tools\": [...]} (default: - = stdin)\n"
            "  --no-generation-prompt     render without add_generation_prompt\n"
            "  --extra JSON               object of extra template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --chat-template-file FILE  use this template instead of the checkpoint's\n");
}

int cmd_apply_template(int argc, char **argv) {
    const char *model = NULL, *messages_path = "-", *extra_text = NULL, *tpl_file = NULL;
    bool gen_prompt = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) {
            model = argv[++i];
        } else if (!strcmp(a, "--messages") && has_val) {
            messages_path = argv[++i];
        } else if (!strcmp(a, "--extra") && has_val) {
            extra_text = argv[++i];
        } else if (!strcmp(a, "--chat-template-file") && has_val) {
            tpl_file = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = false;
        } else {
            fprintf(stderr, "mlxcel apply-template: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model && !tpl_file) {
        fprintf(stderr, "mlxcel apply-template: -m DIR (or --chat-template-file FILE) is required\n");
        usage(stderr);
        return 2;
    }
    json_error_t je;
    json_t *input = !strcmp(messages_path, "-") ? json_loadf(stdin, 0, &je) : json_load_file(messages_path, 0, &je);
    if (!input) {
        fprintf(stderr, "mlxcel apply-template: %s:%d: invalid JSON: %s\n",
                strcmp(messages_path, "-") ? messages_path : "<stdin>", je.line, je.text);
        return 1;
    }
    json_t *extra = json_object();
    json_t *messages = input;
    if (json_is_object(input)) {
        messages = json_object_get(input, "messages");
        const char *key;
        json_t *val;
        json_object_foreach(input, key, val)
            if (strcmp(key, "messages")) json_object_set(extra, key, val);
    }
    int rc = 1;
    chat_template *ct = NULL;
    char *out = NULL;
    mx_error err = {0};
    if (!json_is_array(messages)) {
        fprintf(stderr, "mlxcel apply-template: %s: expected a JSON array of messages or an object with "
                        "\"messages\"\n", strcmp(messages_path, "-") ? messages_path : "<stdin>");
        goto done;
    }
    if (extra_text) {
        json_t *x = json_loads(extra_text, 0, &je);
        if (!json_is_object(x)) {
            fprintf(stderr, "mlxcel apply-template: --extra: expected a JSON object%s%s\n", x ? "" : ": ",
                    x ? "" : je.text);
            json_decref(x);
            rc = 2;
            goto done;
        }
        json_object_update(extra, x);
        json_decref(x);
    }
    if (chat_template_load(&ct, model, tpl_file, &err) ||
        chat_template_apply(ct, messages, extra, gen_prompt, &out, &err)) {
        fprintf(stderr, "mlxcel apply-template: %s\n", err.msg);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    rc = fflush(stdout) ? 1 : 0;
done:
    free(out);
    chat_template_free(ct);
    json_decref(extra);
    json_decref(input);
    return rc;
}
