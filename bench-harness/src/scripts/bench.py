# CPU-bound Python workload for bench-harness (written for this project).
# Usage: python3 bench.py train|eval SCALE
import math
import sys

# Only IEEE-exact float operations (+, *, /, sqrt): libm's pow picks
# CPU-specific code, which would make native and callgrind runs differ.

def nbody(steps):
    bodies = [[0.0, 0.0, 0.0, 0.01, 0.02, 0.0, 39.47],
              [4.84, -1.16, -0.10, 0.606, 2.81, -0.02, 0.037],
              [8.34, 4.12, -0.40, -1.01, 1.82, 0.008, 0.011],
              [12.89, -15.11, -0.22, 1.08, 0.868, -0.01, 0.0017],
              [15.37, -25.91, 0.17, 0.979, 0.594, -0.034, 0.002]]
    dt = 0.01
    for _ in range(steps):
        for i, a in enumerate(bodies):
            for b in bodies[i + 1:]:
                dx, dy, dz = a[0] - b[0], a[1] - b[1], a[2] - b[2]
                d2 = dx * dx + dy * dy + dz * dz
                mag = dt / (d2 * math.sqrt(d2))
                a[3] -= dx * b[6] * mag; a[4] -= dy * b[6] * mag; a[5] -= dz * b[6] * mag
                b[3] += dx * a[6] * mag; b[4] += dy * a[6] * mag; b[5] += dz * a[6] * mag
        for a in bodies:
            a[0] += dt * a[3]; a[1] += dt * a[4]; a[2] += dt * a[5]
    return sum(a[0] for a in bodies)

def text(n, seed):
    x, counts = seed, {}
    for i in range(n):
        x = (x * 1103515245 + 12345) % 2147483648
        w = "w%x" % (x % 1009)
        counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    joined = ",".join(k for k, _ in ranked)
    return len(joined.split(",")) + sum(1 for c in joined if c in "abc")

def sieve(n):
    flags = bytearray([1]) * (n + 1)
    flags[0:2] = b"\0\0"
    for i in range(2, math.isqrt(n) + 1):
        if flags[i]:
            flags[i * i::i] = bytearray(len(flags[i * i::i]))
    return sum(flags)

def classes(n):
    class Point:
        __slots__ = ("x", "y")
        def __init__(self, x, y):
            self.x, self.y = x, y
        def norm(self):
            return abs(self.x) + abs(self.y)
    return sum(Point(i % 17 - 8, i % 13 - 6).norm() for i in range(n))

mode = sys.argv[1] if len(sys.argv) > 1 else "eval"
scale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
if mode == "train":
    r = nbody(int(20000 * scale)) + text(int(150000 * scale), 7) + sieve(int(300000 * scale)) + classes(int(100000 * scale))
else:
    r = nbody(int(30000 * scale)) + text(int(200000 * scale), 11) + sieve(int(800000 * scale)) + classes(int(200000 * scale))
print(mode, r)
