-- Extend the leases a live worker still holds. Only existing leases move
-- (XX): one that expired and went back to the queue stays there.
-- KEYS[1] = in-flight zset; ARGV[1] = new deadline (ms); ARGV[2..] = payloads.
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[i])
end
return renewed
