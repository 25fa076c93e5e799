// A Node app for espalier: behind the proxy it listens on the loopback port espalier gives it
// in PORT (or on the unix socket in ESPALIER_SOCKET, with `upstream = "unix"`); started by
// socket activation (LISTEN_FDS) it accepts on fd 3 instead. Routes: / (who answered), /healthz, /upload (counts a streamed body), /download?mb=N
// (streams N MiB), /slow?ms=N (answers late), /ws (WebSocket echo, no packages needed).
'use strict';
const http = require('http');
const crypto = require('crypto');

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  res.setHeader('X-App-Pid', String(process.pid));
  switch (url.pathname) {
    case '/healthz':
      res.end('ok\n');
      return;
    case '/upload': {
      let n = 0;
      req.on('data', (c) => { n += c.length; });
      req.on('end', () => res.end(`received ${n} bytes\n`));
      return;
    }
    case '/download': {
      let left = parseInt(url.searchParams.get('mb') || '1', 10) * 16;
      const chunk = Buffer.alloc(65536, 'x');
      res.setHeader('Content-Type', 'application/octet-stream');
      const pump = () => {
        while (left > 0) {
          left--;
          if (!res.write(chunk)) { res.once('drain', pump); return; }
        }
        res.end();
      };
      pump();
      return;
    }
    case '/slow':
      setTimeout(() => res.end('late\n'), parseInt(url.searchParams.get('ms') || '1000', 10));
      return;
    default:
      res.end(`hello from node pid ${process.pid}, espalier worker ${process.env.ESPALIER_WORKER}, ` +
        `node ${process.env.ESPALIER_NODE}, forwarded for ${req.headers['x-forwarded-for']}\n`);
  }
});

// WebSocket echo (RFC 6455): text frames up to 125 bytes, enough to show the tunnel.
server.on('upgrade', (req, socket) => {
  const key = req.headers['sec-websocket-key'];
  const accept = crypto.createHash('sha1')
    .update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n' +
    `Connection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  socket.on('data', (frame) => {
    const opcode = frame[0] & 0x0f;
    const len = frame[1] & 0x7f;
    if (opcode === 8 || len > 125) { socket.end(); return; }
    const mask = frame.subarray(2, 6);
    const payload = Buffer.from(frame.subarray(6, 6 + len).map((b, i) => b ^ mask[i % 4]));
    socket.write(Buffer.concat([Buffer.from([0x81, payload.length]), payload]));
  });
});

server.keepAliveTimeout = 5000;
if (process.env.LISTEN_FDS && process.env.LISTEN_PID === String(process.pid)) {
  server.listen({ fd: 3 });
} else if (process.env.ESPALIER_SOCKET) {
  server.listen(process.env.ESPALIER_SOCKET);
} else {
  server.listen(parseInt(process.env.PORT, 10), '127.0.0.1');
}
process.on('SIGTERM', () => server.close(() => process.exit(0)));
