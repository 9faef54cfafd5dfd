-- Seen-set check-and-add, prepended to the frontier's scripts after `DF` (the
-- layout a NEW seen-set gets, from the worker's settings) and seen_bloom.lua.
--
-- seen_add(fp) returns 1 when the 16-byte fingerprint is new (and records it),
-- 0 when it was seen; seen_has(fp) only checks. ARGV[1] is the key prefix "P:".
-- A script that calls seen_add must call seen_flush() once at its end: the fill
-- and the `seen` counter are kept in Lua and written back then, in one go.
--
-- <P>dupefilter is a HASH holding the layout the seen-set was created with
-- (`kind`, sizes) and its fill; that stored layout wins over DF, so workers with
-- different settings always agree. An old-style SET at <P>dupefilter is still
-- served as a plain SET of fingerprints.
--
-- kind 'exact': fingerprints sharded over small HASHes <P>dupefilter:<g>:<b>
-- that Redis keeps ziplist-encoded (field = fingerprint bytes 5..16, value '').
-- Generation g has 2^min(bits0+g, max_bits) buckets, b = the top bits of the
-- fingerprint's first 4 bytes, and takes `fill` entries per bucket on average;
-- when it is full, generation g+1 starts. A new fingerprint goes to the newest
-- generation after a miss in every older one, so each is stored once.
-- With a TTL, every key of the seen-set expires when <P>dupefilter does
-- (PEXPIREAT at the same millisecond).

local L = nil -- the stored layout, read once per script call

local function seen_layout()
  if L then return L end
  local meta = ARGV[1] .. 'dupefilter'
  L = {prefix = ARGV[1], meta = meta, expire_at = false, added = 0, heads = {}}
  local t = redis.call('TYPE', meta)['ok']
  if t == 'set' then
    L.kind = 'set'
    return L
  end
  if t == 'none' then
    local args = {'HSET', meta, 'n', 0, 'gen', 0}
    for _, name in ipairs(DF_FIELDS) do
      args[#args + 1] = name
      args[#args + 1] = DF[name]
    end
    redis.call(unpack(args))
    if DF.ttl > 0 then redis.call('EXPIRE', meta, DF.ttl) end
  elseif t ~= 'hash' then
    error({err = 'WRONGTYPE ' .. meta .. ' is a ' .. t .. ', not a distscraper seen-set'})
  end
  local flat = redis.call('HGETALL', meta)
  for i = 1, #flat, 2 do
    L[flat[i]] = tonumber(flat[i + 1]) or flat[i + 1]
  end
  local pttl = redis.call('PTTL', meta)
  if pttl > 0 then
    local now = redis.call('TIME')
    L.expire_at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + pttl
  end
  if t == 'none' and L.kind == 'bloom' then bloom_create(L) end
  return L
end

-- The bucket's key; the names' common part is built once per generation and the
-- bucket number formatted as an integer (cheaper than Lua's %.14g).
local function exact_bucket(g, x)
  local head = L.heads[g]
  if not head then
    head = {L.prefix .. 'dupefilter:' .. g .. ':', 2 ^ (32 - math.min(L.bits0 + g, L.max_bits))}
    L.heads[g] = head
  end
  return head[1] .. string.format('%d', math.floor(x / head[2]))
end

local function exact_has(fp)
  local x = struct.unpack('>I4', fp)
  local field = string.sub(fp, 5)
  for g = 0, L.gen do
    if redis.call('HEXISTS', exact_bucket(g, x), field) == 1 then return 1 end
  end
  return 0
end

local function exact_add(fp)
  local x = struct.unpack('>I4', fp)
  local field = string.sub(fp, 5)
  for g = 0, L.gen - 1 do
    if redis.call('HEXISTS', exact_bucket(g, x), field) == 1 then return 0 end
  end
  local k = exact_bucket(L.gen, x)
  if redis.call('HSETNX', k, field, '') == 0 then return 0 end
  if L.expire_at and redis.call('HLEN', k) == 1 then redis.call('PEXPIREAT', k, L.expire_at) end
  L.n = L.n + 1
  if L.n >= 2 ^ math.min(L.bits0 + L.gen, L.max_bits) * L.fill then
    L.gen, L.n = L.gen + 1, 0
  end
  return 1
end

local function seen_has(fp)
  seen_layout()
  if L.kind == 'exact' then return exact_has(fp) end
  if L.kind == 'bloom' then return bloom_has(fp, L) end
  if L.kind == 'set' then return redis.call('SISMEMBER', L.meta, fp) end
  error({err = 'ERR unknown seen-set kind in ' .. L.meta .. ': ' .. tostring(L.kind)})
end

local function seen_add(fp)
  seen_layout()
  local new
  if L.kind == 'exact' then
    new = exact_add(fp)
  elseif L.kind == 'bloom' then
    new = bloom_add(fp, L)
  elseif L.kind == 'set' then
    new = redis.call('SADD', L.meta, fp)
    if DF.ttl > 0 and new == 1 and redis.call('TTL', L.meta) == -1 then
      redis.call('EXPIRE', L.meta, DF.ttl)
    end
  else
    error({err = 'ERR unknown seen-set kind in ' .. L.meta .. ': ' .. tostring(L.kind)})
  end
  if new == 1 then L.added = L.added + 1 end
  return new
end

-- Write back what this script's seen_add calls changed: the fill of the
-- seen-set (and its generation) and the crawl's `seen` counter.
local function seen_flush()
  if not L or L.added == 0 then return end
  if L.kind == 'exact' then
    redis.call('HSET', L.meta, 'gen', L.gen, 'n', L.n)
  elseif L.kind == 'bloom' then
    redis.call('HINCRBY', L.meta, 'n', L.added)
  end
  redis.call('HINCRBY', L.prefix .. 'stats', 'seen', L.added)
  L.added = 0
end
