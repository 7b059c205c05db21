// Markdown for model replies, rendered safely.
//
// The text a model writes is never parsed as HTML: parseMarkdown() turns it into a small tree
// ({t: 'p', inl: [...]}, ...) and renderMarkdown() builds DOM nodes from that tree with
// createElement (tag names from this file only) and text nodes. A reply holding
// "<script>" or "<img onerror=...>" therefore shows those characters. Links keep only
// http:, https: and mailto: targets.
//
// Covered: paragraphs (a single newline is a line break, as chat UIs do), ATX headings,
// fenced code blocks (an unclosed fence runs to the end: a reply still streaming), indented
// lists (ordered and not, nested), block quotes, horizontal rules, GFM tables, and inline
// code, **strong**, *emphasis*, ~~strike~~, [links](url) and backslash escapes.

// ==== Block parser ====
const FENCE_RE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING_RE = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const HR_RE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE_RE = /^ {0,3}> ?(.*)$/;
const LIST_RE = /^( {0,3})([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*))?$/;
const TABLE_SEP_RE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

const isBlank = (l) => /^[ \t]*$/.test(l);
const indentOf = (l) => {
  let n = 0;
  for (const ch of l) {
    if (ch === ' ') n++;
    else if (ch === '\t') n += 4 - (n % 4);
    else break;
  }
  return n;
};
// drops `n` columns of leading indentation (tabs count as up to 4)
const dedent = (l, n) => {
  let col = 0;
  let i = 0;
  while (i < l.length && col < n && (l[i] === ' ' || l[i] === '\t')) {
    col += l[i] === '\t' ? 4 - (col % 4) : 1;
    i++;
  }
  return l.slice(i);
};

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') { cur += '|'; i++; continue; }
    if (s[i] === '|') { cells.push(cur.trim()); cur = ''; continue; }
    cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

function isTableStart(lines, i) {
  return i + 1 < lines.length && lines[i].includes('|') && TABLE_SEP_RE.test(lines[i + 1]) &&
    lines[i + 1].includes('-') && splitRow(lines[i]).length === splitRow(lines[i + 1]).length;
}

// a line that ends a paragraph without a blank line before it
function startsBlock(lines, i) {
  const l = lines[i];
  return FENCE_RE.test(l) || HEADING_RE.test(l) || HR_RE.test(l) || QUOTE_RE.test(l) ||
    (LIST_RE.test(l) && !isBlank(l.replace(LIST_RE, '$4'))) || isTableStart(lines, i);
}

function parseList(lines, i) {
  const first = lines[i].match(LIST_RE);
  const ordered = /\d/.test(first[2]);
  // loose (blank lines between or inside items): items hold paragraphs; tight: bare text
  const block = { t: ordered ? 'ol' : 'ul', start: ordered ? parseInt(first[2], 10) : 1, items: [], loose: false };
  while (i < lines.length) {
    const m = lines[i].match(LIST_RE);
    if (!m || /\d/.test(m[2]) !== ordered) break;
    const gap = m[3] ? m[3].length : 1;
    const indent = m[1].length + m[2].length + (gap > 4 ? 1 : gap); // content column
    const item = [m[4] || ''];
    i++;
    while (i < lines.length) {
      const l = lines[i];
      if (isBlank(l)) { // a blank line continues the item only if indented text follows
        let j = i + 1;
        while (j < lines.length && isBlank(lines[j])) j++;
        if (j < lines.length && indentOf(lines[j]) >= indent) {
          for (; i < j; i++) item.push('');
          block.loose = true;
          continue;
        }
        break;
      }
      if (indentOf(l) >= indent) item.push(dedent(l, indent));
      else if (LIST_RE.test(l) || startsBlock(lines, i)) break;
      else item.push(l.trim()); // lazy continuation of the item's paragraph
      i++;
    }
    block.items.push(parseBlocks(item));
    while (i < lines.length && isBlank(lines[i])) { // blank lines between items of one list
      let j = i;
      while (j < lines.length && isBlank(lines[j])) j++;
      const n = j < lines.length ? lines[j].match(LIST_RE) : null;
      if (!n || /\d/.test(n[2]) !== ordered) return { block, next: i };
      block.loose = true;
      i = j;
    }
  }
  return { block, next: i };
}

function parseBlocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) { i++; continue; }
    let m = line.match(FENCE_RE);
    if (m) {
      const fence = m[1];
      const lead = indentOf(line);
      const body = [];
      i++;
      while (i < lines.length) {
        const l = lines[i];
        const t = l.trim();
        if (t.length >= fence.length && t[0] === fence[0] && t === fence[0].repeat(t.length)) { i++; break; }
        body.push(dedent(l, lead));
        i++;
      }
      out.push({ t: 'code', lang: m[2], text: body.join('\n') });
      continue;
    }
    if ((m = line.match(HEADING_RE))) {
      out.push({ t: 'h', level: m[1].length, inl: parseInline(m[2] || '') });
      i++;
      continue;
    }
    if (HR_RE.test(line)) { out.push({ t: 'hr' }); i++; continue; }
    if (QUOTE_RE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE_RE.test(lines[i])) body.push(lines[i++].match(QUOTE_RE)[1]);
      out.push({ t: 'quote', blocks: parseBlocks(body) });
      continue;
    }
    if ((m = line.match(LIST_RE)) && (m[4] || '').trim() !== '') {
      const r = parseList(lines, i);
      out.push(r.block);
      i = r.next;
      continue;
    }
    if (isTableStart(lines, i)) {
      const head = splitRow(line);
      const align = splitRow(lines[i + 1]).map((c) =>
        c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '');
      const rows = [];
      i += 2;
      while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|')) {
        const cells = splitRow(lines[i++]);
        rows.push(head.map((_, k) => parseInline(cells[k] || '')));
      }
      out.push({ t: 'table', head: head.map((c) => parseInline(c)), align, rows });
      continue;
    }
    const para = [line.trim()];
    i++;
    while (i < lines.length && !isBlank(lines[i]) && !startsBlock(lines, i)) para.push(lines[i++].trim());
    out.push({ t: 'p', inl: parseInline(para.join('\n')) });
  }
  return out;
}

export function parseMarkdown(src) {
  return parseBlocks(String(src).replace(/\r\n?/g, '\n').split('\n'));
}

// ==== Inline parser ====
const ESCAPABLE = '\\`*_{}[]()#+-.!|~<>';
const isSpace = (c) => c === undefined || /\s/.test(c);
const isWordChar = (c) => c !== undefined && /[\p{L}\p{N}]/u.test(c);

// closing delimiter `d` at or after `from`: not preceded by a space (and, for `_`, not inside a
// word); a single `*`/`_` must not be half of a double one
function findCloser(s, from, d) {
  for (let k = s.indexOf(d, from); k >= 0; k = s.indexOf(d, k + 1)) {
    if (isSpace(s[k - 1])) continue;
    if (d.length === 1 && (s[k + 1] === d || s[k - 1] === d)) continue;
    if (d[0] === '_' && isWordChar(s[k + d.length])) continue;
    return k;
  }
  return -1;
}

export function safeUrl(raw) {
  try {
    const u = new URL(raw, 'http://invalid.invalid/');
    if (u.host === 'invalid.invalid') return null; // relative: no target on this server
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  } catch {
    return null;
  }
}

export function parseInline(s) {
  const out = [];
  let text = '';
  const flush = () => { if (text) { out.push({ t: 'text', s: text }); text = ''; } };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === '\\' && i + 1 < s.length && ESCAPABLE.includes(s[i + 1])) { text += s[i + 1]; i += 2; continue; }
    if (c === '\n') { flush(); out.push({ t: 'br' }); i++; continue; }
    if (c === '`') {
      let n = 1;
      while (s[i + n] === '`') n++;
      const tick = '`'.repeat(n);
      let close = s.indexOf(tick, i + n);
      while (close >= 0 && s[close + n] === '`') { // a longer run is not the closer
        let e = close;
        while (s[e] === '`') e++;
        close = s.indexOf(tick, e);
      }
      if (close >= 0) {
        flush();
        let code = s.slice(i + n, close).replace(/\n/g, ' ');
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        out.push({ t: 'code', s: code });
        i = close + n;
        continue;
      }
      text += tick;
      i += n;
      continue;
    }
    if (c === '*' || c === '_' || (c === '~' && s[i + 1] === '~')) {
      const d = s[i + 1] === c ? c + c : c;
      const opens = !isSpace(s[i + d.length]) && !(c === '_' && isWordChar(s[i - 1]));
      const close = opens ? findCloser(s, i + d.length + 1, d) : -1;
      if (close > 0) {
        flush();
        const t = c === '~' ? 's' : d.length === 2 ? 'strong' : 'em';
        out.push({ t, c: parseInline(s.slice(i + d.length, close)) });
        i = close + d.length;
        continue;
      }
      text += d;
      i += d.length;
      continue;
    }
    if (c === '[') {
      const end = s.indexOf('](', i + 1);
      const close = end >= 0 ? s.indexOf(')', end + 2) : -1;
      if (end > i && close > end && !s.slice(i + 1, end).includes('[')) {
        const target = s.slice(end + 2, close).trim().split(/\s+/)[0].replace(/^<(.*)>$/, '$1');
        const href = safeUrl(target);
        flush();
        const label = parseInline(s.slice(i + 1, end));
        // an unsafe or relative target keeps its label as plain text, without a link
        out.push(href ? { t: 'a', href, c: label } : { t: 'span', c: label });
        i = close + 1;
        continue;
      }
    }
    text += c;
    i++;
  }
  flush();
  return out;
}

// ==== DOM builder ====
function inlineNodes(doc, nodes, parent) {
  for (const n of nodes) {
    if (n.t === 'text') { parent.appendChild(doc.createTextNode(n.s)); continue; }
    if (n.t === 'br') { parent.appendChild(doc.createElement('br')); continue; }
    if (n.t === 'code') {
      const el = doc.createElement('code');
      el.textContent = n.s;
      parent.appendChild(el);
      continue;
    }
    const el = doc.createElement(n.t); // strong, em, s, a, span: fixed names from parseInline
    if (n.t === 'a') {
      el.href = n.href;
      el.target = '_blank';
      el.rel = 'noopener noreferrer nofollow';
    }
    inlineNodes(doc, n.c, el);
    parent.appendChild(el);
  }
}

function codeBlock(doc, b) {
  const wrap = doc.createElement('div');
  wrap.className = 'code';
  const head = doc.createElement('div');
  head.className = 'code-head';
  const lang = doc.createElement('span');
  lang.textContent = b.lang || 'text';
  const copy = doc.createElement('button');
  copy.type = 'button';
  copy.className = 'copy';
  copy.textContent = 'Copy';
  head.append(lang, copy);
  const pre = doc.createElement('pre');
  const code = doc.createElement('code');
  code.textContent = b.text;
  pre.appendChild(code);
  wrap.append(head, pre);
  return wrap;
}

function blockNodes(doc, blocks, parent, tight) {
  for (const b of blocks) {
    let el;
    switch (b.t) {
    case 'p':
      if (tight) { inlineNodes(doc, b.inl, parent); continue; }
      el = doc.createElement('p');
      inlineNodes(doc, b.inl, el);
      break;
    case 'h':
      el = doc.createElement('h' + b.level);
      inlineNodes(doc, b.inl, el);
      break;
    case 'hr':
      el = doc.createElement('hr');
      break;
    case 'code':
      el = codeBlock(doc, b);
      break;
    case 'quote':
      el = doc.createElement('blockquote');
      blockNodes(doc, b.blocks, el, false);
      break;
    case 'ul': case 'ol':
      el = doc.createElement(b.t);
      if (b.t === 'ol' && b.start !== 1) el.start = b.start;
      for (const item of b.items) {
        const li = doc.createElement('li');
        blockNodes(doc, item, li, !b.loose);
        el.appendChild(li);
      }
      break;
    case 'table': {
      el = doc.createElement('div');
      el.className = 'table';
      const table = doc.createElement('table');
      const row = (cells, tag) => {
        const tr = doc.createElement('tr');
        cells.forEach((inl, k) => {
          const td = doc.createElement(tag);
          if (b.align[k]) td.className = 'align-' + b.align[k];
          inlineNodes(doc, inl, td);
          tr.appendChild(td);
        });
        return tr;
      };
      const thead = doc.createElement('thead');
      thead.appendChild(row(b.head, 'th'));
      const tbody = doc.createElement('tbody');
      for (const r of b.rows) tbody.appendChild(row(r, 'td'));
      table.append(thead, tbody);
      el.appendChild(table);
      break;
    }
    default:
      continue;
    }
    parent.appendChild(el);
  }
}

// A DocumentFragment holding `src` rendered; nothing in it comes from HTML parsing.
export function renderMarkdown(src, doc = document) {
  const frag = doc.createDocumentFragment();
  blockNodes(doc, parseMarkdown(src), frag, false);
  return frag;
}
