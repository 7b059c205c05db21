/* Streaming detokenizer.
 *
 * Text: the same prefix-window scheme as tokenizers' DecodeStream. The ids since the last
 * emission are kept with the ids of that emission before them as context (more ids when that
 * context decodes to nothing, so that first-token rules such as Strip or Metaspace act on
 * the same text in both decodes); the window is decoded with and without the new id and the
 * difference is the new text. Decoding a window (not one id at a
 * time) lets the decoders see their context: byte-fallback and ByteLevel pieces of one char
 * are joined before UTF-8 validation, and SentencePiece's "strip the leading space" applies
 * only to the first token of the whole stream (the window then starts at that token).
 * Text ending in U+FFFD is held back: the next id may complete the character. After 64 ids
 * without output (a long run of invalid bytes) the text is forced out; from then on the
 * output is best effort, as U+FFFD runs have no exact incremental form.
 *
 * Stops: newly final text goes to `pend`; a stop string found in pend ends the stream (text
 * before it is emitted); otherwise pend keeps only its longest suffix that is a prefix of some
 * stop string, so a stop spanning several tokens is still seen. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

struct tok_stream {
    const tokenizer *t;
    bool skip_special, stopped;
    tk_ids ids;          /* recent ids: [w, read) context, [read, n) not yet emitted */
    size_t w, read;
    tk_buf prefix;       /* decode(ids[0 .. read)) */
    tk_buf tmp;          /* decode(ids) */
    tk_buf pend;         /* final text held back for stop matching */
    tk_buf out;          /* what the last call returns */
    char **stops;
    size_t *stop_len;
    int n_stops;
    int stop_hit;        /* index in stops of the stop string that matched, -1 while none */
    int32_t *keep;       /* special tokens decoded despite skip_special (tok_stream_keep_special) */
    size_t n_keep;
};

tok_stream *tok_stream_new(const tokenizer *t, bool skip_special) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    s->stop_hit = -1;
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->stop_len);
    free(s->ids.p);
    free(s->prefix.p);
    free(s->tmp.p);
    free(s->pend.p);
    free(s->out.p);
    free(s->keep);
    free(s);
}

int tok_stream_keep_special(tok_stream *s, const int32_t *ids, size_t n) {
    int32_t *k = n ? malloc(n * sizeof *k) : NULL;
    if (n && !k) return -1;
    if (n) memcpy(k, ids, n * sizeof *k);
    free(s->keep);
    s->keep = k;
    s->n_keep = n;
    return 0;
}

static bool stream_kept(const tok_stream *s, int32_t id) {
    for (size_t i = 0; i < s->n_keep; i++)
        if (s->keep[i] == id) return true;
    return false;
}

void tok_stream_set_stops(tok_stream *s, const char *const *stops, int n_stops) {
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->stop_len);
    s->stops = NULL;
    s->stop_len = NULL;
    s->n_stops = 0;
    s->stop_hit = -1;
    if (n_stops <= 0) return;
    s->stops = calloc((size_t)n_stops, sizeof *s->stops);
    s->stop_len = calloc((size_t)n_stops, sizeof *s->stop_len);
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || !*stops[i]) continue; /* an empty stop would match everywhere */
        s->stops[s->n_stops] = strdup(stops[i]);
        s->stop_len[s->n_stops++] = strlen(stops[i]);
    }
}

/* ==== Stop matching ==== */

/* Moves final text from pend to out; returns 1 when a stop string matched. */
static int release(tok_stream *s, bool all) {
    if (s->n_stops == 0) {
        tk_buf_put(&s->out, s->pend.p, s->pend.n);
        s->pend.n = 0;
        return 0;
    }
    size_t best = SIZE_MAX;
    int which = -1; /* the earliest match; at one position, the first stop listed */
    for (int i = 0; i < s->n_stops; i++) {
        const char *f = s->pend.n >= s->stop_len[i] ? memmem(s->pend.p, s->pend.n, s->stops[i], s->stop_len[i]) : NULL;
        if (f && (size_t)(f - s->pend.p) < best) {
            best = (size_t)(f - s->pend.p);
            which = i;
        }
    }
    if (best != SIZE_MAX) {
        tk_buf_put(&s->out, s->pend.p, best);
        s->pend.n = 0;
        s->stopped = true;
        s->stop_hit = which;
        return 1;
    }
    /* keep the longest suffix of pend that starts some stop string */
    size_t keep = 0;
    if (!all)
        for (int i = 0; i < s->n_stops; i++) {
            size_t m = s->stop_len[i] - 1 < s->pend.n ? s->stop_len[i] - 1 : s->pend.n;
            for (size_t k = m; k > keep; k--)
                if (!memcmp(s->pend.p + s->pend.n - k, s->stops[i], k)) {
                    keep = k;
                    break;
                }
        }
    size_t emit = s->pend.n - keep;
    tk_buf_put(&s->out, s->pend.p, emit);
    if (keep) memmove(s->pend.p, s->pend.p + emit, keep);
    s->pend.n = keep;
    return 0;
}

const char *tok_stream_stop_word(const tok_stream *s) { return s->stop_hit >= 0 ? s->stops[s->stop_hit] : NULL; }

/* ==== Push / flush ==== */

static bool ends_with_fffd(const tk_buf *b) {
    return b->n >= 3 && !memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3);
}

int tok_stream_push(tok_stream *s, int32_t id, const char **out, size_t *out_len) {
    s->out.n = 0;
    *out = "";
    *out_len = 0;
    if (s->stopped) return 1;
    /* A skipped special token contributes nothing, whatever its neighbours. */
    if (s->skip_special && tk_skip_special(s->t, id) && !stream_kept(s, id)) return 0;
    tk_ids_push(&s->ids, id);
    s->tmp.n = 0;
    tk_decode_append_keep(s->t, s->ids.p + s->w, s->ids.n - s->w, s->skip_special, s->keep, s->n_keep, &s->tmp);
    /* 64 ids without output (endless invalid bytes, or a decoder whose output is not
     * prefix-stable) forces the text out, so a push never costs more than a bounded decode. */
    bool force = s->ids.n - s->read >= 64;
    if (s->tmp.n > s->prefix.n &&
        (force || (!ends_with_fffd(&s->tmp) && !memcmp(s->tmp.p, s->prefix.p ? s->prefix.p : "", s->prefix.n)))) {
        tk_buf_put(&s->pend, s->tmp.p + s->prefix.n, s->tmp.n - s->prefix.n);
        /* New window: the ids of this emission become the context of the next one. */
        s->w = s->read;
        s->read = s->ids.n;
        for (;;) {
            s->prefix.n = 0;
            tk_decode_append_keep(s->t, s->ids.p + s->w, s->read - s->w, s->skip_special, s->keep, s->n_keep, &s->prefix);
            if (s->prefix.n || s->w == 0 || s->read - s->w >= 16) break;
            s->w--;
        }
        if (s->w > 1024) { /* keep the id buffer small: 16 ids of extra history are enough */
            size_t drop = s->w - 16;
            memmove(s->ids.p, s->ids.p + drop, (s->ids.n - drop) * sizeof *s->ids.p);
            s->ids.n -= drop;
            s->w -= drop;
            s->read -= drop;
        }
    }
    int stop = release(s, false);
    *out = s->out.p ? s->out.p : "";
    *out_len = s->out.n;
    return stop;
}

void tok_stream_flush(tok_stream *s, const char **out, size_t *out_len) {
    s->out.n = 0;
    if (!s->stopped && s->ids.n > s->read) {
        /* Whatever is held back: the decoders already turned invalid bytes into U+FFFD. */
        s->tmp.n = 0;
        tk_decode_append_keep(s->t, s->ids.p + s->w, s->ids.n - s->w, s->skip_special, s->keep, s->n_keep, &s->tmp);
        /* prefix-stable decoders: tmp starts with prefix; otherwise best effort */
        if (s->tmp.n > s->prefix.n) tk_buf_put(&s->pend, s->tmp.p + s->prefix.n, s->tmp.n - s->prefix.n);
        s->read = s->ids.n;
    }
    if (!s->stopped) release(s, true);
    *out = s->out.p ? s->out.p : "";
    *out_len = s->out.n;
}
