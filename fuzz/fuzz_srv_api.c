/* libFuzzer target: request bodies of /v1/responses and /v1/messages through srv_api_parse
 * (the translation into a chat request, then the chat route's parser). data[0] picks the
 * dialect and how the reply ends; the rest is the body. When a body is accepted, its bytes are
 * also the model's reply, written by the dialect's answer code whole and streamed in two cuts.
 * Any input must parse or fail cleanly, and every answer must be produced. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_api.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"

static int fz_vocab(void *txt) { (void)txt; return 32000; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static srv_server s;
    static srv_backend be;
    static srv_text_ops ops;
    static srv_chat_caps caps;
    static int init;
    if (!init) {
        srv_config_defaults(&s.cfg);
        ops.vocab_size = fz_vocab;
        be.text_ops = &ops;
        snprintf(be.info.name, sizeof be.info.name, "fuzz");
        caps.thinks = caps.enable_thinking = true;
        caps.format = SRV_TOOLS_HERMES;
        s.be = &be;
        s.chat_caps = &caps;
        s.resp_store = srv_resp_store_new(4, 1 << 16);
        pthread_mutex_init(&s.mu, NULL);
        init = 1;
    }
    if (size < 1) return 0;
    const srv_dialect d = data[0] & 1 ? SRV_DIALECT_RESPONSES : SRV_DIALECT_ANTHROPIC;
    static const srv_finish fins[] = {SRV_FINISH_EOS, SRV_FINISH_LENGTH, SRV_FINISH_STOP, SRV_FINISH_ERROR,
                                      SRV_FINISH_CANCELLED};
    srv_job *j = srv_job_new(&s);
    if (!j) return 0;
    mx_error err;
    if (!srv_api_parse(&s, j, NULL, d, (const char *)data + 1, size - 1, &err)) {
        /* the reply: the body's bytes, one token each, through the parser as a Qwen reply */
        j->req.chat->format = SRV_TOOLS_HERMES;
        j->req.chat->reasoning_used = SRV_REASONING_DEEPSEEK;
        const size_t n = size - 1;
        j->text = malloc(n + 1);
        j->tok_end = malloc((n + 1) * sizeof *j->tok_end);
        if (j->text && j->tok_end) {
            memcpy(j->text, data + 1, n);
            j->text[n] = 0;
            j->text_len = n;
            for (size_t i = 0; i < n; i++) j->tok_end[i] = i + 1;
            j->n_toks = (int)n;
            j->n_prompt = 1;
            j->done = true;
            j->finish = fins[(data[0] >> 1) % 5];
            if (j->finish == SRV_FINISH_STOP) j->stop_word = strdup("x");
            free(srv_api_final(&s, j));
            char *buf = NULL;
            size_t len = 0, cap = 0, sent = 0;
            const int half = j->n_toks / 2;
            srv_api_sse_tokens(&s, j, 0, half, &sent, &buf, &len, &cap);
            srv_api_sse_tokens(&s, j, half, j->n_toks, &sent, &buf, &len, &cap);
            srv_api_sse_finish(&s, j, &sent, &buf, &len, &cap);
            free(buf);
        }
    }
    srv_job_release(j);
    return 0;
}
