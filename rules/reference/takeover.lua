
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
local okNext, wanted = pcall(cjson.decode, ARGV[1])
if not okNext or type(wanted) ~= 'table' or wanted['runId'] == nil then return 0 end
local ok, decoded = pcall(cjson.decode, current)
if not ok or type(decoded) ~= 'table' then
  -- Legacy bare token. A live holder renews every TTL/3, so its remaining TTL
  -- never drops below 2*TTL/3; at or below TTL/2 the holder has stopped
  -- renewing and the lock is stale. A missing expiry is stale too, because
  -- every writer sets one. Refuse a still-live legacy lock so a rolling deploy
  -- cannot end up with two producers.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 and pttl > math.floor(tonumber(ARGV[2]) / 2) then return 0 end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if decoded['runId'] == nil then return 0 end
if decoded['runId'] ~= wanted['runId'] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
