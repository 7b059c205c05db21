# Server tests: the real HTTP server over a deterministic fake backend (tests/server/fake_*.c),
# driven by curl and the official `openai` npm package; plus the Prometheus output checked by
# promtool. The fake is test-only: it is not part of the mlxcel binary.
add_executable(mlxcel-fake-server ${CMAKE_CURRENT_SOURCE_DIR}/server/fake_server.c
                                  ${CMAKE_CURRENT_SOURCE_DIR}/server/fake_backend.c)
target_include_directories(mlxcel-fake-server PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/server)
target_link_libraries(mlxcel-fake-server PRIVATE mlxcel_core)
if(MLXCEL_CUDA)
  set_target_properties(mlxcel-fake-server PROPERTIES LINKER_LANGUAGE CUDA)
endif()

add_test(NAME server_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/e2e.sh
         $<TARGET_FILE:mlxcel-fake-server> $<TARGET_FILE:mlxcel>)
set_tests_properties(server_e2e PROPERTIES TIMEOUT 300
  ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

# The real server (`mlxcel serve` through the mlxcel-server name) over a tiny checkpoint on the
# CPU engine: fixture weights (or a generated model of the same shape) + the byte-level test
# tokenizer with a ChatML template (tests/fixtures/serve_tokenizer).
add_test(NAME server_real_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/real_e2e.sh
         $<TARGET_FILE:mlxcel>)
set_tests_properties(server_real_e2e PROPERTIES TIMEOUT 300
  ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# /v1/responses and /v1/messages with the official openai and @anthropic-ai/sdk clients: the fake
# backend with Qwen 3's template and scripted replies, the demo model, queue / hang-up / keys.
add_test(NAME server_apis_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/apis_e2e.sh
         $<TARGET_FILE:mlxcel-fake-server> $<TARGET_FILE:mlxcel>)
set_tests_properties(server_apis_e2e PROPERTIES TIMEOUT 300
  ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# The e2e tests may run `npm ci` in tests/server: never at the same time.
set_tests_properties(server_e2e server_real_e2e server_apis_e2e PROPERTIES RESOURCE_LOCK server_npm)
# Tensor parallelism: serve --tp-size 2 answers as --tp-size 1 (CPU rank threads).
add_test(NAME server_tp_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/tp_e2e.sh
         $<TARGET_FILE:mlxcel>)
set_tests_properties(server_tp_e2e PROPERTIES TIMEOUT 180)
# Embeddings (docs/embeddings.md): four servers on the demo model (--embeddings with pooling last,
# --pooling none, mean from a sentence-transformers 1_Pooling config, and no --embeddings) driven
# by the `openai` package and fetch (tests/server/embed_e2e.mjs), plus start-up refusals.
add_test(NAME server_embed_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/embed_e2e.sh
         $<TARGET_FILE:mlxcel>)
set_tests_properties(server_embed_e2e PROPERTIES TIMEOUT 300 RESOURCE_LOCK server_npm)
# Cascade attention: the demo model served under a shared system prompt answers the same with
# MLXCEL_CASCADE_ATTENTION=0, 1 and auto (curl; node for JSON).
add_test(NAME server_cascade_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/cascade_e2e.sh
         $<TARGET_FILE:mlxcel>)
set_tests_properties(server_cascade_e2e PROPERTIES TIMEOUT 300)
# The built-in chat page (webui/): curl checks of GET / and its headers, then Debian's chromium
# driven by puppeteer-core (tests/server/webui/, its own package-lock.json) against the demo
# model behind --api-key and the echoing fake backend: streaming, stop, reload, HTML in a reply.
# The browser run is about the page, not the C code: it is left out of the sanitizer build
# (label nosan; the demo model at -O0 makes it a minute and a half there), which runs the HTTP
# checks of the route and the clean shutdown instead (server_webui_http).
add_test(NAME server_webui_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/webui_e2e.sh
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-fake-server>)
set_tests_properties(server_webui_e2e PROPERTIES TIMEOUT 300 LABELS nosan)
add_test(NAME server_webui_http COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/webui_e2e.sh
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-fake-server>)
set_tests_properties(server_webui_http PROPERTIES TIMEOUT 120 ENVIRONMENT "WEBUI_BROWSER=0")
# Hardening (issue 50): each replays an attack and checks the fixed behaviour (seconds each).
#   server_harden_conn: 1,100 idle connections held while /health and a keyed completion answer
#     within 1 s; per-address limits; the header deadline; 300 concurrent streams.
#   server_harden_http: empty API keys refused; Host / Origin on a keyless loopback server;
#     duplicate Content-Length; libmicrohttpd's own errors; log flooding; JSON memory budget;
#     queue gauges back to 0; Retry-After; GET /v1/models/{id}.
#   server_harden_rss: /tokenize with_pieces of a 16 MB body within 10x its size in peak RSS
#     (the demo model; under ASan only the answers are checked).
add_test(NAME server_harden_conn COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/harden_conn.sh
         $<TARGET_FILE:mlxcel-fake-server>)
add_test(NAME server_harden_http COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/harden_http.sh
         $<TARGET_FILE:mlxcel-fake-server> $<TARGET_FILE:mlxcel>)
add_test(NAME server_harden_rss COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/harden_rss.sh $<TARGET_FILE:mlxcel>)
set_tests_properties(server_harden_conn server_harden_http server_harden_rss PROPERTIES TIMEOUT 240
  ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR};TEST_SANITIZED=$<BOOL:${MLXCEL_SANITIZE}>")
# MLXCEL_PROFILE_TTFT=1: the server logs each request's time-to-first-token breakdown (the
# prefill forwards the engine ran for it), streamed and not (the demo model, seconds).
add_test(NAME server_ttft_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/ttft_e2e.sh $<TARGET_FILE:mlxcel>)
set_tests_properties(server_ttft_e2e PROPERTIES TIMEOUT 120)
# mlxcel loadtest: length laws, the /metrics breakdown and failure causes against the fake
# backend (a few seconds); then a short run with length laws against the demo model, left out of
# the sanitizer build (label nosan: 2 s a step at -O0 there).
add_test(NAME loadtest_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/loadtest_e2e.sh
         $<TARGET_FILE:mlxcel-fake-server> $<TARGET_FILE:mlxcel> fake)
set_tests_properties(loadtest_e2e PROPERTIES TIMEOUT 120 ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME loadtest_demo_e2e COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/loadtest_e2e.sh
         $<TARGET_FILE:mlxcel-fake-server> $<TARGET_FILE:mlxcel> demo)
set_tests_properties(loadtest_demo_e2e PROPERTIES TIMEOUT 120 LABELS nosan
                     ENVIRONMENT "MLXCEL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
