# An interpreter host under the tracer: threads, a dict-heavy loop, regular
# expressions and an exit status of our own. Prints a deterministic result.
import re
import sys
import threading

def work(n, out, k):
    counts = {}
    for i in range(n):
        key = (i * 7919) % 1009
        counts[key] = counts.get(key, 0) + (i & 3)
    out[k] = sum(v * (key + 1) for key, v in counts.items()) % 1000003

results = [0] * 4
threads = [threading.Thread(target=work, args=(150000, results, k)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
words = re.findall(r"[a-f]+", " ".join(format(i * 2654435761 % 2**32, "x") for i in range(20000)))
print(results, len(words), max(words))
sys.exit(5)
