/* /tokenize's answer, written as the client reads it.
 *
 * Built as one JSON tree, a 16 MB body of text became ~4 M jansson objects (an integer, a
 * string and an object per token, ~300 bytes each with `with_pieces`) plus the dumped text:
 * RSS rose 270x the body (issue 50). Here the request keeps only the token ids (4 bytes each),
 * and the text `{"tokens":[...]}` is produced in blocks of about 64 KiB by the response
 * callback, token by token, so the memory a request holds is proportional to its ids, never to
 * its (up to 20x larger) answer. The bytes are those json_dumps gave for the tree: the same
 * key order, compact separators, and a piece that is not valid UTF-8 alone given as its bytes. */
#include <jansson.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"
#include "server/srv_mhd.h"

#define TOK_BLOCK 65536

typedef struct tok_reply {
    srv_server *s;
    int32_t *ids; /* [n], owned */
    size_t n, next;
    bool pieces, opened, closed;
    char *buf;
    size_t len, cap, off;
} tok_reply;

/* ==== One token ==== */
static void append_piece(tok_reply *t, int32_t id) {
    srv_backend *be = t->s->be;
    char *piece = NULL;
    size_t pn = 0;
    mx_error err;
    /* the token's own bytes: a partial character (0xC3) must not read as U+FFFD */
    if (be->text_ops->token_bytes(be->text, id, &piece, &pn, &err)) piece = NULL, pn = 0;
    char head[48];
    int hn = snprintf(head, sizeof head, "{\"id\":%d,\"piece\":", (int)id);
    srv_buf_append(&t->buf, &t->len, &t->cap, head, (size_t)hn);
    json_t *p = piece ? json_stringn(piece, pn) : NULL;
    if (p) {
        char small[1024];
        size_t need = json_dumpb(p, small, sizeof small, JSON_ENCODE_ANY | JSON_COMPACT);
        if (need && need <= sizeof small) {
            srv_buf_append(&t->buf, &t->len, &t->cap, small, need);
        } else if (need) {
            char *big = json_dumps(p, JSON_ENCODE_ANY | JSON_COMPACT);
            if (big) srv_buf_append(&t->buf, &t->len, &t->cap, big, strlen(big));
            free(big);
        }
        json_decref(p);
    } else { /* not valid UTF-8 alone: llama-server gives the bytes */
        srv_buf_append(&t->buf, &t->len, &t->cap, "[", 1);
        for (size_t k = 0; k < pn; k++) {
            char b[8];
            int bn = snprintf(b, sizeof b, k ? ",%u" : "%u", (unsigned)(unsigned char)piece[k]);
            srv_buf_append(&t->buf, &t->len, &t->cap, b, (size_t)bn);
        }
        srv_buf_append(&t->buf, &t->len, &t->cap, "]", 1);
    }
    free(piece);
    srv_buf_append(&t->buf, &t->len, &t->cap, "}", 1);
}

/* ==== Response callback ==== */
static ssize_t tok_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    tok_reply *t = cls;
    if (t->off >= t->len) {
        t->len = t->off = 0;
        if (t->closed) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!t->opened) {
            srv_buf_append(&t->buf, &t->len, &t->cap, "{\"tokens\":[", 11);
            t->opened = true;
        }
        while (t->next < t->n && t->len < TOK_BLOCK) {
            if (t->next) srv_buf_append(&t->buf, &t->len, &t->cap, ",", 1);
            if (t->pieces) {
                append_piece(t, t->ids[t->next]);
            } else {
                char num[16];
                int k = snprintf(num, sizeof num, "%d", (int)t->ids[t->next]);
                srv_buf_append(&t->buf, &t->len, &t->cap, num, (size_t)k);
            }
            t->next++;
        }
        if (t->next == t->n) {
            srv_buf_append(&t->buf, &t->len, &t->cap, "]}", 2);
            t->closed = true;
        }
        if (!t->len) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
    }
    size_t k = t->len - t->off;
    if (k > max) k = max;
    memcpy(out, t->buf + t->off, k);
    t->off += k;
    return (ssize_t)k;
}

static void tok_free(void *cls) {
    tok_reply *t = cls;
    const size_t held = t->n * sizeof *t->ids;
    free(t->ids);
    free(t->buf);
    free(t);
    /* a big request's pages go back to the system, not to a thread's malloc arena */
    if (held >= (4u << 20)) malloc_trim(0);
}

/* Takes ids (freed in any case). 200 with the streamed answer, or MHD_NO (out of memory). */
MHD_Result_t srv_tokenize_reply(srv_server *s, struct MHD_Connection *c, int32_t *ids, size_t n, bool with_pieces);
MHD_Result_t srv_tokenize_reply(srv_server *s, struct MHD_Connection *c, int32_t *ids, size_t n, bool with_pieces) {
    tok_reply *t = calloc(1, sizeof *t);
    if (!t) {
        free(ids);
        return MHD_NO;
    }
    *t = (tok_reply){.s = s, .ids = ids, .n = n, .pieces = with_pieces};
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, TOK_BLOCK, tok_read, t, tok_free);
    if (!r) {
        tok_free(t);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
    return srv_mhd_queue(s, c, 200, r);
}
