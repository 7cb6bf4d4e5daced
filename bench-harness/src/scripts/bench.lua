-- Compute-heavy Lua workload for bench-harness (written for this project).
-- Usage: lua bench.lua train|eval SCALE
-- The two modes run the same kernels with different sizes and mixes, so a
-- profile trained on one is evaluated on a different input.
local mode, scale = arg[1] or "eval", tonumber(arg[2] or "1")

local function fannkuch(n)
  local perm, perm1, count = {}, {}, {}
  local maxflips, checksum, r, sign = 0, 0, n, 1
  for i = 0, n - 1 do perm1[i] = i end
  while true do
    while r ~= 1 do count[r - 1] = r; r = r - 1 end
    for i = 0, n - 1 do perm[i] = perm1[i] end
    local flips, k = 0, perm[0]
    while k ~= 0 do
      local i, j = 0, k
      while i < j do perm[i], perm[j] = perm[j], perm[i]; i = i + 1; j = j - 1 end
      flips = flips + 1
      k = perm[0]
    end
    if flips > maxflips then maxflips = flips end
    checksum = checksum + sign * flips
    sign = -sign
    while true do
      if r == n then return checksum, maxflips end
      local p0 = perm1[0]
      for i = 0, r - 1 do perm1[i] = perm1[i + 1] end
      perm1[r] = p0
      count[r] = count[r] - 1
      if count[r] > 0 then break end
      r = r + 1
    end
  end
end

local function spectral(n)
  local function a(i, j) local ij = i + j - 1; return 1.0 / (ij * (ij - 1) * 0.5 + i) end
  local function av(x, y, N) for i = 1, N do local s = 0 for j = 1, N do s = s + a(i, j) * x[j] end y[i] = s end end
  local function atv(x, y, N) for i = 1, N do local s = 0 for j = 1, N do s = s + a(j, i) * x[j] end y[i] = s end end
  local u, v, t = {}, {}, {}
  for i = 1, n do u[i] = 1 end
  for _ = 1, 10 do av(u, t, n); atv(t, v, n); av(v, t, n); atv(t, u, n) end
  local vbv, vv = 0, 0
  for i = 1, n do vbv = vbv + u[i] * v[i]; vv = vv + v[i] * v[i] end
  return math.sqrt(vbv / vv)
end

local function words(n, seed)
  local x, counts, parts = seed, {}, {}
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    local w = string.format("w%x", x % 997)
    counts[w] = (counts[w] or 0) + 1
    if i % 50 == 0 then parts[#parts + 1] = w:upper() .. tostring(i) end
  end
  local keys = {}
  for k in pairs(counts) do keys[#keys + 1] = k end
  table.sort(keys, function(p, q) if counts[p] ~= counts[q] then return counts[p] > counts[q] end return p < q end)
  local text = table.concat(parts, ",")
  local found = 0
  for _ in text:gmatch("W%x+") do found = found + 1 end
  return #keys + found
end

local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local total = 0
if mode == "train" then
  total = total + fannkuch(scale >= 1 and 8 or 7)
  total = total + spectral(math.floor(60 * scale))
  total = total + words(math.floor(60000 * scale), 7)
  total = total + fib(18 + math.floor(math.min(scale, 4)))
else
  total = total + fannkuch(scale >= 1 and 9 or 7)
  total = total + spectral(math.floor(90 * scale))
  total = total + words(math.floor(100000 * scale), 11)
  total = total + fib(20 + math.floor(math.min(scale, 4)))
end
print(mode, total)
