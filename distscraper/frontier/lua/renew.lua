-- Extend the leases a live worker still holds. Only existing leases move
-- (XX): one that expired and went back to the queue stays there.
-- KEYS[1] = in-flight zset; ARGV[1] = lease time (ms); ARGV[2..] = payloads.
-- Deadlines use the Redis server's clock, like the exchange script's.
local clock = redis.call('TIME')
local deadline = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', deadline, ARGV[i])
end
return renewed
