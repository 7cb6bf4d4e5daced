// A JIT host under the tracer: V8 compiles the hot loop, a worker thread
// runs beside the main one, a timer fires, and the exit status is ours.
// Prints a deterministic result.
const { Worker, isMainThread, parentPort } = require('worker_threads');

function work(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s = (s + (i % 7) * (i & 3)) % 1000003;
  return s;
}

if (isMainThread) {
  const worker = new Worker(__filename);
  worker.on('message', (w) => {
    setTimeout(() => {
      const words = [];
      for (let i = 0; i < 20000; i++) words.push((i * 7919 % 10007).toString(36));
      words.sort();
      console.log(`main ${work(20e6)} worker ${w} words ${words[0]} ${words[words.length - 1]}`);
      process.exitCode = 4;
    }, 10);
  });
} else {
  parentPort.postMessage(work(10e6));
}
