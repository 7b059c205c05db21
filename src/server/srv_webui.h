/* The built-in chat page: the files of webui/ in the source tree, embedded into the program at
 * build time (tools/embed_webui.cmake writes them as C arrays), served at GET / and /webui/<name>
 * unless --no-webui. */
#ifndef MLXCEL_SERVER_SRV_WEBUI_H
#define MLXCEL_SERVER_SRV_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_mhd.h"

typedef struct srv_webui_asset {
    const char *path;         /* URL path: "/" for index.html, "/webui/<name>" for the others */
    const char *content_type; /* from the file's extension */
    const unsigned char *data;
    size_t size;
    const char *etag;         /* quoted strong validator: a SHA-256 prefix of the content */
} srv_webui_asset;

/* Generated (build dir, srv_webui_assets.c): the table, ended by an entry with path NULL. */
extern const srv_webui_asset srv_webui_assets[];

/* The asset at url, or NULL. */
const srv_webui_asset *srv_webui_find(const char *url);

struct srv_server;
/* True when the page is on and url is one of its files: those need no API key (the page holds
 * no secret; it asks for the key itself, and llama-server serves its page the same way). */
bool srv_webui_public(const struct srv_server *s, const char *url);
/* Answers GET/HEAD of a page file (304 when If-None-Match matches, 405 for other methods) and
 * sets *handled; leaves *handled false when the page is off or url is not one of its files. */
MHD_Result_t srv_webui_route(struct srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                             bool *handled);

#endif
