-- Bloom seen-set (kind 'bloom'), used by seen_set.lua's seen_add/seen_has.
--
-- `keys` strings <P>dupefilter:bloom:<i> of `key_bits` bits each (m bits in
-- all). bloom_create() writes them zero-filled in one SET each, so Redis
-- allocates exactly key_bits/8 + 16 bytes (a power of two) per key; SETBIT
-- would grow a string greedily and waste up to half of it.
-- A fingerprint's k bits all lie in one key, i = (bytes 13..16) mod keys, so
-- one BITFIELD call reads or sets them. Within the key, bit j (0 <= j < k) is
-- (h1 + j*h2) mod key_bits (double hashing), h1 and h2 being the 48-bit numbers
-- in bytes 1..6 and 7..12. Every value stays below 2^53 (k <= 31), so Lua's
-- doubles compute it exactly. SET returns the old bits: new iff one was 0.

local function bloom_names(B)
  if not B.names then
    B.names = {}
    for i = 0, B.keys - 1 do B.names[i] = B.prefix .. 'dupefilter:bloom:' .. i end
  end
  return B.names
end

-- Called when <P>dupefilter is created: (re)write every key of the filter.
local function bloom_create(B)
  local zeros = string.rep('\0', B.key_bits / 8)
  for _, name in pairs(bloom_names(B)) do
    redis.call('SET', name, zeros)
    if B.expire_at then redis.call('PEXPIREAT', name, B.expire_at) end
  end
end

local function bloom_args(fp, B, op)
  local a, b, c, d, e = struct.unpack('>I4I2I4I2I4', fp)
  local h1, h2 = a * 65536 + b, c * 65536 + d
  local args = {'BITFIELD', bloom_names(B)[math.fmod(e, B.keys)]}
  for j = 0, B.k - 1 do
    local n = #args
    args[n + 1], args[n + 2], args[n + 3] = op, 'u1', math.fmod(h1 + j * h2, B.key_bits)
    if op == 'SET' then args[n + 4] = 1 end
  end
  return args
end

local function bloom_add(fp, B)
  for _, old in ipairs(redis.call(unpack(bloom_args(fp, B, 'SET')))) do
    if old == 0 then return 1 end
  end
  return 0
end

local function bloom_has(fp, B)
  for _, bit in ipairs(redis.call(unpack(bloom_args(fp, B, 'GET')))) do
    if bit == 0 then return 0 end
  end
  return 1
end
