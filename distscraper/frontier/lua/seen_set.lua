-- Exact dupefilter: a SET of 16-byte binary fingerprints.
-- seen_add(fp) returns 1 when fp is new (and records it), 0 when it was seen.
local function seen_add(fp)
  local k = ARGV[1] .. 'dupefilter'
  local added = redis.call('SADD', k, fp)
  if DUPEFILTER_TTL > 0 and added == 1 and redis.call('TTL', k) == -1 then
    redis.call('EXPIRE', k, DUPEFILTER_TTL)
  end
  return added
end
