/* Chat answers through the reply parser (srv_chat_out.c): used by srv_response.c when a chat
 * request has tools or reasoning extraction. */
#ifndef MLXCEL_SERVER_SRV_CHAT_OUT_H
#define MLXCEL_SERVER_SRV_CHAT_OUT_H

#include "server/srv_internal.h"

/* Whether job j's reply goes through the parser. */
bool srv_chat_out_active(const srv_job *j);
/* Streaming: the chunks of tokens [from, to) (text through the parser; logprobs per token). */
void srv_chat_sse_tokens(srv_server *s, srv_job *j, int from, int to, size_t *sent_bytes, char **buf, size_t *len,
                         size_t *cap);
/* Streaming: the rest of the text, what the parser held back, and the finish chunk. */
void srv_chat_sse_finish(srv_server *s, srv_job *j, size_t *sent_bytes, char **buf, size_t *len, size_t *cap);
/* Whole response: the choice object of job j. */
json_t *srv_chat_choice(srv_server *s, srv_job *j);
/* The assistant message of a finished parser: role, content (null for calls only),
 * reasoning_content when any, tool_calls when any. */
json_t *srv_chat_message(const srv_cp *p);

#endif
