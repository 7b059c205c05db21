// Server-sent events read from a fetch() body (EventSource cannot POST or send headers).
//
// Yields the data of each event (its `data:` lines joined by "\n"), in order, as soon as the
// blank line that ends it has arrived. Comment lines (": ping", the server's keep-alive) and
// other fields are skipped. CR, LF and CRLF all end a line, also when a CRLF is split between
// two reads. An event cut off by the end of the stream is dropped (as EventSource does).
// Leaving the loop early (break) cancels the body, which closes the connection.
export async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let data = [];
  let done = false;
  try {
    while (!done) {
      const r = await reader.read();
      done = r.done;
      if (!done) buf += r.value;
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        // a lone CR at the end may be half of a CRLF: wait for the next read (if any)
        if (!m || (m[0] === '\r' && m.index === buf.length - 1 && !done)) break;
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (data.length) yield data.join('\n');
          data = [];
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line[5] === ' ' ? 6 : 5));
        }
      }
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
