#!/usr/bin/env bash
# Device call: regenerate the llama_dynamic golden fixture (fresh model per run) and make the
# transformers references for the quantized-model parity inputs. CPU only, about a minute.
set -u
python3 tools/reference/make_fixtures.py /tmp/fx --only llama_dynamic > /tmp/fx.log 2>&1; echo "fixtures rc=$?"
mkdir -p /tmp/qp
for d in tests/fixtures/quant_parity/*/; do
  n=$(basename "$d")
  python3 tools/reference/quant_parity.py "$d/deq" "/tmp/qp/$n" >> /tmp/qp.log 2>&1 || echo "FAIL $n"
done
sha256sum /tmp/fx/tests/fixtures/models/llama_dynamic/model.safetensors tests/fixtures/models/llama_dynamic/model.safetensors
tar czf "$OUT/fixtures2.tgz" -C /tmp fx/tests/fixtures/models/llama_dynamic qp
cp /tmp/fx.log /tmp/qp.log "$OUT/"
tail -3 /tmp/fx.log; tail -5 /tmp/qp.log
