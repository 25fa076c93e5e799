// An HTTP/2 server with prior knowledge (h2c) for espalier's tests: answers
// `h2 METHOD AUTHORITY PATH body=BODY te=TE` with a trailer `x-trailer: yes`, `/len` with a
// Content-Length, `/healthz` 200 (503 once `/sick` was asked). Node's own http2 module.
//   node h2_backend.js HOST PORT
const http2 = require('http2');
const [host, port] = [process.argv[2], +process.argv[3]];
let sick = false;
// Up to 1000 fields a request (Node's own default is 128 pairs).
const server = http2.createServer({ maxHeaderListPairs: 1000 });
server.on('stream', (stream, headers) => {
  const chunks = [];
  stream.on('data', (d) => chunks.push(d));
  stream.on('end', () => {
    const path = headers[':path'];
    if (path === '/sick') sick = true;
    if (path === '/healthz') {
      stream.respond({ ':status': sick ? 503 : 200 });
      stream.end(sick ? 'sick' : 'ok');
      return;
    }
    if (path === '/len') {
      stream.respond({ ':status': 200, 'content-length': 5 });
      stream.end('fixed');
      return;
    }
    const body = Buffer.concat(chunks).toString();
    stream.respond({ ':status': 200, 'x-protocol': 'h2' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'x-trailer': 'yes' }));
    stream.end(`h2 ${headers[':method']} ${headers[':authority']} ${path} body=${body} te=${headers.te || '-'}\n`);
  });
});
server.listen(port, host, () => console.log('ready'));
