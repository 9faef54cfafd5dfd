-- One atomic round trip between a worker and the shared frontier.
--
-- In this order: apply the worker's buffered changes (new requests through the
-- dupefilter, then acks, retries, dead letters, quarantines, returned leases,
-- slot releases, seed bookkeeping, throttle updates, counters); return expired
-- leases, due retries and stale seed reads to the queue; lease up to max_pop
-- requests from domains whose politeness slot is free, at most this worker's
-- share of each domain's slots; read up to seed_n seeds.
--
-- The dupefilter's `seen_add(fp)` (1 = new, 0 = seen) is prepended by Python.
-- Redis's own cost is mostly per redis.call and per number formatted, so the
-- script keeps what it can in Lua for the length of one call: the queue
-- sequence, the counters and the seen-set fill are written back once at the
-- end; the throttle settings and each domain's place in the schedule are read
-- at most once.
-- Every deadline and politeness time uses the Redis server's clock, so workers
-- on machines whose clocks disagree still agree on leases and delays.

local P = ARGV[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local LEASE = tonumber(ARGV[2])
-- ARGV[3] is the node id (kept for the argument layout; unused)
local MAX_POP = tonumber(ARGV[4])
local DELAY = tonumber(ARGV[5])
local CONC = tonumber(ARGV[6])
local SLOT_TTL = tonumber(ARGV[7])
local REAP = tonumber(ARGV[8])
local SEED_N = tonumber(ARGV[9])
local RECOVER = tonumber(ARGV[10])
local PEN_BASE = tonumber(ARGV[11])
local PEN_MAX = tonumber(ARGV[12])
local pos = 13

local K_READY = P .. 'domains:ready'
local K_WAIT = P .. 'domains:wait'
local K_INF = P .. 'inflight'
local K_DEL = P .. 'delayed'
local K_SEQ = P .. 'seq'
local K_THR = P .. 'throttle'
local K_STATS = P .. 'stats'
local K_QUAR = P .. 'quarantine'
local K_SEEDS = P .. 'start_urls'
local K_SEEDS_PENDING = P .. 'start_urls:pending'
local TWO32 = 4294967296

local function arg()
  local v = ARGV[pos]
  pos = pos + 1
  return v
end

local seq = nil -- the last sequence number handed out (K_SEQ, written back at the end)
local function next_seq()
  if not seq then seq = tonumber(redis.call('GET', K_SEQ)) or 0 end
  seq = seq + 1
  return seq % TWO32
end

local bumps = {} -- K_STATS increments, written back at the end
local function bump(field, n)
  bumps[field] = (bumps[field] or 0) + n
end

-- No domain has a crawl delay, penalty or next-request time: skip their lookups.
local thr_empty = redis.call('EXISTS', K_THR) == 0
local delays = {} -- domain -> its delay, computed at most once per call
local function thr_hset(...)
  redis.call('HSET', K_THR, ...)
  thr_empty = false
end

-- An integer as Redis argument text. Redis would format a Lua number with %.17g,
-- which costs several times more; every hot-path score goes through int().
local function int(n)
  return string.format('%d', n)
end

local NOW, LEASE_END, SLOT_END = int(now), int(now + LEASE), int(now + SLOT_TTL)

local function band(score)
  return math.floor(score / TWO32)
end

local function domain_delay(d)
  if thr_empty then return DELAY end
  if delays[d] then return delays[d] end
  local v = redis.call('HMGET', K_THR, d .. '|crawl_delay', d .. '|penalty', d .. '|penalty_at')
  local delay = DELAY
  local cd = tonumber(v[1])
  if cd and cd > delay then delay = cd end
  local pen = tonumber(v[2])
  if pen and pen > 0 then
    if now - (tonumber(v[3]) or 0) > RECOVER then
      pen = math.floor(pen / 2)
      if pen < 10 then
        redis.call('HDEL', K_THR, d .. '|penalty', d .. '|penalty_at')
        pen = 0
      else
        thr_hset(d .. '|penalty', pen, d .. '|penalty_at', now)
      end
    end
    if pen > delay then delay = pen end
  end
  delays[d] = delay
  return delay
end

-- domain -> its place in the schedule as far as this call knows: the band it is
-- ready under, or 'wait'. Sections that move a domain forget it.
local sched = {}

-- A domain got a request with queue score `score`: make sure it is scheduled,
-- ready under the best band it has (a domain is in READY or WAIT, never both).
local function schedule_domain(d, score)
  local b = band(score)
  local known = sched[d]
  if known == nil then
    local rs = redis.call('ZSCORE', K_READY, d)
    if rs then
      known = band(tonumber(rs))
    else
      local t = 0
      if not thr_empty then t = tonumber(redis.call('HGET', K_THR, d .. '|next')) or 0 end
      if t < now then t = now end
      redis.call('ZADD', K_WAIT, 'NX', t, d)
      known = 'wait'
    end
  end
  if known ~= 'wait' and b < known then
    redis.call('ZADD', K_READY, int(b * TWO32 + next_seq()), d)
    known = b
  end
  sched[d] = known
end

local function enqueue(d, score, payload)
  redis.call('ZADD', P .. 'requests:' .. d, int(score), payload)
  schedule_domain(d, score)
end

local function quarantine(entry, reason)
  redis.call('LPUSH', K_QUAR, cjson.encode({entry = entry, reason = reason, at = now / 1000}))
  bump('quarantined', 1)
end

-- Put a payload back in its domain queue, at the front of its priority band.
local function requeue(payload)
  local ok, obj = pcall(cjson.decode, payload)
  if not ok or type(obj) ~= 'table' or type(obj['d']) ~= 'string' then
    quarantine(payload, 'undecodable queue entry')
    return
  end
  local p = tonumber(obj['p'] or 0) or 0
  redis.call('ZREM', P .. 'slots:' .. obj['d'], payload)
  enqueue(obj['d'], -p * TWO32, payload)
end

-- Remove a leased payload: from the in-flight set, or from the queue if its
-- lease had already expired and it went back there.
local function unlease(payload, d)
  local r = redis.call('ZREM', K_INF, payload)
  if r == 0 and d ~= '' then
    r = redis.call('ZREM', P .. 'requests:' .. d, payload)
  end
  return r
end

-- 1. new requests
local new, dups = 0, 0
-- Two arguments each: the fingerprint, and '<force 0|1><base score> <domain>\n<payload>',
-- which only a request that goes into the queue needs to unpack.
for _ = 1, tonumber(arg()) do
  local fp, row = arg(), arg()
  if seen_add(fp) == 1 or string.byte(row, 1) == 49 then
    local base, d, at = string.match(row, '^.(%-?%d+) ([^\n]*)\n()')
    enqueue(d, tonumber(base) + next_seq(), string.sub(row, at))
    new = new + 1
  else
    dups = dups + 1
  end
end
bump('enqueued', new)
bump('duplicates', dups)

-- 2. acks: the request's outputs are durable
local acked = 0
for _ = 1, tonumber(arg()) do
  local payload, d = arg(), arg()
  unlease(payload, d)
  acked = acked + 1
end
bump('done', acked)

-- 3. retries: lease -> delayed
for _ = 1, tonumber(arg()) do
  local old, new_payload, due, d = arg(), arg(), arg(), arg()
  if unlease(old, d) == 1 then
    redis.call('ZADD', K_DEL, tonumber(due), new_payload)
    bump('retries', 1)
  end
end

-- 4. dead letters: lease -> dead
for _ = 1, tonumber(arg()) do
  local old, d, fp, record = arg(), arg(), arg(), arg()
  if unlease(old, d) == 1 then
    redis.call('HSET', P .. 'dead', fp, record)
    bump('dead', 1)
  end
end

-- 5. quarantine: lease -> quarantine
for _ = 1, tonumber(arg()) do
  local payload, reason = arg(), arg()
  redis.call('ZREM', K_INF, payload)
  quarantine(payload, reason)
end

-- 6. leases given back (graceful stop): lease -> front of queue
for _ = 1, tonumber(arg()) do
  local payload = arg()
  if redis.call('ZREM', K_INF, payload) == 1 then requeue(payload) end
end

-- 7. download slots released
for _ = 1, tonumber(arg()) do
  local d, token = arg(), arg()
  redis.call('ZREM', P .. 'slots:' .. d, token)
  if DELAY == 0 and domain_delay(d) == 0 then redis.call('ZADD', K_WAIT, 'XX', 'LT', NOW, d) end
end

-- 8. seeds: read ones that are now in the queue, rejected ones
for _ = 1, tonumber(arg()) do
  redis.call('ZREM', K_SEEDS_PENDING, arg())
end
for _ = 1, tonumber(arg()) do
  redis.call('LPUSH', P .. 'start_urls:invalid', arg())
  bump('seeds_invalid', 1)
end

-- 9. throttle updates: 429/503 slow-downs, robots.txt crawl delays
for _ = 1, tonumber(arg()) do
  local d = arg()
  sched[d], delays[d] = nil, nil
  local cur = tonumber(redis.call('HGET', K_THR, d .. '|penalty')) or 0
  local pen = math.min(math.max(cur * 2, PEN_BASE, DELAY * 2), PEN_MAX)
  thr_hset(d .. '|penalty', pen, d .. '|penalty_at', now, d .. '|next', now + pen)
  if redis.call('ZREM', K_READY, d) == 1 then
    redis.call('ZADD', K_WAIT, now + pen, d)
  else
    redis.call('ZADD', K_WAIT, 'XX', 'GT', now + pen, d)
  end
  bump('slowdowns', 1)
end
for _ = 1, tonumber(arg()) do
  local d, ms = arg(), tonumber(arg())
  sched[d], delays[d] = nil, nil
  local old = tonumber(redis.call('HGET', K_THR, d .. '|crawl_delay')) or 0
  thr_hset(d .. '|crawl_delay', ms)
  -- The domain's last request was spaced by a shorter delay (this one was not known yet):
  -- its next request waits the new delay from now.
  local t = now + ms
  if ms > old and t > (tonumber(redis.call('HGET', K_THR, d .. '|next')) or 0) then
    thr_hset(d .. '|next', t)
    if redis.call('ZREM', K_READY, d) == 1 then
      redis.call('ZADD', K_WAIT, t, d)
    else
      redis.call('ZADD', K_WAIT, 'XX', 'GT', t, d)
    end
  end
end

-- 10. counters
for _ = 1, tonumber(arg()) do
  local field, n = arg(), arg()
  bump(field, tonumber(n))
end

-- 10b. this worker's share of each domain's slots: ceil(slots / live workers), so
-- the workers of a cluster crawling few domains all get work
local held = {}
for _ = 1, tonumber(arg()) do
  local d, n = arg(), tonumber(arg())
  held[d] = n
end
local SHARE = CONC
if CONC > 0 and MAX_POP > 0 then
  local live = redis.call('ZCARD', P .. 'nodes')
  if live > 1 then SHARE = math.ceil(CONC / live) end
end

-- 11. recovery: expired leases, due retries, stale seed reads
local reaped = 0
for _, payload in ipairs(redis.call('ZRANGEBYSCORE', K_INF, '-inf', now, 'LIMIT', 0, REAP)) do
  redis.call('ZREM', K_INF, payload)
  requeue(payload)
  reaped = reaped + 1
end
bump('reaped', reaped)
for _, payload in ipairs(redis.call('ZRANGEBYSCORE', K_DEL, '-inf', now, 'LIMIT', 0, REAP)) do
  redis.call('ZREM', K_DEL, payload)
  requeue(payload)
end
for _, raw in ipairs(redis.call('ZRANGEBYSCORE', K_SEEDS_PENDING, '-inf', now, 'LIMIT', 0, REAP)) do
  redis.call('ZREM', K_SEEDS_PENDING, raw)
  redis.call('RPUSH', K_SEEDS, raw)
end

-- 12. lease requests from domains whose turn it is
for _, d in ipairs(redis.call('ZRANGEBYSCORE', K_WAIT, '-inf', now, 'LIMIT', 0, 512)) do
  redis.call('ZREM', K_WAIT, d)
  local head = redis.call('ZRANGE', P .. 'requests:' .. d, 0, 0, 'WITHSCORES')
  if head[1] then
    redis.call('ZADD', K_READY, band(tonumber(head[2])) * TWO32 + next_seq(), d)
  end
end

-- A domain stays ready under the band it had when it was scheduled; a popped
-- request of a worse band (its better ones are gone) reschedules the domain
-- under that band instead of being leased, so bands are served in order
-- without looking at each queue's head after every pop.
local popped = {}
local skipped = {} -- domains whose share this worker holds: score, domain (put back below)
local guard = 0
while #popped < 3 * MAX_POP and guard < 4 * MAX_POP do
  guard = guard + 1
  local top = redis.call('ZPOPMIN', K_READY)
  local d = top[1]
  if not d then break end
  local ready_band = band(tonumber(top[2]))
  local mine = held[d] or 0
  if CONC > 0 and mine >= SHARE then
    skipped[#skipped + 1] = top[2]
    skipped[#skipped + 1] = d
  else
    local q = P .. 'requests:' .. d
    local sk = P .. 'slots:' .. d
    local delay = domain_delay(d)
    local full = false
    if CONC > 0 then
      local taken = redis.call('ZCARD', sk)
      if taken >= CONC then
        redis.call('ZREMRANGEBYSCORE', sk, '-inf', now)
        taken = redis.call('ZCARD', sk)
      end
      full = taken >= CONC
    end
    if full then
      redis.call('ZADD', K_WAIT, now + math.max(delay, 50), d)
    else
      local item = redis.call('ZPOPMIN', q)
      local item_band = item[1] and band(tonumber(item[2]))
      if item_band and item_band > ready_band then
        redis.call('ZADD', q, item[2], item[1])
        redis.call('ZADD', K_READY, int(item_band * TWO32 + next_seq()), d)
      elseif item_band then
        redis.call('ZADD', K_INF, LEASE_END, item[1])
        local token = ''
        if CONC > 0 then
          -- The slot is held by the leased payload itself, so a lease that expires
          -- (its worker died) frees its slot at once, in `requeue`.
          token = '1'
          redis.call('ZADD', sk, SLOT_END, item[1])
          redis.call('PEXPIRE', sk, ARGV[7])
        end
        popped[#popped + 1] = item[1]
        popped[#popped + 1] = token
        popped[#popped + 1] = d
        held[d] = mine + 1
        if delay > 0 then
          thr_hset(d .. '|next', now + delay)
          redis.call('ZADD', K_WAIT, now + delay, d)
        else
          -- to the back of its band (round robin); an emptied queue drops out when next popped
          redis.call('ZADD', K_READY, int(ready_band * TWO32 + next_seq()), d)
        end
      end
    end
  end
end

if #skipped > 0 then redis.call('ZADD', K_READY, unpack(skipped)) end

-- 13. seeds
local seeds = {}
if SEED_N > 0 then
  for _ = 1, SEED_N do
    local raw = redis.call('RPOP', K_SEEDS)
    if not raw then break end
    redis.call('ZADD', K_SEEDS_PENDING, now + LEASE, raw)
    seeds[#seeds + 1] = raw
  end
end

-- 14. is there any work left in the cluster, and when is the next domain due?
local work = redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_WAIT) + redis.call('ZCARD', K_INF)
  + redis.call('ZCARD', K_DEL) + redis.call('LLEN', K_SEEDS) + redis.call('ZCARD', K_SEEDS_PENDING)
local wake = -1
if #popped == 0 then
  local w = redis.call('ZRANGE', K_WAIT, 0, 0, 'WITHSCORES')
  if w[1] then wake = tonumber(w[2]) - now end
  local dl = redis.call('ZRANGE', K_DEL, 0, 0, 'WITHSCORES')
  if dl[1] and (wake < 0 or tonumber(dl[2]) - now < wake) then wake = tonumber(dl[2]) - now end
end

-- 15. write back what was kept in Lua
seen_flush()
if seq then redis.call('SET', K_SEQ, seq) end
for field, n in pairs(bumps) do
  if n ~= 0 then redis.call('HINCRBY', K_STATS, field, n) end
end

return {popped, seeds, new, dups, reaped, work, wake}
