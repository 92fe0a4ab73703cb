// An OpenAI-compatible model for the console's browser tests: every POST
// gets a streamed answer ("stub answer"), then `[DONE]`. It listens on a free
// port of 127.0.0.1 and prints `listening PORT` once it does.
import { createServer } from 'node:http';

const chunk = (delta, finish) => JSON.stringify({
  id: 'chatcmpl-stub', object: 'chat.completion.chunk', created: 1, model: 'stub',
  choices: [{ index: 0, delta, finish_reason: finish }],
});

const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(`data: ${chunk({ content: 'stub answer' }, null)}\n\n`);
    res.write(`data: ${chunk({}, 'stop')}\n\n`);
    res.end('data: [DONE]\n\n');
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
