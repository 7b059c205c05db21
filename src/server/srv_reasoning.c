/* Reasoning (<think>...</think>) settings: llama-server's --reasoning-format names, and whether a
 * rendered prompt leaves the model inside its thoughts (templates such as DeepSeek-R1-0528's
 * and Qwen3's thinking variants end the generation prompt with "<think>\n", so the reply
 * starts with thoughts and has only the closing tag). The splitting itself is the reply
 * parser's (srv_toolparse.c: states START / THINK / AFTER_THINK). */
#include <string.h>

#include "server/srv_tools.h"

int srv_reasoning_parse(const char *s, srv_reasoning_mode *out) {
    if (!strcmp(s, "none")) *out = SRV_REASONING_NONE;
    else if (!strcmp(s, "auto") || !strcmp(s, "deepseek")) *out = SRV_REASONING_DEEPSEEK;
    else if (!strcmp(s, "deepseek-legacy")) *out = SRV_REASONING_LEGACY;
    else return -1;
    return 0;
}

bool srv_prompt_opens_think(const char *prompt) {
    const char *open = NULL;
    for (const char *p = strstr(prompt, "<think>"); p; p = strstr(p + 1, "<think>")) open = p;
    if (!open) return false;
    open += strlen("<think>");
    if (strstr(open, "</think>")) return false;
    /* only whitespace may follow: the thoughts are the model's to write */
    for (; *open; open++)
        if (*open != ' ' && *open != '\n' && *open != '\r' && *open != '\t') return false;
    return true;
}
