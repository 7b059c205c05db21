/* Finished Responses kept in memory for previous_response_id and GET /v1/responses/{id}.
 *
 * A least-recently-used list bounded two ways: at most `max_count` responses, and at most
 * `max_bytes` of their JSON text (the Response object plus the conversation that led to it:
 * each entry holds its whole conversation, so any entry can be evicted without breaking a
 * later one). Putting past a bound evicts from the least recently used end; a lookup makes an
 * entry the most recent. The objects are never modified once stored: readers get references
 * (jansson's reference counts are atomic) and copy what they change. Lookups are linear: the
 * count bound keeps the list short next to the request they serve. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_api.h"

typedef struct entry {
    char id[64];
    json_t *response;
    json_t *history;
    size_t bytes;
    struct entry *prev, *next; /* prev: more recent */
} entry;

struct srv_resp_store {
    pthread_mutex_t mu;
    entry *head, *tail; /* head: most recently used */
    int count, max_count;
    size_t bytes, max_bytes;
};

srv_resp_store *srv_resp_store_new(int max_count, size_t max_bytes) {
    srv_resp_store *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->max_count = max_count;
    st->max_bytes = max_bytes;
    return st;
}

static void entry_free(entry *e) {
    json_decref(e->response);
    json_decref(e->history);
    free(e);
}

static void unlink_entry(srv_resp_store *st, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else st->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else st->tail = e->prev;
    e->prev = e->next = NULL;
    st->count--;
    st->bytes -= e->bytes;
}

static void push_front(srv_resp_store *st, entry *e) {
    e->prev = NULL;
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
    st->count++;
    st->bytes += e->bytes;
}

static entry *find(srv_resp_store *st, const char *id) {
    for (entry *e = st->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

void srv_resp_store_free(srv_resp_store *st) {
    if (!st) return;
    for (entry *e = st->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static size_t json_bytes(const json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

void srv_resp_store_put(srv_resp_store *st, const char *id, json_t *response, json_t *history) {
    entry *e = st && st->max_count > 0 ? calloc(1, sizeof *e) : NULL;
    if (!e) {
        json_decref(response);
        json_decref(history);
        return;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->response = response;
    e->history = history;
    e->bytes = json_bytes(response) + json_bytes(history) + sizeof *e;
    if (e->bytes > st->max_bytes) { /* alone over the bound: not kept */
        entry_free(e);
        return;
    }
    pthread_mutex_lock(&st->mu);
    entry *old = find(st, id);
    if (old) {
        unlink_entry(st, old);
        entry_free(old);
    }
    while (st->tail && (st->count + 1 > st->max_count || st->bytes + e->bytes > st->max_bytes)) {
        entry *victim = st->tail;
        unlink_entry(st, victim);
        entry_free(victim);
    }
    push_front(st, e);
    pthread_mutex_unlock(&st->mu);
}

int srv_resp_store_get(srv_resp_store *st, const char *id, json_t **response, json_t **history) {
    *response = *history = NULL;
    if (!st) return -1;
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, id);
    if (e) {
        unlink_entry(st, e);
        push_front(st, e);
        *response = json_incref(e->response);
        *history = json_incref(e->history);
    }
    pthread_mutex_unlock(&st->mu);
    return e ? 0 : -1;
}

bool srv_resp_store_delete(srv_resp_store *st, const char *id) {
    if (!st) return false;
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, id);
    if (e) unlink_entry(st, e);
    pthread_mutex_unlock(&st->mu);
    if (e) entry_free(e);
    return e != NULL;
}

void srv_resp_store_stats(srv_resp_store *st, int *count, size_t *bytes) {
    pthread_mutex_lock(&st->mu);
    *count = st->count;
    *bytes = st->bytes;
    pthread_mutex_unlock(&st->mu);
}
