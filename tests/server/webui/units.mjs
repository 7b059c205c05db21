// The page's DOM-free parts under node (run by tests/server/webui_e2e.sh before the browser):
// the markdown parser's tree, link filtering, <think> splitting, the request body, the SSE
// reader and the reply statistics. The DOM side is checked in the browser (webui_e2e.mjs).
import assert from 'node:assert/strict';
import { parseMarkdown, safeUrl } from '../../../webui/markdown.js';
import { replyStats, requestBody, splitThink } from '../../../webui/chat.js';
import { sseEvents } from '../../../webui/sse.js';

let n = 0;
const t = (name, fn) => {
  try {
    fn();
    n++;
  } catch (e) {
    console.log(`FAIL: ${name}\n${e.message}`);
    process.exitCode = 1;
  }
};
const text = (inl) => inl.map((x) => (x.t === 'text' || x.t === 'code' ? x.s : x.t === 'br' ? '\n' : text(x.c))).join('');

// ==== Markdown ====
t('paragraphs and line breaks', () => {
  const b = parseMarkdown('one\ntwo\n\nthree');
  assert.deepEqual(b.map((x) => x.t), ['p', 'p']);
  assert.equal(text(b[0].inl), 'one\ntwo');
});
t('html stays text', () => {
  const b = parseMarkdown('<script>alert(1)</script> <img src=x onerror=y>');
  assert.equal(b.length, 1);
  assert.deepEqual(b[0].inl, [{ t: 'text', s: '<script>alert(1)</script> <img src=x onerror=y>' }]);
});
t('fences: closed, unclosed (still streaming), longer closer, ~~~', () => {
  assert.deepEqual(parseMarkdown('```js\nlet a = "<b>";\n```\nafter'),
    [{ t: 'code', lang: 'js', text: 'let a = "<b>";' }, { t: 'p', inl: [{ t: 'text', s: 'after' }] }]);
  assert.deepEqual(parseMarkdown('```py\nprint(1)\n'), [{ t: 'code', lang: 'py', text: 'print(1)\n' }]);
  assert.equal(parseMarkdown('````\n```\n````')[0].text, '```');
  assert.equal(parseMarkdown('~~~\nx\n~~~')[0].text, 'x');
});
t('headings, rules, quotes', () => {
  const b = parseMarkdown('## Title ##\n---\n> quoted\n> more\n#nottitle');
  assert.deepEqual(b.map((x) => x.t), ['h', 'hr', 'quote', 'p']);
  assert.equal(b[0].level, 2);
  assert.equal(text(b[0].inl), 'Title');
  assert.equal(text(b[2].blocks[0].inl), 'quoted\nmore');
});
t('lists: ordered start, nesting, tight and loose', () => {
  const [ol] = parseMarkdown('3. a\n4. b\n   - c\n   - d');
  assert.equal(ol.t, 'ol');
  assert.equal(ol.start, 3);
  assert.equal(ol.loose, false);
  assert.deepEqual(ol.items[1].map((x) => x.t), ['p', 'ul']);
  assert.equal(ol.items[1][1].items.length, 2);
  const [ul] = parseMarkdown('- a\n\n- b');
  assert.equal(ul.items.length, 2);
  assert.equal(ul.loose, true);
  assert.deepEqual(parseMarkdown('1.5 million').map((x) => x.t), ['p']);
  assert.deepEqual(parseMarkdown('text\n- item').map((x) => x.t), ['p', 'ul']);
});
t('tables', () => {
  const [tb] = parseMarkdown('| a | b |\n|:--|--:|\n| 1 | 2 \\| 3 |');
  assert.equal(tb.t, 'table');
  assert.deepEqual(tb.align, ['left', 'right']);
  assert.equal(text(tb.rows[0][1]), '2 | 3');
  assert.deepEqual(parseMarkdown('a | b\nno separator').map((x) => x.t), ['p']);
});
t('inline: strong, em, strike, code, escapes, snake_case', () => {
  const inl = parseMarkdown('**b** *i* ~~s~~ `x*y` \\*no\\* snake_case_name 2 * 3 * 4')[0].inl;
  assert.deepEqual(inl.filter((x) => x.t !== 'text').map((x) => x.t), ['strong', 'em', 's', 'code']);
  assert.equal(text(inl), 'b i s x*y *no* snake_case_name 2 * 3 * 4');
  assert.equal(parseMarkdown('``a ` b``')[0].inl[0].s, 'a ` b');
  assert.equal(text(parseMarkdown('**never closed')[0].inl), '**never closed');
});
t('links: http(s) and mailto only', () => {
  const inl = parseMarkdown('[ok](https://e.com/a) [js](javascript:alert(1)) [rel](/props) [m](mailto:a@b.c)')[0].inl;
  assert.deepEqual(inl.filter((x) => x.t === 'a').map((x) => x.href), ['https://e.com/a', 'mailto:a@b.c']);
  assert.equal(inl.filter((x) => x.t === 'span').length, 2);
  assert.equal(safeUrl('JaVaScRiPt:alert(1)'), null);
  assert.equal(safeUrl('data:text/html,<script>'), null);
});

// ==== Chat ====
t('think: split, still thinking, template-opened, none', () => {
  assert.deepEqual(splitThink('<think>hm</think>\n\nAnswer'), { reasoning: 'hm', answer: 'Answer', thinking: false });
  assert.deepEqual(splitThink(' <think>still'), { reasoning: 'still', answer: '', thinking: true });
  assert.deepEqual(splitThink('hm</think>Answer'), { reasoning: 'hm', answer: 'Answer', thinking: false });
  assert.deepEqual(splitThink('plain'), { reasoning: '', answer: 'plain', thinking: false });
});
t('request body: system prompt, set fields only, no reasoning sent back, failed turn left out', () => {
  const conv = { messages: [
    { role: 'user', content: 'q1' }, { role: 'assistant', content: '<think>r</think>a1' },
    { role: 'user', content: 'q2' }, { role: 'assistant', content: '', error: '500: boom' },
    { role: 'user', content: 'q3' }] };
  const b = requestBody(conv, { system: 'sys', temperature: 0, top_p: null, max_tokens: 64 }, 'm');
  assert.deepEqual(b.messages, [{ role: 'system', content: 'sys' }, { role: 'user', content: 'q1' },
    { role: 'assistant', content: 'a1' }, { role: 'user', content: 'q3' }]); // q2's turn failed
  assert.equal(b.temperature, 0);
  assert.equal('top_p' in b, false);
  assert.equal(b.max_tokens, 64);
  assert.equal(b.model, 'm');
  assert.deepEqual(b.stream_options, { include_usage: true });
});
t('reply statistics', () => {
  assert.deepEqual(replyStats({ chunks: 11, tFirst: 0, tLast: 1000, usage: null, timings: null, finish: 'stop' }),
    { tokens: 11, tps: 10, prompt: null, finish: 'stop' });
  const s = replyStats({ chunks: 3, tFirst: 0, tLast: 1, usage: { completion_tokens: 5, prompt_tokens: 9 },
    timings: { predicted_per_second: 42.04 }, stopped: true });
  assert.deepEqual(s, { tokens: 5, tps: 42, prompt: 9, finish: 'stopped' });
});

// ==== SSE (async) ====
const stream = (parts) => new ReadableStream({
  start(c) { for (const p of parts) c.enqueue(new TextEncoder().encode(p)); c.close(); },
});
const events = async (parts) => { const out = []; for await (const d of sseEvents(stream(parts))) out.push(d); return out; };
try {
  assert.deepEqual(await events(['data: {"a":1}\n\n: ping\n\ndata: x\ndata: y\n\n']), ['{"a":1}', 'x\ny']);
  assert.deepEqual(await events(['data: a\r', '\n\r', '\ndata:b\r\r']), ['a', 'b']); // CRLF split across reads
  assert.deepEqual(await events(['event: e\nid: 1\ndata: z\n\n', 'data: cut']), ['z']); // cut event dropped
  assert.deepEqual(await events(['da', 'ta: [DO', 'NE]\n', '\n']), ['[DONE]']);
  n++;
} catch (e) {
  console.log(`FAIL: sse\n${e.message}`);
  process.exitCode = 1;
}
console.log(`units.mjs: ${n} groups passed${process.exitCode ? ', some failed' : ''}`);
